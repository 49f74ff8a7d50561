// The kernel side of attach mode (`lockscope record -p PID`): every
// futex wait of the attached processes that slept at least the minimum,
// and every wake that woke a thread, with the caller's user registers and
// a copy of the top of its user stack, so that the recorder can unwind
// the call path offline with the binaries' CFI (most code has no frame
// pointers, so the kernel's own frame-pointer walk stops in libc).
//
// Raw tracepoints on sys_enter/sys_exit. They run for every system call
// of every process while attached, so the first thing each does is
// compare the syscall number; measured, a getppid() of any program costs
// about +200 ns meanwhile. Alternatives tried, not taken:
// - the syscalls:sys_{enter,exit}_futex tracepoints (futex calls only,
//   registers from bpf_task_pt_regs): still +60-90 ns on every system
//   call (enabling any syscall tracepoint puts every task on the slow
//   system-call path), and they missed 4-7 % of the waits of a program
//   with more threads than CPUs without a trace of it (the perf-event
//   tracepoint runner skips a program while another one is active on
//   the CPU), where the raw ones saw every wait;
// - fentry/fexit on __x64_sys_futex: refused (EPERM) where ftrace's
//   function hooks are locked down, as on the machines this was built on;
// - kprobes: absent from kernels built without CONFIG_KPROBES.
//
// Written for x86-64 (pt_regs offsets below); no libbpf headers: the few
// helper declarations and map macros are spelled out here.

typedef unsigned long long u64;
typedef long long s64;
typedef unsigned int u32;
typedef int s32;

#define SEC(name) __attribute__((section(name), used))
#define MAP_UINT(name, val) int (*name)[val]
#define MAP_TYPE(name, val) typeof(val) *name

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_RINGBUF 27

#define NR_FUTEX 202
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_CMD_MASK (~(128u | 256u))

// Offsets in x86-64's struct pt_regs (the kernel's user-mode registers).
#define REG_BP 32
#define REG_ORIG_AX 120
#define REG_IP 128
#define REG_SP 152

// Bytes of user stack copied per event (perf's default for DWARF call
// graphs); a smaller copy when the larger one crosses the end of the
// mapping.
#define STACK_BYTES 8192
#define STACK_SMALL 1024

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_user)(void *dst, u32 size, const void *src) = (void *)112;
static long (*bpf_probe_read_kernel)(void *dst, u32 size, const void *src) = (void *)113;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, u64 size, u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, u64 flags) = (void *)132;

// Shared with src/bpf.rs (same layout, #[repr(C)]).
struct config {
    u64 min_wait_ns;
    u32 all;   // every process, not only those in PIDS
    u32 pad;
};
struct pending {
    u64 start;
    u64 uaddr;
    u32 op;
    u32 val;
};
struct event {
    u32 kind;       // 1: a wait, 2: a wake that woke a thread
    u32 tgid;
    u32 tid;
    u32 stack_len;  // bytes of `stack` copied from `sp` (0: none)
    u64 uaddr;
    u64 start;
    u64 end;
    s64 ret;
    u32 op;
    u32 val;
    u64 ip;
    u64 sp;
    u64 bp;
    unsigned char stack[STACK_BYTES];
};

struct { MAP_UINT(type, BPF_MAP_TYPE_ARRAY); MAP_UINT(max_entries, 1); MAP_TYPE(key, u32); MAP_TYPE(value, struct config); } CONFIG SEC(".maps");
struct { MAP_UINT(type, BPF_MAP_TYPE_HASH); MAP_UINT(max_entries, 1024); MAP_TYPE(key, u32); MAP_TYPE(value, u32); } PIDS SEC(".maps");
// Calls in progress, by thread: what the exit needs from the entry. Read
// by the recorder at the end too: a thread still in a wait then is
// blocked (a deadlock, a hang).
struct { MAP_UINT(type, BPF_MAP_TYPE_HASH); MAP_UINT(max_entries, 65536); MAP_TYPE(key, u32); MAP_TYPE(value, struct pending); } PENDING SEC(".maps");
struct { MAP_UINT(type, BPF_MAP_TYPE_RINGBUF); MAP_UINT(max_entries, 1 << 24); } EVENTS SEC(".maps");
// 0: events dropped because the ring was full; 1: calls not followed
// because PENDING was full; 2: stacks that could not be copied.
struct { MAP_UINT(type, BPF_MAP_TYPE_ARRAY); MAP_UINT(max_entries, 4); MAP_TYPE(key, u32); MAP_TYPE(value, u64); } COUNTERS SEC(".maps");

