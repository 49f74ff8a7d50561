//! GPU capture and `lockscope gpu` without a GPU: a stand-in libcupti
//! (tests/programs/gpu/fake_cupti.c, CUPTI's entry points and record
//! layouts) and a program that plays the CUDA driver with a known
//! schedule (tests/programs/gpu/fake_cuda_app.c). What this checks: the
//! recorder points CUDA_INJECTION64_PATH at the preload library, which
//! attaches to "CUPTI", records launches, waits and activities with
//! their correlation, converts GPU times to the trace clock, and the
//! analysis charges idleness as documented. What it cannot check: real
//! CUPTI's struct layouts (validated on a GPU machine; see docs/gpu.md).

use crate::record_util;
use record_util::*;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use lockscope_format::{phase, Op};

fn build(dir: &Path) -> (PathBuf, PathBuf) {
    build_gpu_fixture(dir)
}

fn record_with(
    dir: &Path,
    cupti: &Path,
    extra: &[&str],
    app: &Path,
    args: &[&str],
) -> (String, String, PathBuf) {
    let trace = dir.join(format!("t{}.lstrace", extra.len() + args.len()));
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("record")
        .args(extra)
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(app)
        .args(args)
        .env("LOCKSCOPE_CUPTI", cupti)
        .env_remove("CUDA_INJECTION64_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        trace,
    )
}

fn gpu_json(trace: &Path) -> serde_json::Value {
    serde_json::from_slice(&lockscope_ok(&[
        OsStr::new("gpu"),
        OsStr::new("--json"),
        trace.as_os_str(),
    ]))
    .unwrap()
}

const MS: u64 = 1_000_000;

