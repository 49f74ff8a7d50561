//! Counts the records of a trace by kind, for eyeballing a recording:
//! `cargo run --release -p lockscope-bench --example trace_stats -- FILE`.
use std::collections::BTreeMap;

use lockscope_format::{Record, TraceReader};

fn main() {
    let path = std::env::args().nth(1).expect("usage: trace_stats FILE");
    let f = std::io::BufReader::new(std::fs::File::open(&path).expect("open"));
    let mut r = TraceReader::new(f).unwrap_or_else(|e| panic!("{path}: {e}"));
    println!("command: {:?}", r.header().command);
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut maps, mut with_id) = (0, 0);
    loop {
        match r.next() {
            Ok(Some(rec)) => {
                let k = match &rec {
                    Record::String(_) => "string",
                    Record::Process(_) => "process",
                    Record::ProcessEnd(_) => "process-end",
                    Record::Thread(_) => "thread",
                    Record::ThreadName(_) => "thread-name",
                    Record::ThreadEnd(_) => "thread-end",
                    Record::Map(m) => {
                        maps += 1;
                        with_id += u64::from(!m.build_id.is_empty());
                        "map"
                    }
                    Record::Stack(_) => "stack",
                    Record::Lock(_) => "lock",
                    Record::Events(_) => "events",
                    Record::Loss(_) => "loss",
                    Record::Overhead(_) => "overhead",
                    Record::Footer(_) => "footer",
                    _ => "other",
                };
                *kinds.entry(k).or_default() += 1;
            }
            Ok(None) => break,
            Err(e) => {
                println!("error: {e}");
                break;
            }
        }
    }
    for (k, n) in kinds {
        println!("{k:12} {n}");
    }
    println!("maps with a build-id: {with_id} of {maps}");
    println!("footer: {:?}", r.footer());
}
