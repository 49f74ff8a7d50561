//! End-to-end tests of liblockscope_preload.so: C fixtures from
//! tests/programs/preload/ are compiled with gcc, run under LD_PRELOAD with
//! a session directory, and the rings they leave are read back with
//! `lockscope_ring::ring::Consumer`. Every count is checked against what the
//! fixture did (and printed).
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lockscope_format::{phase, Op};
use lockscope_ring::raw::{RawEvent, OP_THREAD_NAME};
use lockscope_ring::ring::Consumer;
use lockscope_ring::session::{parse_file_name, ProcessHeader, SessionFile, PROC_MAGIC};

/// The cdylib next to this test's deps directory (cargo builds it for
/// `cargo test -p lockscope-preload`).
fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    for dir in exe.ancestors().skip(1) {
        let p = dir.join("liblockscope_preload.so");
        if p.exists() {
            return p;
        }
    }
    panic!("liblockscope_preload.so not found above {}", exe.display());
}

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs")
}

/// A directory removed at the end of the test (on tmpfs when available,
/// like a real session).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!(
            "lockscope-preload-test-{}-{tag}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles a fixture (with frame pointers, so call paths can be walked).
fn compile(rel: &str, out: &Path) -> PathBuf {
    let src = programs().join(rel);
    let bin = out.join(Path::new(rel).file_stem().unwrap());
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("gcc runs");
    assert!(st.success(), "gcc failed on {}", src.display());
    bin
}

fn run(bin: &Path, args: &[&str], session: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin);
    c.args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("LOCKSCOPE_SESSION")
        .env_remove("LOCKSCOPE_STACKS")
        .env_remove("LOCKSCOPE_RING_KB");
    if let Some(s) = session {
        // No recorder drains these sessions while the fixture runs: one
        // ring per thread that never grows, dropping (and counting) what
        // does not fit instead of waiting for a recorder that is not there.
        c.env("LD_PRELOAD", lib_path())
            .env("LOCKSCOPE_SESSION", s)
            .env("LOCKSCOPE_RING_KB", "1024")
            .env("LOCKSCOPE_RING_MAX_KB", "0")
            .env("LOCKSCOPE_ON_FULL", "drop");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("fixture runs")
}

fn run_plain(bin: &Path, args: &[&str]) -> Output {
    run(bin, args, None, &[])
}

struct Ring {
    pid: u32,
    gen: u32,
    tid: u32,
    parent_tid: u32,
    end_tsc: u64,
    lost: u64,
    events: Vec<RawEvent>,
}

fn read_rings(dir: &Path) -> Vec<Ring> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if let Some(SessionFile::Ring { pid, gen, tid }) = parse_file_name(&name) {
            let mut c = Consumer::open(&e.path()).unwrap();
            let h = c.header();
            assert_eq!((h.pid, h.tid, h.exec_generation), (pid, tid, gen), "{name}");
            let (parent_tid, end_tsc) = (
                h.parent_tid,
                h.end_tsc.load(std::sync::atomic::Ordering::Acquire),
            );
            let mut events = Vec::new();
            let (_, corrupt) = c.drain(|ev| events.push(ev));
            assert_eq!(corrupt, 0, "{name}");
            // A ring recycled for later threads: each hand-over
            // ends one owner and starts the next.
            let (mut tid, mut parent_tid, mut lost_base) = (tid, parent_tid, 0);
            while let Some(h) = c.take_handoff() {
                out.push(Ring {
                    pid,
                    gen,
                    tid,
                    parent_tid,
                    end_tsc: h.prev_end_tsc,
                    lost: h.lost_at - lost_base,
                    events: std::mem::take(&mut events),
                });
                (tid, parent_tid, lost_base) = (h.tid, h.parent_tid, h.lost_at);
                let (_, corrupt) = c.drain(|ev| events.push(ev));
                assert_eq!(corrupt, 0, "{name}");
            }
            out.push(Ring {
                pid,
                gen,
                tid,
                parent_tid,
                end_tsc,
                lost: c.lost() - lost_base,
                events,
            });
        }
    }
    out.sort_by_key(|r| (r.pid, r.gen, r.tid));
    out
}

#[repr(C, align(64))]
struct Page([u8; 4096]);

