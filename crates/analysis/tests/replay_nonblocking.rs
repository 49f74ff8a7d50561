//! A call that could have waited but did not (`sem_trywait`, a
//! `sem_wait` on a posted semaphore) ends a segment of work; the replay
//! must not replay that work a second time as a wait. It did, and
//! python3's GIL program (whose main thread calls `sem_trywait`
//! thousands of times) replayed 36-59 % longer than recorded.

mod common;

use common::*;
use lockscope_format::Op;
use lockscope_replay::replay;
use lockscope_trace::input;

const MS: u64 = 1_000_000;
const SEM: u64 = 0x5e00;

#[test]
fn a_trywait_or_an_unblocked_sem_wait_is_not_replayed_as_a_wait() {
    let mut tb = Tb::new();
    tb.thread(1, "main", 0, 10 * MS);
    // 3 ms of work, a successful trywait, 3 ms, a failed one (EAGAIN),
    // 2 ms, a sem_wait that did not block, 2 ms: 10 ms of work, no wait.
    tb.ev(1, 3 * MS, Op::SemTrywait, DONE, SEM, 0x10)
        .ev_full(1, 6 * MS, Op::SemTrywait, FAIL, SEM, 0x10, 11, 0)
        .ev(1, 8 * MS, Op::SemWait, DONE, SEM, 0x20);
    let path = tb.write();
    let meta = input::index(&path, &mut |_, _| {}).unwrap();
    for p in [
        replay::build(&path, &meta).unwrap(),
        replay::build_in_memory(&path, &meta).unwrap(),
    ] {
        let sleeps: Vec<_> = p
            .actions(0)
            .filter(|a| matches!(a, replay::Action::Sleep(_)))
            .collect();
        assert!(sleeps.is_empty(), "{sleeps:?}");
        let r = replay::report(&p, 2).unwrap();
        assert_eq!(r.recorded_wall_ns, 10 * MS);
        assert_eq!(r.replayed_wall_ns, 10 * MS, "{r:?}");
    }
}
