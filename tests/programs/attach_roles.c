// Attach-mode fixture for the roles a report gives futex words: a
// pthread rwlock taken by two readers and two writers, and a queue whose
// mutex and condition variable a producer and a consumer share, for 3 s.
// Prints "done".
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t qm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qc = PTHREAD_COND_INITIALIZER;
static int items; static volatile long sink; static double stop;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void *rw_worker(void *a){long i=(long)a;while(now()<stop){if(i%2){pthread_rwlock_wrlock(&rw);for(int k=0;k<3000;k++)sink+=k;pthread_rwlock_unlock(&rw);}else{pthread_rwlock_rdlock(&rw);for(int k=0;k<3000;k++)sink+=k;pthread_rwlock_unlock(&rw);}}return 0;}
static void *prod(void *a){while(now()<stop){pthread_mutex_lock(&qm);items++;pthread_cond_signal(&qc);pthread_mutex_unlock(&qm);for(int k=0;k<20000;k++)sink+=k;}pthread_mutex_lock(&qm);items=-1000000;pthread_cond_broadcast(&qc);pthread_mutex_unlock(&qm);return 0;}
static void *cons(void *a){for(;;){pthread_mutex_lock(&qm);while(items==0)pthread_cond_wait(&qc,&qm);if(items<0){pthread_mutex_unlock(&qm);return 0;}items--;pthread_mutex_unlock(&qm);}}
int main(void){stop=now()+3;pthread_t t[6];for(long i=0;i<4;i++)pthread_create(&t[i],0,rw_worker,(void*)i);pthread_create(&t[4],0,prod,0);pthread_create(&t[5],0,cons,0);for(int i=0;i<6;i++)pthread_join(t[i],0);puts("done");return 0;}