struct Proc {
    pid: u32,
    ppid: u32,
    gen: u32,
    parent_generation: u32,
    argv: Vec<u8>,
    acquire_cost: u64,
    release_cost: u64,
    disabled: u32,
    end_tsc: u64,
    exit_code: u32,
    lost_no_ring: u64,
}

fn read_procs(dir: &Path) -> BTreeMap<(u32, u32), Proc> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if let Some(SessionFile::Proc { pid, gen }) = parse_file_name(&name) {
            let bytes = std::fs::read(e.path()).unwrap();
            let mut page = Box::new(Page([0; 4096]));
            page.0.copy_from_slice(&bytes[..4096]);
            // SAFETY: ProcessHeader is plain data (integers, atomics) that
            // fits in the aligned page.
            let h = unsafe { &*(page.0.as_ptr() as *const ProcessHeader) };
            assert_eq!(h.magic, PROC_MAGIC, "{name}");
            assert_eq!((h.pid, h.exec_generation), (pid, gen), "{name}");
            let argv = bytes[4096..4096 + h.argv_bytes as usize].to_vec();
            out.insert(
                (pid, gen),
                Proc {
                    pid,
                    ppid: h.ppid,
                    gen,
                    parent_generation: h.parent_generation,
                    argv,
                    acquire_cost: h.acquire_cost_ticks.load(Relaxed),
                    release_cost: h.release_cost_ticks.load(Relaxed),
                    disabled: h.disabled.load(Relaxed),
                    end_tsc: h.end_tsc.load(Relaxed),
                    exit_code: h.exit_code.load(Relaxed),
                    lost_no_ring: h.lost_no_ring.load(Relaxed),
                },
            );
        }
    }
    out
}

fn is(e: &RawEvent, op: Op) -> bool {
    e.head.op == op as u8
}

fn count(events: &[&RawEvent], op: Op, pred: impl Fn(&RawEvent) -> bool) -> usize {
    events.iter().filter(|e| is(e, op) && pred(e)).count()
}

fn ph(e: &RawEvent) -> u8 {
    phase::of(e.head.flags)
}

fn completed(e: &RawEvent) -> bool {
    ph(e) == phase::DONE
}