/// Runs `lockscope ARGS`.
fn lockscope(args: &[&OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `lockscope ARGS`, which must succeed; its stdout.
fn lockscope_ok(args: &[&OsStr]) -> Vec<u8> {
    let out = lockscope(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn gpu_capture_records_launches_waits_and_kernels_of_a_known_schedule() {
    let dir = temp("gpu_known");
    let (lib, app) = build(&dir);
    let (stdout, stderr, trace) = record_with(&dir, &lib, &[], &app, &[]);
    assert!(stdout.contains("attached 1"), "{stdout}\n{stderr}");
    assert!(stdout.contains("kernels 2 copies 1"), "{stdout}");

    // The raw events: 3 launches (the nested driver call is not
    // recorded), 2 waits with BEGIN and END, 3 activities.
    let t = lockscope_format::Trace::open(&trace).unwrap();
    let all: Vec<_> = t.events.values().flatten().copied().collect();
    let of = |op: Op| all.iter().filter(|e| e.op == op as u8).count();
    assert_eq!(of(Op::GpuLaunch), 3);
    assert_eq!(of(Op::GpuSync), 4);
    assert_eq!(of(Op::GpuActivity), 3);
    for e in all.iter().filter(|e| e.op == Op::GpuSync as u8) {
        assert!(matches!(e.phase(), phase::BEGIN | phase::END));
    }
    // GPU times are in trace ns: each kernel starts 0.5-1 ms after its
    // launch call by construction (a few ms of slack for a loaded
    // machine), and lasts what the program said, within clock error.
    let launch_time = |corr: u64| {
        all.iter()
            .find(|e| e.op == Op::GpuLaunch as u8 && e.arg == corr)
            .unwrap()
            .time
    };
    for e in all.iter().filter(|e| e.op == Op::GpuActivity as u8) {
        let corr = e.arg2 & 0xffff_ffff;
        let (start, end) = (e.addr, e.arg);
        // (duration, start relative to the launch call) by construction.
        let (want, offset) = match corr {
            1 => (20 * MS, MS),
            3 => (10 * MS, MS / 2),
            4 => (MS / 2, 10 * MS + MS / 2),
            c => panic!("unexpected correlation {c}"),
        };
        let dur = end - start;
        assert!(
            dur.abs_diff(want) <= want / 100,
            "corr {corr}: {dur} ns, want {want}"
        );
        let l = launch_time(corr) + offset;
        assert!(
            start + 5 * MS > l && start < l + 5 * MS,
            "corr {corr}: starts at {start}, expected about {l}"
        );
    }

    let r = gpu_json(&trace);
    assert_eq!(r["schema"], "lockscope.gpu/1");
    assert_eq!(r["has_gpu"], true);
    assert_eq!(r["correlated"], 3);
    assert_eq!(r["uncorrelated"], 0);
    assert_eq!(r["d2h_bytes"], 4096);
    assert_eq!(r["h2d_bytes"], 0);
    let work = r["work"].as_array().unwrap();
    let find = |prefix: &str| {
        work.iter()
            .find(|w| w["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {work:#?}"))
    };
    let k1 = find("kernel_one");
    let k2 = find("kernel_two");
    assert!(find("copy device-to-host")["launched_at"]
        .as_str()
        .unwrap()
        .starts_with("launch_two"));
    assert!(
        k1["launched_at"]
            .as_str()
            .unwrap()
            .starts_with("launch_one"),
        "{k1}"
    );
    assert!(
        k2["launched_at"]
            .as_str()
            .unwrap()
            .starts_with("launch_two"),
        "{k2}"
    );
    // The CPU waited in both syncs; the time it waited while a kernel ran
    // is charged to that kernel, never more than the kernel ran.
    let paths = r["cpu_paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2, "{paths:#?}");
    for (what, func) in [
        ("device synchronize", "sync_device"),
        ("stream synchronize", "sync_stream"),
    ] {
        let p = paths.iter().find(|p| p["what"] == what).unwrap();
        assert_eq!(p["calls"], 1);
        assert!(p["path"].as_str().unwrap().starts_with(func), "{p}");
    }
    for k in [k1, k2] {
        let c = k["cpu_idle_caused_ns"].as_u64().unwrap();
        assert!(c > 0 && c <= k["gpu_ns"].as_u64().unwrap(), "{k}");
    }
    let caused: u64 = work
        .iter()
        .map(|w| w["cpu_idle_caused_ns"].as_u64().unwrap())
        .sum();
    let blamed: u64 = paths
        .iter()
        .map(|p| p["blamed_on_gpu_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(caused, blamed, "CPU idleness charged exactly once");
    // The GPU idled while host_work ran (10 ms by construction, more on a
    // slow machine): charged to the launch that ended that gap.
    let causes = r["gpu_idle_causes"].as_array().unwrap();
    let l2 = causes
        .iter()
        .find(|c| c["path"].as_str().unwrap().starts_with("launch_two"))
        .unwrap();
    assert!(
        l2["gpu_idle_caused_ns"].as_u64().unwrap() >= 10 * MS,
        "{l2}"
    );
    let charged: u64 = causes
        .iter()
        .map(|c| c["gpu_idle_caused_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(
        charged + r["gpu_idle_unattributed_ns"].as_u64().unwrap(),
        r["gpu_idle_ns"].as_u64().unwrap(),
        "GPU idleness charged exactly once"
    );
    // The timing report counts the same waits as time blocked on the GPU
    // (the sync layer's Blocked(Gpu) segments), less the recorder's
    // per-event cost it subtracts.
    let stdout = lockscope_ok(&[
        OsStr::new("report"),
        OsStr::new("--json"),
        trace.as_os_str(),
    ]);
    let rep: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let gpu_wait: u64 = rep["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["gpu_wait_ns"].as_u64().unwrap())
        .sum();
    let cpu_wait = r["cpu_wait_ns"].as_u64().unwrap();
    assert!(
        gpu_wait <= cpu_wait && cpu_wait - gpu_wait < MS,
        "report {gpu_wait} ns blocked on the GPU, gpu {cpu_wait} ns"
    );
    // The text report ends with the GPU section.
    let out = lockscope(&[
        OsStr::new("report"),
        OsStr::new("--wide"),
        trace.as_os_str(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("GPU (CPU-GPU blame shifting"), "{text}");
    assert!(text.contains("WHO MAKES THE GPU WAIT"), "{text}");
    assert!(
        r["verdict"].as_str().unwrap().contains("launch_two"),
        "{}",
        r["verdict"]
    );
}

#[test]
fn gpu_capture_is_off_without_cupti_and_with_no_gpu() {
    let dir = temp("gpu_off");
    let (_, app) = build(&dir);
    // No libcupti anywhere: the injection declines and says why, the
    // program runs normally.
    let missing = &dir.join("no-such-libcupti.so");
    let (stdout, stderr, trace) = record_with(&dir, missing.as_path(), &[], &app, &["init-only"]);
    if !stdout.contains("attached 0") {
        // A machine with a real libcupti.so on the loader path attaches.
        assert!(stdout.contains("attached 1"), "{stdout}\n{stderr}");
    } else {
        assert!(
            stderr.contains("GPU capture off: libcupti.so not found"),
            "{stderr}"
        );
    }
    let r = gpu_json(&trace);
    assert_eq!(r["has_gpu"], false);
    assert!(r["verdict"].as_str().unwrap().contains("no GPU activity"));
    // --no-gpu: the driver is never told to load us.
    let (stdout, _, _) = record_with(&dir, missing.as_path(), &["--no-gpu"], &app, &[]);
    assert!(stdout.contains("no-injection"), "{stdout}");
}

/// The GPU work and the CPU's GPU waits are on the Perfetto timeline: one
/// track per GPU stream with the kernels (named by their host function)
/// and copies, and "GPU wait" slices on the waiting CPU thread.
#[test]
fn gpu_work_and_waits_appear_in_the_perfetto_export() {
    let dir = temp("gpu_perfetto");
    let (lib, app) = build(&dir);
    let (stdout, stderr, trace) = record_with(&dir, &lib, &[], &app, &[]);
    assert!(stdout.contains("attached 1"), "{stdout}\n{stderr}");
    let out_file = dir.join("t.json");
    lockscope_ok(&[
        OsStr::new("export"),
        OsStr::new("--format"),
        OsStr::new("perfetto"),
        OsStr::new("-o"),
        out_file.as_os_str(),
        trace.as_os_str(),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let ev = j["traceEvents"].as_array().unwrap();
    let gpu: Vec<&serde_json::Value> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "gpu")
        .collect();
    assert_eq!(gpu.len(), 3, "{gpu:#?}");
    let names: Vec<&str> = gpu.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(
        names.iter().any(|n| n.starts_with("kernel_one")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("kernel_two")),
        "{names:?}"
    );
    assert!(names.contains(&"copy device-to-host"), "{names:?}");
    // kernel_one ran 20 ms (within the clock conversion's error).
    let k1 = gpu
        .iter()
        .find(|e| e["name"].as_str().unwrap().starts_with("kernel_one"))
        .unwrap();
    let dur_us = k1["dur"].as_f64().unwrap();
    assert!((dur_us - 20_000.0).abs() < 200.0, "{k1}");
    // Their track is named after the stream.
    let tid = &k1["tid"];
    assert!(
        ev.iter().any(|e| e["ph"] == "M"
            && e["name"] == "thread_name"
            && &e["tid"] == tid
            && e["args"]["name"] == "GPU 0 stream 7"),
        "no name for the GPU track"
    );
    let waits = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "GPU wait")
        .count();
    assert_eq!(waits, 2, "one slice per synchronize");

    // The HTML timeline has a row per GPU stream with the GPU work.
    let page = dir.join("t.html");
    lockscope_ok(&[
        OsStr::new("html"),
        OsStr::new("-o"),
        page.as_os_str(),
        trace.as_os_str(),
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("GPU 0 stream 7"), "no GPU row in the page");
    assert_eq!(html.matches("\"GPU work\"").count(), 3, "three GPU spans");
    assert_eq!(html.matches("\"GPU wait\"").count(), 2, "two GPU waits");
}
