//! Helpers of the `record_*` integration tests: build a fixture, run it
//! under `lockscope record`, parse the ground truth it printed, and
//! compare it with the trace exactly.
// Each test file uses a part of these helpers (and of the re-exports).
#![allow(dead_code, unused_imports)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use lockscope_format::{phase, Event, Op, Record, Trace};

// The helpers every crate's tests share live in lockscope-test-support;
// these names are the ones this module's users already call.
pub use lockscope_test_support::{
    build_c, build_cxx, shell_code, workspace_root as workspace, Scratch as TempDir,
};

/// The thread names of a trace as (OS tid of the thread named, time,
/// name), in file order. Panics if a name comes before its thread's
/// `Thread` record.
pub fn thread_names(t: &Trace) -> Vec<(u32, u64, String)> {
    let mut tid_of = HashMap::new();
    let mut names = Vec::new();
    for r in &t.records {
        match r {
            Record::Thread(th) => {
                tid_of.insert(th.id, th.tid);
            }
            Record::ThreadName(n) => {
                let tid = *tid_of
                    .get(&n.thread)
                    .expect("a ThreadName follows its Thread record");
                names.push((tid, n.time, n.name.clone()));
            }
            _ => {}
        }
    }
    names
}

/// Critical sections (acquired, released, thread) per mutex, each
/// thread's in order.
pub fn mutex_sections(t: &Trace) -> HashMap<u64, Vec<(u64, u64, u32)>> {
    let mut out: HashMap<u64, Vec<(u64, u64, u32)>> = HashMap::new();
    for (&th, evs) in &t.events {
        let mut open: HashMap<u64, u64> = HashMap::new();
        for e in evs {
            if phase::of(e.flags) != phase::DONE {
                continue;
            }
            match e.op() {
                Some(Op::MutexLock) => {
                    open.insert(e.addr, e.time);
                }
                Some(Op::MutexUnlock) => {
                    if let Some(a) = open.remove(&e.addr) {
                        out.entry(e.addr).or_default().push((a, e.time, th));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// A fresh directory for one test, removed when the test passes (kept
/// for inspection when it fails: traces can be large, ~40 MB for 512
/// threads).
pub fn temp(name: &str) -> TempDir {
    lockscope_test_support::scratch_dir(&format!("test-{name}"))
}

/// Compiles tests/programs/<name>.rs with `rustc -O` into `dir`.
pub fn build_rust(name: &str, dir: &Path) -> PathBuf {
    build_rust_with(name, dir, &["-O"])
}

/// Compiles tests/programs/<rel>.rs (`rel` like `report/rust_rwlock`) with
/// rustc and the given flags into `dir/<file name of rel>`.
pub fn build_rust_with(rel: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    let src = workspace().join("tests/programs").join(format!("{rel}.rs"));
    let out = dir.join(Path::new(rel).file_name().expect("a file name"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let st = Command::new(rustc)
        .args(flags)
        .args(["--edition", "2021", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("rustc");
    assert!(st.success(), "rustc failed on {}", src.display());
    out
}

/// Runs the `lockscope` binary under test with `args` (in `cwd` when
/// given). `COLUMNS` is removed: text output is fitted to it when set, and
/// the tests read the wide layout.
pub fn lockscope(args: &[&str], cwd: Option<&Path>) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    c.args(args).env_remove("COLUMNS");
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.output().unwrap()
}

/// The standard output of a command that must have succeeded (fails the
/// test with its standard error otherwise).
pub fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

pub struct Run {
    /// Shell-style exit status of `lockscope record`.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub trace_path: PathBuf,
}

impl Run {
    pub fn trace(&self) -> Trace {
        Trace::open(&self.trace_path).unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}\nstderr:\n{}",
                self.trace_path.display(),
                self.stderr
            )
        })
    }
}

/// Runs `lockscope record [opts] -o DIR/trace.lstrace -- prog args`.
pub fn record(dir: &Path, opts: &[&str], prog: &Path, args: &[&str], stdin: &[u8]) -> Run {
    record_env(dir, &[], opts, prog, args, stdin)
}

/// [`record`] with `env` set for `lockscope record` (and so for the
/// program: a user's own `LD_PRELOAD`, which the recorder keeps after
/// its library).
pub fn record_env(
    dir: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    opts: &[&str],
    prog: &Path,
    args: &[&str],
    stdin: &[u8],
) -> Run {
    let trace_path = dir.join("trace.lstrace");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .envs(env.iter().copied())
        .arg("record")
        .args(opts)
        .arg("-o")
        .arg(&trace_path)
        .arg("--")
        .arg(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    Run {
        code: shell_code(out.status),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace_path,
    }
}

/// One `truth ...` line.
#[derive(Debug, Clone)]
pub struct Truth {
    pub pid: u32,
    pub gen: u32,
    pub tid: u32,
    pub addr: u64,
    pub op: String,
    /// done, fail, serial (BarrierWait returned the serial value).
    pub phase: Option<String>,
    /// (function name, its runtime address).
    pub site: Option<(String, u64)>,
    pub count: u64,
}

pub fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

pub fn kv(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn truths(stdout: &str) -> Vec<Truth> {
    stdout
        .lines()
        .filter(|l| l.starts_with("truth "))
        .map(|l| {
            let m = kv(l);
            Truth {
                pid: m["pid"].parse().unwrap(),
                gen: m["gen"].parse().unwrap(),
                tid: m["tid"].parse().unwrap(),
                addr: hex(&m["addr"]),
                op: m["op"].clone(),
                phase: m.get("phase").cloned(),
                site: m.get("site").map(|s| (s.clone(), hex(&m["fn"]))),
                count: m["count"].parse().unwrap(),
            }
        })
        .collect()
}

pub fn op_by_name(name: &str) -> u8 {
    (0..=255u8)
        .find(|&v| Op::from_u8(v).is_some_and(|o| o.name() == name))
        .unwrap_or_else(|| panic!("unknown op {name}"))
}

/// Sizes of the functions of a binary (`nm -S`).
pub fn fn_sizes(bin: &Path) -> HashMap<String, u64> {
    let out = Command::new("nm").arg("-S").arg(bin).output().expect("nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && (f[2] == "T" || f[2] == "t")).then(|| (f[3].to_string(), hex(f[1])))
        })
        .collect()
}

/// The trace, indexed.
pub struct Index {
    pub trace: Trace,
    /// (pid, gen) -> process record
    pub procs: HashMap<(u32, u32), lockscope_format::Process>,
    /// (process id, tid) -> thread id
    pub threads: HashMap<(u32, u32), u32>,
    /// thread id -> process id
    pub thread_proc: HashMap<u32, u32>,
}

impl Index {
    pub fn new(trace: Trace) -> Index {
        let mut procs = HashMap::new();
        let mut threads = HashMap::new();
        let mut thread_proc = HashMap::new();
        for r in &trace.records {
            match r {
                Record::Process(p) => {
                    procs.insert((p.pid, p.exec_generation), p.clone());
                }
                Record::Thread(t) => {
                    threads.insert((t.process, t.tid), t.id);
                    thread_proc.insert(t.id, t.process);
                }
                _ => {}
            }
        }
        Index {
            trace,
            procs,
            threads,
            thread_proc,
        }
    }

    pub fn thread(&self, pid: u32, gen: u32, tid: u32) -> u32 {
        let p = self
            .procs
            .get(&(pid, gen))
            .unwrap_or_else(|| panic!("no process pid={pid} gen={gen} in the trace"));
        *self
            .threads
            .get(&(p.id, tid))
            .unwrap_or_else(|| panic!("no thread tid={tid} in process pid={pid} gen={gen}"))
    }

    pub fn events(&self, thread: u32) -> &[Event] {
        self.trace.events.get(&thread).map_or(&[], |v| v.as_slice())
    }
}

fn phase_matches(e: &Event, phase_name: &str) -> bool {
    match phase_name {
        "done" => phase::of(e.flags) == phase::DONE,
        "fail" => phase::of(e.flags) == phase::FAIL,
        "serial" => phase::of(e.flags) == phase::DONE && e.arg == 1,
        p => panic!("unknown phase {p}"),
    }
}

/// Compares every truth line with the trace, exactly, and checks that the
/// trace has no completed operation on a truthed object that the program
/// did not count.
pub fn check_truth(ix: &Index, truth: &[Truth], bin: Option<&Path>) {
    assert!(!truth.is_empty(), "the fixture printed no truth");
    let sizes = bin.map(fn_sizes).unwrap_or_default();
    let mut errors = Vec::new();
    let mut covered: HashSet<(u32, u64, u8, &str)> = HashSet::new();
    let mut objects: HashSet<(u32, u64)> = HashSet::new();
    for t in truth {
        let th = ix.thread(t.pid, t.gen, t.tid);
        let op = op_by_name(&t.op);
        objects.insert((ix.thread_proc[&th], t.addr));
        let evs = ix
            .events(th)
            .iter()
            .filter(|e| e.op == op && e.addr == t.addr);
        let got = if let Some((name, start)) = &t.site {
            let size = *sizes
                .get(name)
                .unwrap_or_else(|| panic!("nm does not know {name}"));
            evs.filter(|e| {
                phase::of(e.flags) == phase::DONE && e.site >= *start && e.site < start + size
            })
            .count() as u64
        } else {
            let p = t.phase.as_deref().unwrap();
            if p != "serial" {
                covered.insert((th, t.addr, op, if p == "done" { "done" } else { "fail" }));
            }
            evs.filter(|e| phase_matches(e, p)).count() as u64
        };
        if got != t.count {
            errors.push(format!(
                "pid {} tid {} {:#x} {} {}: program counted {}, trace has {got}",
                t.pid,
                t.tid,
                t.addr,
                t.op,
                t.site
                    .as_ref()
                    .map_or_else(|| t.phase.clone().unwrap(), |s| format!("from {}", s.0)),
                t.count
            ));
        }
    }
    // Nothing extra: completed (done/fail) operations on the objects the
    // program reports must all be accounted for by some truth line.
    let mut extra: BTreeMap<String, u64> = BTreeMap::new();
    for (&th, evs) in &ix.trace.events {
        let Some(&proc) = ix.thread_proc.get(&th) else {
            continue;
        };
        for e in evs {
            if !objects.contains(&(proc, e.addr)) || e.op == Op::Lost as u8 {
                continue;
            }
            let ph = match phase::of(e.flags) {
                phase::DONE => "done",
                phase::FAIL => "fail",
                _ => continue,
            };
            if !covered.contains(&(th, e.addr, e.op, ph)) {
                let name = Op::from_u8(e.op).map_or("?", Op::name);
                *extra
                    .entry(format!("thread {th} {:#x} {name} {ph}", e.addr))
                    .or_default() += 1;
            }
        }
    }
    for (k, n) in extra {
        errors.push(format!("{k}: {n} events the program did not count"));
    }
    let n = errors.len();
    errors.truncate(30);
    assert!(
        n == 0,
        "trace differs from the ground truth ({n} differences, first 30):\n{}",
        errors.join("\n")
    );
}

/// Structural checks every recorded trace must pass.
pub fn check_integrity(ix: &Index) {
    let t = &ix.trace;
    let footer = t.footer.as_ref().expect("the trace has a footer");
    assert_eq!(
        footer.events as usize,
        t.event_count(),
        "footer event count"
    );
    let loss: u64 = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Loss(l) => Some(l.events),
            _ => None,
        })
        .sum();
    assert_eq!(footer.lost, loss, "footer loss = sum of Loss records");
    let stacks: HashSet<(u32, u32)> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Stack(s) => Some((s.process, s.id)),
            _ => None,
        })
        .collect();
    let locks: HashSet<(u32, u64)> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Lock(l) => Some((l.process, l.addr)),
            _ => None,
        })
        .collect();
    for (th, evs) in &t.events {
        let proc = *ix
            .thread_proc
            .get(th)
            .unwrap_or_else(|| panic!("events of thread {th} without a Thread record"));
        let mut last = 0;
        for e in evs {
            assert!(e.time >= last, "time goes backwards on thread {th}");
            last = e.time;
            if e.stack != 0 {
                assert!(
                    stacks.contains(&(proc, e.stack)),
                    "unknown stack {}",
                    e.stack
                );
            }
            if (Op::MutexLock as u8..=Op::FutexWake as u8).contains(&e.op) {
                assert!(
                    locks.contains(&(proc, e.addr)),
                    "no Lock record for {:#x}",
                    e.addr
                );
            }
        }
    }
    let ends: HashSet<u32> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::ProcessEnd(e) => Some(e.process),
            _ => None,
        })
        .collect();
    for p in ix.procs.values() {
        assert!(ends.contains(&p.id), "process {} has no ProcessEnd", p.pid);
    }
}

