/* A stand-in for NVIDIA's libcupti.so, for testing lockscope's GPU capture
 * on machines without a GPU. It implements the CUPTI entry points that
 * lockscope's preload library calls, with CUPTI's C signatures, and lets a
 * test program play the CUDA driver: fake_api() fires the API callback at
 * entry and exit of a named "CUDA call" (as CUPTI would), fake_kernel() and
 * fake_copy() queue activity records that cuptiActivityFlushAll() delivers
 * through the registered buffer callbacks, laid out like CUPTI 11/12's
 * CUpti_ActivityKernel4+ and CUpti_ActivityMemcpy. Clock: CLOCK_MONOTONIC
 * in ns (cuptiGetTimestamp). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*buf_req_t)(uint8_t **, size_t *, size_t *);
typedef void (*buf_done_t)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef void (*cb_t)(void *, uint32_t, uint32_t, const void *);

static buf_req_t req;
static buf_done_t done;
static cb_t callback;
static void *userdata;
static int enabled_domains;

#define REC 160
#define MAXREC 256
static uint8_t pending[MAXREC][REC];
static int npending;

uint64_t fake_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cuptiGetTimestamp(uint64_t *t) { *t = fake_now(); return 0; }
int cuptiActivityRegisterCallbacks(buf_req_t r, buf_done_t d) { req = r; done = d; return 0; }
int cuptiActivityEnable(uint32_t kind) { (void)kind; return 0; }
int cuptiSubscribe(void **sub, cb_t cb, void *ud) { *sub = (void *)1; callback = cb; userdata = ud; return 0; }
int cuptiEnableDomain(uint32_t enable, void *sub, uint32_t domain) {
    (void)sub;
    if (enable) enabled_domains |= 1 << domain;
    return 0;
}

int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, uint8_t **rec) {
    uint8_t *next = *rec ? *rec + REC : buf;
    if (next + REC > buf + valid) return 1; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
    *rec = next;
    return 0;
}

int cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    if (!npending || !req || !done) return 0;
    uint8_t *buf; size_t size, max;
    req(&buf, &size, &max);
    if (!buf || size < (size_t)npending * REC) return 1;
    memcpy(buf, pending, (size_t)npending * REC);
    size_t valid = (size_t)npending * REC;
    npending = 0;
    done(0, 0, buf, size, valid);
    return 0;
}

static void put32(uint8_t *r, int off, uint32_t v) { memcpy(r + off, &v, 4); }
static void put64(uint8_t *r, int off, uint64_t v) { memcpy(r + off, &v, 8); }

/* Queues a kernel that ran [start, end) (ns, fake_now's clock). */
void fake_kernel(uint64_t start, uint64_t end, uint32_t corr, uint32_t stream) {
    uint8_t *r = pending[npending++];
    memset(r, 0, REC);
    put32(r, 0, 10); /* CONCURRENT_KERNEL */
    put64(r, 16, start);
    put64(r, 24, end);
    put32(r, 40, 0);
    put32(r, 48, stream);
    put32(r, 92, corr);
}

/* Queues a copy; kind 1 = host to device, 2 = device to host. */
void fake_copy(uint64_t start, uint64_t end, uint32_t corr, uint8_t kind, uint64_t bytes) {
    uint8_t *r = pending[npending++];
    memset(r, 0, REC);
    put32(r, 0, 1); /* MEMCPY */
    r[4] = kind;
    put64(r, 8, bytes);
    put64(r, 16, start);
    put64(r, 24, end);
    put32(r, 32, 0);
    put32(r, 40, 7);
    put32(r, 44, corr);
}

/* CUpti_CallbackData as CUPTI lays it out. */
struct cbdata {
    uint32_t site;            /* 0 enter, 1 exit */
    const char *name;         /* @8 */
    const void *params;       /* @16 */
    void *ret;                /* @24 */
    const char *symbol;       /* @32 */
    void *context;            /* @40 */
    uint32_t context_uid;     /* @48 */
    uint64_t *corr_data;      /* @56 */
    uint32_t corr;            /* @64 */
};

/* Fires the callback for entry (site 0) or exit (site 1) of API `name`
 * in domain 1 (runtime) or 2 (driver), with `symbol` as the callback
 * data's symbolName (the kernel's name, which CUPTI gives at launches;
 * 0 for none). */
void fake_api_sym(uint32_t domain, const char *name, const void *params, uint32_t corr,
                  uint32_t site, const char *symbol) {
    if (!callback || !(enabled_domains & (1 << domain))) return;
    struct cbdata d = {0};
    d.site = site;
    d.name = name;
    d.params = params;
    d.symbol = symbol;
    d.corr = corr;
    callback(userdata, domain, 0, &d);
}

void fake_api(uint32_t domain, const char *name, const void *params, uint32_t corr, uint32_t site) {
    fake_api_sym(domain, name, params, corr, site, 0);
}