/// "key=value" pairs from a fixture's output.
fn truth(out: &Output) -> BTreeMap<String, String> {
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn lock_counts_match_what_the_program_did() {
    let tmp = TempDir::new("locks");
    let bin = compile("preload/locks.c", &tmp.0);
    let plain = run_plain(&bin, &[]);
    let session = tmp.0.join("session");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    // The recorder changes nothing the program computes or prints.
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.stderr, plain.stderr);
    assert_eq!(out.status.code(), Some(3));
    let t = truth(&out);
    assert_eq!(t["trylock_fail"], "37");
    assert_eq!(t["counter"], "4000");

    let rings = read_rings(&session);
    let procs = read_procs(&session);
    assert_eq!(procs.len(), 1);
    let p = procs.values().next().unwrap();
    assert_eq!(rings.len(), 6, "main + 4 workers + trier");
    assert!(rings.iter().all(|r| r.pid == p.pid && r.gen == 0));
    assert!(rings.iter().all(|r| r.lost == 0));
    assert_eq!(p.lost_no_ring, 0);
    assert_eq!(p.disabled, 0);
    assert_eq!(p.exit_code, 3);
    assert_ne!(p.end_tsc, 0, "atexit stamp");
    assert!(p.acquire_cost > 0 && p.release_cost > 0);
    assert!(
        String::from_utf8_lossy(&p.argv).contains("locks"),
        "argv text names the program"
    );
    for k in 0..2 {
        assert!(session.join(format!("P{}-0.maps{k}", p.pid)).exists());
    }

    let all: Vec<&RawEvent> = rings.iter().flat_map(|r| &r.events).collect();
    // 4 threads x 1000 pairs on two mutexes, plus main's lock of `held`.
    assert_eq!(count(&all, Op::MutexLock, completed), 4001);
    assert_eq!(
        count(&all, Op::MutexUnlock, completed),
        4001,
        "every unlock is one DONE"
    );
    // Each BEGIN is followed by its completion, flagged CONTENDED.
    assert_eq!(
        count(&all, Op::MutexLock, |e| ph(e) == phase::BEGIN),
        count(&all, Op::MutexLock, |e| e.head.flags
            == phase::DONE | phase::CONTENDED)
    );
    // Trylock on a held mutex: FAIL with EBUSY, exactly as often as the
    // program saw it.
    assert_eq!(
        count(&all, Op::MutexTrylock, |e| ph(e) == phase::FAIL
            && e.arg == libc::EBUSY as u64),
        37
    );
    assert_eq!(count(&all, Op::MutexTrylock, completed), 0);
    // Timed lock on a held mutex: BEGIN, then FAIL|CONTENDED, ETIMEDOUT.
    assert_eq!(
        count(&all, Op::MutexTimedlock, |e| ph(e) == phase::BEGIN),
        1
    );
    assert_eq!(
        count(&all, Op::MutexTimedlock, |e| e.head.flags
            == phase::FAIL | phase::CONTENDED
            && e.arg == libc::ETIMEDOUT as u64),
        1
    );
    assert_eq!(count(&all, Op::RwWrlock, completed), 40);
    assert_eq!(count(&all, Op::RwRdlock, completed), 360);
    assert_eq!(count(&all, Op::RwUnlock, completed), 400);
    assert_eq!(count(&all, Op::SpinLock, completed), 400);
    assert_eq!(count(&all, Op::SpinUnlock, completed), 400);
    assert_eq!(count(&all, Op::SemPost, completed), 4);
    assert_eq!(count(&all, Op::SemWait, completed), 4);
    assert_eq!(
        count(&all, Op::SemTrywait, |e| ph(e) == phase::FAIL
            && e.arg == libc::EAGAIN as u64),
        1
    );
    assert_eq!(t["errno"], "EAGAIN", "errno survives the hook");
    assert_eq!(count(&all, Op::BarrierWait, |e| ph(e) == phase::BEGIN), 4);
    assert_eq!(count(&all, Op::BarrierWait, completed), 4);
    assert_eq!(
        count(&all, Op::BarrierWait, |e| completed(e) && e.arg == 1),
        1,
        "one serial thread"
    );

    // Threads: the main thread created 5, joined 5; each ring starts with
    // ThreadStart and has one ThreadExit; ThreadCreate names the tid.
    let main = rings.iter().find(|r| r.tid == p.pid).unwrap();
    let children: Vec<&Ring> = rings.iter().filter(|r| r.tid != p.pid).collect();
    assert!(children.iter().all(|r| r.parent_tid == main.tid));
    let created: Vec<u64> = main
        .events
        .iter()
        .filter(|e| is(e, Op::ThreadCreate))
        .map(|e| e.arg)
        .collect();
    let mut child_tids: Vec<u64> = children.iter().map(|r| u64::from(r.tid)).collect();
    let mut created_sorted = created.clone();
    created_sorted.sort();
    child_tids.sort();
    assert_eq!(created_sorted, child_tids);
    let main_refs: Vec<&RawEvent> = main.events.iter().collect();
    assert_eq!(
        count(&main_refs, Op::ThreadJoin, |e| ph(e) == phase::BEGIN),
        5
    );
    assert_eq!(count(&main_refs, Op::ThreadJoin, completed), 5);
    for r in &rings {
        assert!(is(&r.events[0], Op::ThreadStart), "tid {}", r.tid);
        let exits = r.events.iter().filter(|e| is(e, Op::ThreadExit)).count();
        assert_eq!(exits, 1, "tid {}", r.tid);
        assert_ne!(r.end_tsc, 0, "tid {} end stamp", r.tid);
    }
    // Names: 4 workers named themselves.
    let mut names: Vec<String> = all
        .iter()
        .filter(|e| e.head.op == OP_THREAD_NAME)
        .map(|e| {
            let mut b = e.arg.to_le_bytes().to_vec();
            b.extend_from_slice(&e.arg2.to_le_bytes());
            String::from_utf8_lossy(&b)
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["worker-0", "worker-1", "worker-2", "worker-3"]);
    for r in &children {
        if let Some(n) = r.events.iter().find(|e| e.head.op == OP_THREAD_NAME) {
            assert_eq!(n.head.addr, u64::from(r.tid), "name event names its thread");
        }
    }
    // Timestamps never go backwards within a thread.
    for r in &rings {
        assert!(r.events.windows(2).all(|w| w[0].head.tsc <= w[1].head.tsc));
    }
}

/// The executable mappings of the program (from a maps snapshot).
fn exe_ranges(maps: &str, exe: &str) -> Vec<(u64, u64)> {
    maps.lines()
        .filter(|l| {
            l.ends_with(exe) && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x'))
        })
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

#[test]
fn contended_waits_carry_a_call_path_and_stacks_mode_is_obeyed() {
    let tmp = TempDir::new("stacks");
    let bin = compile("preload/locks.c", &tmp.0);
    for mode in ["contended", "all", "none"] {
        let session = tmp.0.join(mode);
        std::fs::create_dir(&session).unwrap();
        let out = run(&bin, &[], Some(&session), &[("LOCKSCOPE_STACKS", mode)]);
        assert_eq!(out.status.code(), Some(3));
        let rings = read_rings(&session);
        let pid = rings[0].pid;
        let maps = std::fs::read_to_string(session.join(format!("P{pid}-0.maps0"))).unwrap();
        let text = exe_ranges(&maps, bin.to_str().unwrap());
        assert!(!text.is_empty());
        let in_exe = |a: u64| text.iter().any(|&(lo, hi)| a >= lo && a < hi);
        let all: Vec<&RawEvent> = rings.iter().flat_map(|r| &r.events).collect();
        // The timed lock of `held` in trier() always waits.
        let timed = all
            .iter()
            .find(|e| is(e, Op::MutexTimedlock) && ph(e) == phase::FAIL)
            .unwrap();
        assert!(in_exe(timed.head.site), "site is in the program");
        let uncontended = all.iter().find(|e| is(e, Op::MutexUnlock)).unwrap();
        match mode {
            "none" => {
                assert!(timed.frames.is_empty());
                assert!(uncontended.frames.is_empty());
            }
            _ => {
                // site, then trier's caller chain: at least the return into
                // the start trampoline.
                assert!(timed.frames.len() >= 2, "{mode}: {:x?}", timed.frames);
                assert_eq!(timed.frames[0], timed.head.site);
                assert_eq!(uncontended.frames.is_empty(), mode == "contended");
            }
        }
    }
}

#[test]
fn frame_walk_follows_the_programs_frames() {
    let tmp = TempDir::new("walk");
    let src = tmp.0.join("deep.c");
    std::fs::write(
        &src,
        r#"
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <time.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) int c3(void) {
    struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); ts.tv_nsec = 0;
    int r = pthread_mutex_timedlock(&m, &ts); __asm__ volatile("" ::: "memory"); return r; }
__attribute__((noinline)) int c2(void) { int r = c3(); __asm__ volatile("" ::: "memory"); return r + 1; }
__attribute__((noinline)) int c1(void) { int r = c2(); __asm__ volatile("" ::: "memory"); return r + 1; }
static void *t(void *a) { (void)a; printf("%d\n", c1() - 2 == ETIMEDOUT); return 0; }
int main(void) { pthread_t th; pthread_mutex_lock(&m); pthread_create(&th, 0, t, 0);
    pthread_join(th, 0); return 0; }
"#,
    )
    .unwrap();
    let bin = tmp.0.join("deep");
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success());
    let nm = Command::new("nm").arg(&bin).output().unwrap();
    let syms: BTreeMap<String, u64> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let a = u64::from_str_radix(w.next()?, 16).ok()?;
            w.next()?;
            Some((w.next()?.to_string(), a))
        })
        .collect();
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n");
    let rings = read_rings(&session);
    let pid = rings[0].pid;
    let maps = std::fs::read_to_string(session.join(format!("P{pid}-0.maps0"))).unwrap();
    // PIE: the load base is the start of the first mapping of the binary.
    let base = maps
        .lines()
        .find(|l| l.ends_with(bin.to_str().unwrap()))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap();
    let ev = rings
        .iter()
        .flat_map(|r| &r.events)
        .find(|e| is(e, Op::MutexTimedlock) && ph(e) == phase::FAIL)
        .expect("the timed lock waited and failed");
    let func_of = |a: u64| {
        syms.iter()
            .filter(|(_, &s)| s != 0 && s + base <= a)
            .max_by_key(|(_, &s)| s)
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    };
    let names: Vec<String> = ev.frames.iter().take(4).map(|&a| func_of(a)).collect();
    assert_eq!(names, ["c3", "c2", "c1", "t"], "frames {:x?}", ev.frames);
}