pub fn process_end(ix: &Index, pid: u32, gen: u32) -> lockscope_format::ProcessEnd {
    let id = ix.procs[&(pid, gen)].id;
    ix.trace
        .records
        .iter()
        .find_map(|r| match r {
            Record::ProcessEnd(e) if e.process == id => Some(e.clone()),
            _ => None,
        })
        .unwrap()
}

/// Runs a binutils program (`objcopy`, `strip`, ...) in `cwd`; it must
/// succeed.
pub fn run_tool(cmd: &str, args: &[&str], cwd: &Path) {
    let st = Command::new(cmd)
        .args(args)
        .current_dir(cwd)
        .status()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (binutils must be installed)"));
    assert!(st.success(), "{cmd} {args:?} failed");
}

/// The GNU build-id of an ELF file, as hex (readelf).
pub fn build_id_hex(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .expect("readelf (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("{}: no build-id", file.display()))
}

/// Builds tests/programs/report/stripped_locks.c into `dir/full` (with
/// debug info and `-rdynamic`) and its separate debug file
/// `dir/prog.debug` (`objcopy --only-keep-debug`): the inputs of the
/// stripped-binary tests, which strip copies of `full` themselves.
pub fn build_stripped_locks(dir: &Path) {
    let src = workspace().join("tests/programs/report/stripped_locks.c");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-rdynamic", "-o"])
        .arg(dir.join("full"))
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    run_tool("objcopy", &["--only-keep-debug", "full", "prog.debug"], dir);
}

/// Builds the GPU fixture of `tests/programs/gpu` into `dir`: the
/// stand-in libcupti (`libcupti.so`) and the program playing the CUDA
/// driver (`fake_cuda_app`), linked with the stand-in of CUDA's static
/// runtime. Returns (libcupti, program).
pub fn build_gpu_fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let src = workspace().join("tests/programs/gpu");
    let lib = dir.join("libcupti.so");
    let app = dir.join("fake_cuda_app");
    let gcc = |args: &[&str], out: &Path, inputs: &[PathBuf], what: &str| {
        let st = Command::new("gcc")
            .args(args)
            .arg(out)
            .args(inputs)
            .status()
            .unwrap();
        assert!(st.success(), "gcc {what}");
    };
    gcc(
        &["-O2", "-g", "-fPIC", "-shared", "-o"],
        &lib,
        &[src.join("fake_cupti.c")],
        "fake_cupti.c",
    );
    // CUDA's static runtime stand-in: no line information, and -O0 so
    // that its call to the API stays a call (its frame stays).
    let shim = dir.join("fake_static_runtime.o");
    gcc(
        &["-O0", "-g0", "-c", "-o"],
        &shim,
        &[src.join("fake_static_runtime.c")],
        "fake_static_runtime.c",
    );
    gcc(
        &["-O2", "-g", "-o"],
        &app,
        &[src.join("fake_cuda_app.c"), shim, PathBuf::from("-ldl")],
        "fake_cuda_app.c",
    );
    (lib, app)
}

/// Checks the protocol of a lock's acquisitions (`op`) in every thread: a
/// call that waited is BEGIN then DONE|CONTENDED on the same lock, and a
/// BEGIN is always followed by its DONE. Returns the contended
/// acquisitions per lock address.
pub fn contended_acquisitions(t: &Trace, op: Op) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    for evs in t.events.values() {
        let mut open = None;
        for e in evs.iter().filter(|e| e.op == op as u8) {
            match phase::of(e.flags) {
                phase::BEGIN => open = Some(e.addr),
                phase::DONE if e.flags & phase::CONTENDED != 0 => {
                    assert_eq!(open.take(), Some(e.addr), "CONTENDED without BEGIN");
                    *out.entry(e.addr).or_default() += 1;
                }
                _ => assert_eq!(open, None, "BEGIN not followed by its DONE"),
            }
        }
    }
    out
}

/// `lockscope recover SESSION -o OUT`, which must succeed; returns its
/// standard error (what it recovered, what was lost).
pub fn recover(session: &Path, out: &Path) -> String {
    let o = lockscope(
        &[
            "recover",
            session.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}
