/* Shared state of the multi-file fixture: the lock lives in main.c, the
 * critical sections in worker.c. */
#include <pthread.h>

#define THREADS 3
#define ROUNDS 100
#define MAXLOG (THREADS * ROUNDS)

extern pthread_mutex_t table_lock;
extern long table[THREADS];
extern long lookups;

long cs_lookup(int id);
long cs_store(int id);
void *worker(void *arg);

/* Ground-truth log (not instrumented). */
void note(int thread, int kind);