#[test]
fn fork_child_records_into_its_own_files() {
    let tmp = TempDir::new("fork");
    let bin = compile("preload/fork.c", &tmp.0);
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    assert!(out.status.success());
    let t = truth(&out);
    assert_eq!(t["status"], "7");
    let child: u32 = t["child"].parse().unwrap();
    let procs = read_procs(&session);
    let parent = procs.values().find(|p| p.pid != child).unwrap();
    let c = &procs[&(child, 0)];
    assert_eq!(c.ppid, parent.pid);
    assert_eq!(c.parent_generation, parent.gen);
    assert_eq!(c.exit_code, 7);
    assert_eq!(parent.exit_code, 0);
    // The child keeps the hook costs its parent measured at start-up
    // (same library, same machine; no measuring in every child).
    assert!(parent.acquire_cost > 0 && parent.release_cost > 0);
    assert_eq!(
        (c.acquire_cost, c.release_cost),
        (parent.acquire_cost, parent.release_cost)
    );
    let rings = read_rings(&session);
    let locks = |pid: u32| {
        rings
            .iter()
            .filter(|r| r.pid == pid)
            .flat_map(|r| &r.events)
            .filter(|e| is(e, Op::MutexLock) && completed(e))
            .count()
    };
    assert_eq!(locks(parent.pid), 110);
    assert_eq!(locks(child), 50);
    let fork_ev: Vec<&RawEvent> = rings
        .iter()
        .filter(|r| r.pid == parent.pid)
        .flat_map(|r| &r.events)
        .filter(|e| is(e, Op::Fork))
        .collect();
    assert_eq!(fork_ev.len(), 1);
    assert_eq!(fork_ev[0].arg, u64::from(child));
    let child_ring = rings.iter().find(|r| r.pid == child).unwrap();
    assert_eq!(
        child_ring.parent_tid, parent.pid,
        "forked by the main thread"
    );
    assert!(is(&child_ring.events[0], Op::ThreadStart));
}