struct raw_args { u64 args[2]; };

static void count(u32 which) {
    u64 *c = bpf_map_lookup_elem(&COUNTERS, &which);
    if (c)
        __sync_fetch_and_add(c, 1);
}

static u64 reg(const void *regs, u32 off) {
    u64 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (const char *)regs + off);
    return v;
}

SEC("raw_tracepoint/sys_enter")
int futex_enter(struct raw_args *ctx) {
    if (ctx->args[1] != NR_FUTEX)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id, zero = 0;
    struct config *cfg = bpf_map_lookup_elem(&CONFIG, &zero);
    if (!cfg)
        return 0;
    if (!cfg->all && !bpf_map_lookup_elem(&PIDS, &tgid))
        return 0;
    const void *regs = (const void *)ctx->args[0];
    // The futex arguments, from the user registers (di, si, dx).
    u64 uaddr = reg(regs, 112), op = reg(regs, 104), val = reg(regs, 96);
    u32 cmd = (u32)op & FUTEX_CMD_MASK;
    if (cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET && cmd != FUTEX_WAKE && cmd != FUTEX_WAKE_BITSET)
        return 0;
    struct pending p = { bpf_ktime_get_ns(), uaddr, (u32)op, (u32)val };
    if (bpf_map_update_elem(&PENDING, &tid, &p, 0) != 0)
        count(1);
    return 0;
}

SEC("raw_tracepoint/sys_exit")
int futex_exit(struct raw_args *ctx) {
    const void *regs = (const void *)ctx->args[0];
    if (reg(regs, REG_ORIG_AX) != NR_FUTEX)
        return 0;
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id, zero = 0;
    struct pending *pp = bpf_map_lookup_elem(&PENDING, &tid);
    if (!pp)
        return 0;
    struct pending p = *pp;
    bpf_map_delete_elem(&PENDING, &tid);
    struct config *cfg = bpf_map_lookup_elem(&CONFIG, &zero);
    if (!cfg)
        return 0;
    u64 now = bpf_ktime_get_ns();
    s64 ret = (s64)ctx->args[1];
    u32 cmd = p.op & FUTEX_CMD_MASK;
    u32 kind;
    if (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET) {
        if (now - p.start < cfg->min_wait_ns)
            return 0;
        kind = 1;
    } else {
        // A wake that found nobody asleep is not contention.
        if (ret <= 0)
            return 0;
        kind = 2;
    }
    struct event *e = bpf_ringbuf_reserve(&EVENTS, sizeof(struct event), 0);
    if (!e) {
        count(0);
        return 0;
    }
    e->kind = kind;
    e->tgid = tgid;
    e->tid = tid;
    e->uaddr = p.uaddr;
    e->start = p.start;
    e->end = now;
    e->ret = ret;
    e->op = p.op;
    e->val = p.val;
    e->ip = reg(regs, REG_IP);
    e->sp = reg(regs, REG_SP);
    e->bp = reg(regs, REG_BP);
    e->stack_len = 0;
    if (bpf_probe_read_user(e->stack, STACK_BYTES, (const void *)e->sp) == 0)
        e->stack_len = STACK_BYTES;
    else if (bpf_probe_read_user(e->stack, STACK_SMALL, (const void *)e->sp) == 0)
        e->stack_len = STACK_SMALL;
    else
        count(2);
    bpf_ringbuf_submit(e, 0);
    return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
