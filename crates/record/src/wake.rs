//! The machine's wake-up latency of a sleeping waiter, measured before
//! the program starts and written to the trace header
//! ([`lockscope_format::Header::sleeping_wake_ns`]).
//!
//! Why: a what-if that turns a mutex into a reader-writer lock needs what
//! a waiter of that lock pays at a hand-off. glibc's rwlock waiters block
//! in the kernel at once (no spinning), so each hand-off between a writer
//! and readers costs a full wake-up: 33 us on average in a recording of
//! `tests/programs/whatif/rw_table.c` on the 2-vCPU development VM. The
//! recording of the mutex cannot show it: its waiters mostly got the lock
//! before they fell asleep. Like the hook costs (measured in the program
//! when recording starts), it is a property of the machine and its load,
//! so it is measured on the machine, each time, not assumed.
//!
//! How: a sleeper thread waits in `FUTEX_WAIT` for a word to say go; a
//! waker gives it [`SETTLE`] to fall asleep, stamps the clock, sets the
//! word and calls `FUTEX_WAKE`, then goes on running until the sleeper
//! ran, as a releasing writer goes on with its work. A sample is the time
//! from the stamp to the sleeper running, kept only when its wait really
//! slept and was woken (returned 0, not `EAGAIN`). The median of the
//! samples after a short warm-up. With one CPU it works the same way: the
//! waker spins up to [`SPIN_AFTER_WAKE`] for the scheduler to preempt it,
//! then naps.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Wake-ups wanted; fewer when the time runs out first.
const ROUNDS: usize = 300;
/// Samples the sleeper drops at its start (its first runs: page faults
/// on its stack, cold caches).
const WARM_UP: usize = 4;
/// Fewest samples for a figure. Few: on a loaded machine (the recorder
/// niced behind other jobs) a wake-up can take milliseconds and only a
/// handful fit in [`BUDGET`]; at 16 one recording in a dozen got no
/// figure at all there, and a median of 5 slow wake-ups says more than
/// none.
const MIN_SAMPLES: usize = 5;
/// How long the measurement takes at most once it has [`MIN_SAMPLES`]:
/// 300 wake-ups at the 30-50 us of a VM, each after the sleeper has slept
/// [`SETTLE`], take 15-20 ms; on a machine whose wake-ups take a few us
/// it ends in about 8 ms.
const BUDGET: Duration = Duration::from_millis(20);
/// How long it goes on when it has fewer: on a loaded machine (the
/// recorder niced behind other jobs, each thread getting a small share of
/// a CPU) two tries in a row got no figure in 20 ms.
const HARD_BUDGET: Duration = Duration::from_millis(60);
/// How long the waker spins for the sleeper before it leaves its CPU
/// (the sleeper may be queued behind it).
const SPIN_AFTER_WAKE: Duration = Duration::from_micros(200);
/// How long the waker gives the sleeper to get into the kernel before it
/// wakes it: a rwlock's reader sleeps about as long as a writer's
/// section, microseconds. A round where it was not asleep yet is not a
/// sample (its wait did not return 0). Short on purpose: the figure is
/// the least a sleeping waiter pays (the analysis takes the larger of it
/// and the recorded hand-off after a wait as long). Longer sleeps cost
/// more where the CPU goes deeper idle: on the development VM 3-10 us
/// after 20 us, 10-15 us after 0.2-3 ms (under load, niced).
const SETTLE: Duration = Duration::from_micros(20);
/// The longest a wait sleeps, or the waker spins for the sleeper to run,
/// before looking at the clock and the stop flag again: nothing can hang
/// on a wake that never comes.
const WAIT_TIMEOUT: Duration = Duration::from_millis(2);

const IDLE: u32 = 0;
const GO: u32 = 1;

struct PingPong {
    /// [`GO`] from the waker, back to [`IDLE`] by the sleeper.
    word: AtomicU32,
    /// Clock (ns since `base`) right before the last `FUTEX_WAKE`.
    stamp: AtomicU64,
    /// The sleeper has run after this many `GO`s.
    acks: AtomicU32,
    /// The sleeper is about to wait (set right before `FUTEX_WAIT`,
    /// cleared when it ran): the waker starts [`SETTLE`] from there.
    ready: AtomicBool,
    /// Samples taken (after the warm-up).
    taken: AtomicU32,
    stop: AtomicBool,
    base: Instant,
}