#[test]
fn exec_keeps_recording_even_with_a_stripped_environment() {
    let tmp = TempDir::new("exec");
    let bin = compile("preload/exec.c", &tmp.0);
    for mode in ["execve", "execle", "execlp"] {
        let session = tmp.0.join(mode);
        std::fs::create_dir(&session).unwrap();
        let out = run(&bin, &[mode], Some(&session), &[]);
        assert_eq!(out.status.code(), Some(5), "{mode}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("preload=yes session=yes"),
            "{mode}: {stdout}"
        );
        // The program's own variables are kept.
        let foo = if mode == "execlp" { "foo=-" } else { "foo=bar" };
        assert!(stdout.contains(foo), "{mode}: {stdout}");
        let procs = read_procs(&session);
        let pid = procs.keys().next().unwrap().0;
        assert_eq!(procs.len(), 2, "{mode}: two images of one pid");
        assert_eq!(procs[&(pid, 1)].exit_code, 5);
        let rings = read_rings(&session);
        let gen_events = |g: u32| -> Vec<&RawEvent> {
            rings
                .iter()
                .filter(|r| r.gen == g)
                .flat_map(|r| &r.events)
                .collect()
        };
        let g0 = gen_events(0);
        let g1 = gen_events(1);
        assert_eq!(count(&g0, Op::MutexLock, completed), 10, "{mode}");
        assert_eq!(count(&g1, Op::MutexLock, completed), 20, "{mode}");
        // The failed exec (ENOENT) and the real one.
        assert_eq!(
            count(&g0, Op::Exec, |e| ph(e) == phase::FAIL
                && e.arg == libc::ENOENT as u64),
            1
        );
        assert_eq!(count(&g0, Op::Exec, completed), 2, "{mode}");
        assert!(String::from_utf8_lossy(&out.stderr)
            .contains("expected failure: No such file or directory"));
        assert!(session.join(format!("P{pid}-0.maps2")).exists());
    }
}

