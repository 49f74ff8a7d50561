//! Collapsed stacks (`root;...;leaf weight` per line), the input of
//! flamegraph.pl and inferno. Weighted by wait nanoseconds; the leaf
//! frame is the lock (`lock NAME`), as async-profiler's lock mode puts the
//! lock class on top of the waiting path.

use std::io::Write;

use crate::stacks::{Stacks, WeightedStack};

/// Which stacks to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Side {
    /// Wait by the waiter's call path (default).
    #[default]
    Waiters,
    /// Wait charged to the holder's call path (blame).
    Holders,
}

/// A frame name made safe for the format: `;` separates frames and a
/// line ends a stack, so both are replaced.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// The folded line of one stack (without the newline), or `None` for a
/// stack of zero wait (flame graphs cannot draw it).
pub fn line(s: &WeightedStack) -> Option<String> {
    if s.wait_ns == 0 {
        return None;
    }
    let mut out = String::new();
    for f in s.frames.iter().rev() {
        out.push_str(&clean(f));
        out.push(';');
    }
    out.push_str("lock ");
    out.push_str(&clean(&s.lock));
    out.push(' ');
    out.push_str(&s.wait_ns.to_string());
    Some(out)
}

/// Writes the stacks of one side; returns the total weight written (the
/// report's total wait).
pub fn write(stacks: &Stacks, side: Side, out: &mut dyn Write) -> std::io::Result<u64> {
    let v = match side {
        Side::Waiters => &stacks.waiters,
        Side::Holders => &stacks.holders,
    };
    let mut total = 0;
    for s in v {
        if let Some(l) = line(s) {
            writeln!(out, "{l}")?;
            total += s.wait_ns;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_root_first_with_the_lock_on_top() {
        let s = WeightedStack {
            lock: "q;lock".into(),
            frames: vec!["inner (a.c:1)".into(), "main (a.c:9)".into()],
            count: 2,
            wait_ns: 1500,
        };
        assert_eq!(
            line(&s).unwrap(),
            "main (a.c:9);inner (a.c:1);lock q:lock 1500"
        );
        assert_eq!(line(&WeightedStack { wait_ns: 0, ..s }), None);
    }
}
