//! Speed and memory of every export on one trace (figures, not a test).
//!
//! ```text
//! cargo run --release -p lockscope-analysis --example bench_report -- 20000000 4 /tmp/big.lstrace
//! cargo run --release -p lockscope-export --example bench_export -- /tmp/big.lstrace
//! ```
//!
//! `scan` (not a format; name it to run it) is the timeline walk alone,
//! the floor of perfetto, perfetto-proto, speedscope and html; its
//! "output" is the number of timeline items.
//!
//! Each format runs in a child process (this program re-run with
//! `--one FORMAT TRACE`), writing to a counting sink, so that the peak RSS
//! printed is the export's own. Symbolization is off (a synthetic trace
//! has no binaries to read).

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use lockscope_export::{folded, html, perfetto, perfetto_proto, pprof, speedscope, stacks};
use lockscope_report::ReportConfig;

struct Count(u64);

impl Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn rss_peak_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds (user + system) of this process so far: less disturbed
/// than wall time by other jobs on a shared machine.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces).
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(0.0)
}

fn one(format: &str, trace: &Path) {
    let t0 = Instant::now();
    let cfg = ReportConfig {
        symbolize: false,
        ..ReportConfig::default()
    };
    let mut out = Count(0);
    let meta = lockscope_trace::input::index(trace, &mut |_, _| {}).expect("index");
    match format {
        "folded" | "pprof" => {
            let r = lockscope_report::analyze(trace, &cfg, &mut |_, _, _| {}).expect("report");
            let s = stacks::from_report(&r);
            if format == "pprof" {
                let info = pprof::ProfileInfo {
                    command: r.command.clone(),
                    duration_ns: r.duration_ns,
                    labels: r.labels.clone().into_iter().collect(),
                };
                pprof::write(&s, &info, &mut out).unwrap();
            } else {
                folded::write(&s, folded::Side::Waiters, &mut out).unwrap();
            }
        }
        "perfetto" => {
            perfetto::write(trace, &meta, false, &mut out).unwrap();
        }
        "scan" => {
            // The floor of the timeline formats: the synchronization
            // layer's walk alone, nothing written.
            let mut n = 0u64;
            lockscope_export::timeline::scan(trace, &meta, |_| n += 1).unwrap();
            out.0 = n;
        }
        "perfetto-proto" => {
            perfetto_proto::write(trace, &meta, false, &mut out).unwrap();
        }
        "speedscope" => {
            speedscope::write(trace, &meta, false, &mut out).unwrap();
        }
        "html" => {
            // As `lockscope html` does: the report and the timeline from
            // one read of the trace.
            let opts = html::HtmlOptions {
                symbolize: false,
                ..html::HtmlOptions::default()
            };
            html::write_analyzed(trace, &meta, &cfg, &opts, &mut |_| None, &mut out).unwrap();
        }
        "html-two-pass" => {
            // The report, then the timeline on a second read (what a
            // trace without a footer gets).
            let r = lockscope_report::analyze(trace, &cfg, &mut |_, _, _| {}).expect("report");
            let opts = html::HtmlOptions {
                symbolize: false,
                ..html::HtmlOptions::default()
            };
            let extra = lockscope_analysis::full::sections(trace, &meta, &r, false, &mut |_| None);
            html::write(trace, &meta, &r, &extra, &opts, &mut out).unwrap();
        }
        f => panic!("unknown format {f}"),
    }
    let cpu = cpu_s();
    println!(
        "{format:<14} {:>7.2} s  CPU {:>6.2} s  {:>6.2} M events/CPU-s  peak RSS {:>6.1} MB  output {:>8.1} MB",
        t0.elapsed().as_secs_f64(),
        cpu,
        meta.events as f64 / cpu.max(0.01) / 1e6,
        rss_peak_kb() as f64 / 1024.0,
        out.0 as f64 / 1e6
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--one") {
        one(&args[2], Path::new(&args[3]));
        return;
    }
    let Some(trace) = args.get(1) else {
        eprintln!("usage: bench_export TRACE [FORMAT...]");
        std::process::exit(2);
    };
    let size = std::fs::metadata(trace).map(|m| m.len()).unwrap_or(0);
    println!("trace {trace}: {:.1} MB", size as f64 / 1e6);
    let all = [
        "folded",
        "pprof",
        "perfetto",
        "perfetto-proto",
        "speedscope",
        "html",
    ];
    let formats: Vec<&str> = if args.len() > 2 {
        args[2..].iter().map(String::as_str).collect()
    } else {
        all.to_vec()
    };
    let me = std::env::current_exe().unwrap();
    for f in formats {
        let st = std::process::Command::new(&me)
            .args(["--one", f, trace])
            .status()
            .unwrap();
        assert!(st.success(), "{f} failed");
    }
}