#[test]
fn futex_syscalls_are_recorded_and_errno_is_kept() {
    let tmp = TempDir::new("futex");
    let bin = compile("preload/futex.c", &tmp.0);
    let plain = run_plain(&bin, &[]);
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "wakes=25 waits=25 bitset_waits=5 errno_ok=25 pid_ok=1"
    );
    let rings = read_rings(&session);
    let all: Vec<&RawEvent> = rings.iter().flat_map(|r| &r.events).collect();
    assert_eq!(
        count(&all, Op::FutexWake, |e| completed(e) && e.arg == 0),
        25
    );
    assert_eq!(
        count(&all, Op::FutexWait, |e| ph(e) == phase::BEGIN && e.arg == 0),
        30
    );
    assert_eq!(
        count(&all, Op::FutexWait, |e| ph(e) == phase::BEGIN
            && e.arg2 & 0x7f == 9),
        5,
        "bitset waits keep their op"
    );
    assert_eq!(
        count(&all, Op::FutexWait, |e| ph(e) == phase::FAIL
            && e.arg == libc::EAGAIN as u64),
        30
    );
}

#[test]
fn without_a_session_nothing_is_recorded_and_nothing_changes() {
    let tmp = TempDir::new("nosession");
    let bin = compile("preload/locks.c", &tmp.0);
    let plain = run_plain(&bin, &[]);
    let out = run(
        &bin,
        &[],
        None,
        &[("LD_PRELOAD", lib_path().to_str().unwrap())],
    );
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.status.code(), Some(3));
    // Only the binary is in the directory: no session files anywhere we
    // could have been told about.
    let names: Vec<_> = std::fs::read_dir(&tmp.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["locks"]);
}

#[test]
fn op_numbers_used_by_capture_match_the_format() {
    assert_eq!(lockscope_ring::raw::OP_THREAD_START, Op::ThreadStart as u8);
    assert_eq!(lockscope_ring::raw::OP_THREAD_EXIT, Op::ThreadExit as u8);
    assert_eq!(lockscope_ring::raw::OP_RUN_DELAY, Op::RunDelay as u8);
    assert!(
        Op::from_u8(OP_THREAD_NAME).is_none(),
        "pseudo-op stays out of the format"
    );
}

/// Cost of the recorder per uncontended lock+unlock pair. Not a timed
/// test (the machine is shared): it prints figures. Run with
/// `cargo test --release -p lockscope-preload -- --ignored --nocapture bench`.
#[test]
#[ignore]
fn bench_uncontended_pair_cost() {
    let tmp = TempDir::new("bench");
    let src = programs().join("bench/uncontended.c");
    let bin = tmp.0.join("uncontended");
    let st = Command::new("gcc")
        .args(["-O2", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success());
    let ns = |out: &Output| -> f64 { truth(out)["ns_per_pair"].parse().unwrap() };
    // 10k pairs x 5 rounds = 100k events: the default 4 MiB ring (131072
    // slots) holds them all, so nothing is dropped and no drainer competes
    // for the two cores of the shared test machine, and the ring's memory
    // is about as cache-warm as a drained ring in steady state.
    let n = "10000";
    // The floor: a C preload shim that only reads the TSC in each hook
    // (one read per event, as the recorder does) and forwards.
    let shim_src = tmp.0.join("tscshim.c");
    std::fs::write(
        &shim_src,
        r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <x86intrin.h>
static int (*rl)(pthread_mutex_t *), (*ru)(pthread_mutex_t *);
static __thread __attribute__((tls_model("initial-exec"))) unsigned long long last[2];
int pthread_mutex_lock(pthread_mutex_t *m) {
    if (!rl) rl = dlsym(RTLD_NEXT, "pthread_mutex_lock");
    last[0] = __rdtsc();
    return rl(m);
}
int pthread_mutex_unlock(pthread_mutex_t *m) {
    if (!ru) ru = dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    last[1] = __rdtsc();
    return ru(m);
}
"#,
    )
    .unwrap();
    let shim = tmp.0.join("tscshim.so");
    let st = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC"])
        .arg(&shim_src)
        .arg("-o")
        .arg(&shim)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success());
    let mut floor = Vec::new();
    let (mut base, mut rec, mut fwd) = (Vec::new(), Vec::new(), Vec::new());
    let mut costs = Vec::new();
    for i in 0..7 {
        base.push(ns(&run_plain(&bin, &[n])));
        let s = tmp.0.join(format!("s{i}"));
        std::fs::create_dir(&s).unwrap();
        let out = run(&bin, &[n], Some(&s), &[("LOCKSCOPE_RING_KB", "4096")]);
        let lost: u64 = read_rings(&s).iter().map(|r| r.lost).sum();
        assert_eq!(lost, 0);
        rec.push(ns(&out));
        let p = read_procs(&s).into_values().next().unwrap();
        costs.push((p.acquire_cost, p.release_cost));
        floor.push(ns(&run(
            &bin,
            &[n],
            None,
            &[("LD_PRELOAD", shim.to_str().unwrap())],
        )));
        fwd.push(ns(&run(
            &bin,
            &[n],
            None,
            &[("LD_PRELOAD", lib_path().to_str().unwrap())],
        )));
        std::fs::remove_dir_all(&s).unwrap();
    }
    // Minimum and median: the machine is shared, noise only adds time.
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[0], v[v.len() / 2])
    };
    let ((b, bm), (r, rm), (f, fm)) = (stats(&mut base), stats(&mut rec), stats(&mut fwd));
    let (fl, flm) = stats(&mut floor);
    costs.sort();
    let (acq, rel) = costs[costs.len() / 2];
    // The floor: two TSC reads per pair (one per event).
    let hz = lockscope_ring::tsc::calibrate(50);
    let t0 = std::time::Instant::now();
    let mut sink = 0u64;
    for _ in 0..10_000_000 {
        sink = sink.wrapping_add(lockscope_ring::tsc::now());
    }
    let rdtsc_ns = t0.elapsed().as_nanos() as f64 / 1e7;
    println!(
        "uncontended pair (min / median of 7, ns): plain {b:.2} / {bm:.2}; \
         preload, no session {f:.2} / {fm:.2} (+{:.2} / +{:.2}); \
         recording {r:.2} / {rm:.2} (+{:.2} / +{:.2}); \
         floor (C shim reading the TSC once per hook) {fl:.2} / {flm:.2} (+{:.2} / +{:.2})",
        f - b,
        fm - bm,
        r - b,
        rm - bm,
        fl - b,
        flm - bm,
    );
    println!(
        "one TSC read: {rdtsc_ns:.2} ns (TSC {:.0} MHz); start-up measured recorder cost \
         per event (warm ring): acquire {acq} ticks = {:.2} ns, release {rel} ticks = {:.2} ns{}",
        hz / 1e6,
        acq as f64 * 1e9 / hz,
        rel as f64 * 1e9 / hz,
        if sink == 1 { "." } else { "" }
    );
}