impl PingPong {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Sleeps while `word` is [`IDLE`], at most [`WAIT_TIMEOUT`]; true
    /// when a `FUTEX_WAKE` woke it (it had gone to sleep).
    fn wait(&self) -> bool {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: WAIT_TIMEOUT.as_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a live, aligned u32 (the AtomicU32 in the
        // shared PingPong, kept alive by both threads' Arc) with a valid
        // relative timeout; it only reads the word.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                IDLE,
                &ts as *const libc::timespec,
            )
        };
        r == 0
    }

    fn wake(&self) {
        // SAFETY: FUTEX_WAKE on a live, aligned u32 (as in `wait`); it does
        // not touch memory.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }

    /// The sleeping side, until `stop`: waits for [`GO`] in the kernel,
    /// and when woken from sleep, takes the time since the waker's stamp.
    fn sleeper(&self) -> Vec<u64> {
        let mut samples = Vec::with_capacity(ROUNDS);
        let mut warm = 0;
        while !self.stop.load(Ordering::Acquire) {
            let slept = self.word.load(Ordering::Acquire) == IDLE && {
                self.ready.store(true, Ordering::Release);
                self.wait()
            };
            if self.word.load(Ordering::Acquire) != GO {
                continue;
            }
            let at = self.now();
            if slept {
                if warm < WARM_UP {
                    warm += 1;
                } else {
                    samples.push(at.saturating_sub(self.stamp.load(Ordering::Acquire)));
                    self.taken.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.ready.store(false, Ordering::Release);
            self.word.store(IDLE, Ordering::Release);
            self.acks.fetch_add(1, Ordering::Release);
        }
        samples
    }

    /// The waking side: [`ROUNDS`] wake-ups, or until `soft` once it has
    /// [`MIN_SAMPLES`], or until `hard`. After each wake it keeps running
    /// until the sleeper ran, as a thread releasing a lock goes on with
    /// its work: the sleeper has to run on another CPU (or preempt it),
    /// which is the hand-off the figure is for. A waker that went to
    /// sleep itself right away would hand its own CPU over: a few us on
    /// the development VM where a real hand-off to a sleeping rwlock
    /// reader took tens.
    fn waker(&self, soft: u64, hard: u64) {
        // Spins until `done` or for `spin`, then sleeps in short naps
        // until `done` or `hard`: the other thread may be queued behind
        // it (one CPU), or behind other jobs on the other CPU, and an idle
        // CPU is what the scheduler moves it to. Yielding instead kept
        // this CPU busy: a niced sleeper queued behind a busy job on a
        // loaded machine did not run for 60 ms, one recording in seven
        // got no figure.
        let until = |spin: Duration, done: &dyn Fn() -> bool| {
            let t = self.now() + spin.as_nanos() as u64;
            while !done() && self.now() < t {
                std::hint::spin_loop();
            }
            while !done() && self.now() < hard {
                std::thread::sleep(Duration::from_micros(50));
            }
            done()
        };
        for _ in 0..ROUNDS + WARM_UP {
            let now = self.now();
            if now > hard
                || (now > soft && self.taken.load(Ordering::Relaxed) as usize >= MIN_SAMPLES)
            {
                break;
            }
            let seen = self.acks.load(Ordering::Acquire);
            if !until(SPIN_AFTER_WAKE, &|| self.ready.load(Ordering::Acquire)) {
                break;
            }
            let settle = self.now() + SETTLE.as_nanos() as u64;
            while self.now() < settle {
                std::hint::spin_loop();
            }
            self.stamp.store(self.now(), Ordering::Release);
            self.word.store(GO, Ordering::Release);
            self.wake();
            if !until(SPIN_AFTER_WAKE, &|| {
                self.acks.load(Ordering::Acquire) != seen
            }) {
                break;
            }
        }
        self.stop.store(true, Ordering::Release);
        self.word.store(GO, Ordering::Release);
        self.wake();
    }
}

/// The median wake-up latency of a thread sleeping in `FUTEX_WAIT` while
/// its waker goes on running, ns, measured now (about [`BUDGET`], at
/// most [`HARD_BUDGET`] on a loaded machine); `None` when too few wake-ups from sleep were seen (the
/// second thread could not be started or hardly ran).
pub(crate) fn sleeping_wake_ns() -> Option<u64> {
    let pp = Arc::new(PingPong {
        word: AtomicU32::new(IDLE),
        stamp: AtomicU64::new(0),
        acks: AtomicU32::new(0),
        ready: AtomicBool::new(false),
        taken: AtomicU32::new(0),
        stop: AtomicBool::new(false),
        base: Instant::now(),
    });
    let start = pp.now();
    let (soft, hard) = (
        start + BUDGET.as_nanos() as u64,
        start + HARD_BUDGET.as_nanos() as u64,
    );
    let other = Arc::clone(&pp);
    let h = std::thread::Builder::new()
        .name("lockscope-wake".into())
        .stack_size(64 << 10)
        .spawn(move || other.sleeper())
        .ok()?;
    pp.waker(soft, hard);
    // The sleeper sees the stop within one wait timeout.
    let mut samples = h.join().ok()?;
    if samples.len() < MIN_SAMPLES {
        return None;
    }
    samples.sort_unstable();
    Some(samples[samples.len() / 2]).filter(|&ns| ns > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_waiter_is_woken_within_the_budget_and_measured() {
        let t = Instant::now();
        let ns = sleeping_wake_ns().expect("a figure");
        let took = t.elapsed();
        // A wake-up takes more than a clock read and less than the wait
        // timeout (it would mean no wake ever came).
        assert!(ns > 100 && ns < 2_000_000, "{ns} ns");
        assert!(
            took < HARD_BUDGET + 2 * WAIT_TIMEOUT + Duration::from_millis(30),
            "{took:?}"
        );
    }
}
