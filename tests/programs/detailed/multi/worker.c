/* Critical sections: cs_lookup only reads table[0]; cs_store writes the
 * thread's own table entry. Pairs: two lookups are read_read, anything
 * with a store is disjoint_write (a lookup reads table[0], which only
 * thread 0's store writes: then it is a conflict). */
#include <sched.h>
#include "shared.h"

__attribute__((noinline)) long cs_lookup(int id) {
    pthread_mutex_lock(&table_lock);
    note(id, 0);
    long v = table[0];
    pthread_mutex_unlock(&table_lock);
    return v;
}

__attribute__((noinline)) long cs_store(int id) {
    pthread_mutex_lock(&table_lock);
    note(id, 1);
    table[id] += 1;
    pthread_mutex_unlock(&table_lock);
    return 0;
}

void *worker(void *arg) {
    int id = (int)(long)arg;
    unsigned x = 5u + 11u * (unsigned)id;
    for (int r = 0; r < ROUNDS; r++) {
        x = x * 1103515245u + 12345u;
        if ((x >> 16) & 1)
            cs_lookup(id);
        else
            cs_store(id);
        sched_yield();
    }
    return 0;
}