#[test]
fn cancellation_and_pthread_exit_unwind_through_the_hooks() {
    let tmp = TempDir::new("cancel");
    let bin = compile("preload/cancel.c", &tmp.0);
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "canceled=1 cleanups=1 exit_value=42 mutex_free=1"
    );
    let rings = read_rings(&session);
    assert_eq!(rings.len(), 3);
    let all: Vec<&RawEvent> = rings.iter().flat_map(|r| &r.events).collect();
    // The cancelled wait began and never completed.
    assert_eq!(count(&all, Op::CondWait, |e| ph(e) == phase::BEGIN), 1);
    assert_eq!(count(&all, Op::CondWait, |e| ph(e) != phase::BEGIN), 0);
    // The cleanup handler's unlock was recorded.
    assert_eq!(count(&all, Op::MutexUnlock, completed), 1);
    // pthread_exit: exactly one ThreadExit for the exiting thread, and none
    // for the cancelled one (it never returned nor called pthread_exit).
    let exits: usize = rings
        .iter()
        .filter(|r| r.tid != r.pid)
        .map(|r| r.events.iter().filter(|e| is(e, Op::ThreadExit)).count())
        .sum();
    assert_eq!(exits, 1);
}

#[test]
fn rust_std_mutex_waits_reach_the_futex_hook() {
    let tmp = TempDir::new("stdmutex");
    let bin = tmp.0.join("stdmutex");
    let st = Command::new("rustc")
        .args(["-O", "--edition", "2021", "-o"])
        .arg(&bin)
        .arg(programs().join("preload/stdmutex.rs"))
        .status()
        .expect("rustc runs");
    assert!(st.success());
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    assert!(out.status.success());
    let t = truth(&out);
    assert_eq!(t["value"], "1");
    let addr = u64::from_str_radix(t["addr"].trim_start_matches("0x"), 16).unwrap();
    let rings = read_rings(&session);
    let main = rings.iter().find(|r| r.tid == r.pid).unwrap();
    let other = rings.iter().find(|r| r.tid != r.pid).unwrap();
    // The futex word is the first field of std's Mutex.
    let waited = other
        .events
        .iter()
        .filter(|e| is(e, Op::FutexWait) && e.head.addr == addr)
        .count();
    assert!(waited >= 2, "BEGIN and its end on the mutex word");
    assert!(main
        .events
        .iter()
        .any(|e| is(e, Op::FutexWake) && e.head.addr == addr && e.arg == 1));
    let named = other
        .events
        .iter()
        .find(|e| e.head.op == OP_THREAD_NAME)
        .unwrap();
    assert_eq!(&named.arg.to_le_bytes(), b"contende");
}

#[test]
fn joined_threads_rings_are_unmapped_and_keep_their_events() {
    let tmp = TempDir::new("rings");
    let bin = compile("preload/rings.c", &tmp.0);
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[]);
    assert!(out.status.success());
    // Main's ring and the detached thread's remain mapped, and the rings
    // of joined threads kept for reuse, at most the free list's
    // 128: the others are gone from the address space. With no recorder
    // reading them here, a ring is handed on once (the next hand-over
    // waits until the recorder has read the previous one): about half of
    // the threads got a recycled ring.
    let mapped: usize = truth(&out)["mapped_rings"].parse().unwrap();
    assert!((3..=130).contains(&mapped), "{mapped} rings mapped");
    let files = std::fs::read_dir(&session)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".ring")
        })
        .count();
    assert!(files < 202, "rings were recycled: {files} files");
    // Every thread is there, with its own events.
    let rings = read_rings(&session);
    assert_eq!(rings.len(), 202);
    // ... but their files hold every event.
    let all: Vec<&RawEvent> = rings.iter().flat_map(|r| &r.events).collect();
    assert_eq!(count(&all, Op::MutexLock, completed), 201);
    // The 200 joined threads (ThreadStart's site is their start routine,
    // `work`) each ended with one ThreadExit. The detached thread may not
    // have reached its own before the process exited.
    let mut by_routine: BTreeMap<u64, Vec<&Ring>> = BTreeMap::new();
    for r in rings.iter().filter(|r| r.tid != r.pid) {
        by_routine.entry(r.events[0].head.site).or_default().push(r);
    }
    let joined = by_routine.values().find(|v| v.len() == 200).unwrap();
    for r in joined {
        assert_eq!(r.events.iter().filter(|e| is(e, Op::ThreadExit)).count(), 1);
    }
}

#[test]
fn fork_from_a_worker_thread_walks_the_right_stack() {
    // The forking thread becomes the child's main thread; its stack is a
    // thread stack, so the child's walks must be bounded by it.
    let tmp = TempDir::new("forkthread");
    let src = tmp.0.join("forkthread.c");
    std::fs::write(
        &src,
        r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static void *t(void *a) {
    (void)a;
    pid_t c = fork();
    if (c == 0) {
        for (int i = 0; i < 10; i++) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); }
        exit(9);
    }
    int st; waitpid(c, &st, 0);
    printf("child=%d status=%d\n", (int)c, WEXITSTATUS(st));
    return 0;
}
int main(void) { pthread_t th; pthread_create(&th, 0, t, 0); pthread_join(th, 0); return 0; }
"#,
    )
    .unwrap();
    let bin = tmp.0.join("forkthread");
    let st = Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
        .unwrap();
    assert!(st.success());
    let session = tmp.0.join("s");
    std::fs::create_dir(&session).unwrap();
    let out = run(&bin, &[], Some(&session), &[("LOCKSCOPE_STACKS", "all")]);
    assert!(out.status.success());
    let t = truth(&out);
    assert_eq!(t["status"], "9");
    let child: u32 = t["child"].parse().unwrap();
    let rings = read_rings(&session);
    let locks: Vec<&RawEvent> = rings
        .iter()
        .filter(|r| r.pid == child)
        .flat_map(|r| &r.events)
        .filter(|e| is(e, Op::MutexLock))
        .collect();
    assert_eq!(locks.len(), 10);
    // site + at least the return into t(): the walk used the thread stack.
    assert!(
        locks.iter().all(|e| e.frames.len() >= 2),
        "{:x?}",
        locks[0].frames
    );
}
