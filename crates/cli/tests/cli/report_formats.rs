//! One report, three formats: every section of `lockscope report`'s text
//! is in its JSON and in the data of `lockscope html`'s page, with the
//! same figures, on fixture programs whose counts are known exactly
//! (barriers, semaphores and pthread spinlocks; barrier instances;
//! dead writes; hand-written spinlocks; GPU work through a stand-in
//! CUPTI).

use crate::record_util;

use crate::detailed_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The report of one trace in the three formats.
struct Formats {
    /// `lockscope report TRACE` (wide: no $COLUMNS, a pipe).
    text: String,
    /// `lockscope report TRACE --json`.
    json: Value,
    /// `report` of the data embedded in `lockscope html TRACE`'s page.
    html: Value,
}

fn run_ok(args: &[&std::ffi::OsStr]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "lockscope {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn formats(trace: &Path) -> Formats {
    let t = trace.as_os_str();
    let text = run_ok(&["report".as_ref(), t]);
    let json: Value = serde_json::from_str(&run_ok(&["report".as_ref(), t, "--json".as_ref()]))
        .expect("report --json prints JSON");
    let page_path = trace.with_extension("html");
    run_ok(&["html".as_ref(), t, "-o".as_ref(), page_path.as_os_str()]);
    let page = std::fs::read_to_string(&page_path).unwrap();
    let tag = "<script type=\"application/json\" id=\"lockscope-data\">";
    let start = page.find(tag).expect("the page embeds its data") + tag.len();
    let len = page[start..].find("</script>").unwrap();
    let data: Value = serde_json::from_str(&page[start..start + len]).unwrap();
    Formats {
        text,
        json,
        html: data["report"].clone(),
    }
}

/// The page's section `id` (html/sections.rs), if it has one.
fn html_section<'a>(html: &'a Value, id: &str) -> Option<&'a Value> {
    html["sections"]
        .as_array()
        .expect("the page's report has sections")
        .iter()
        .find(|s| s["id"] == id)
}

fn html_rows<'a>(html: &'a Value, id: &str) -> &'a [Value] {
    html_section(html, id).unwrap_or_else(|| panic!("no section {id} on the page: {html:#}"))
        ["rows"]
        .as_array()
        .unwrap()
}

/// The lines of the text section whose heading starts with `heading`,
/// up to the next blank line; `None` without that section.
fn text_block<'a>(text: &'a str, heading: &str) -> Option<Vec<&'a str>> {
    let mut lines = text.lines();
    lines.find(|l| l.starts_with(heading))?;
    Some(lines.take_while(|l| !l.is_empty()).collect())
}

/// The number in the right-aligned column `label` of a text table's
/// `row`, under its `header` (thousands separators removed).
fn cell(header: &str, row: &str, label: &str) -> u64 {
    let h: Vec<char> = header.chars().collect();
    let l: Vec<char> = label.chars().collect();
    let at = h
        .windows(l.len())
        .position(|w| w == l.as_slice())
        .unwrap_or_else(|| panic!("no column {label:?} in {header:?}"));
    let end = at + l.len();
    let r: Vec<char> = row.chars().collect();
    let start = r[..end]
        .iter()
        .rposition(|c| *c == ' ')
        .map_or(0, |i| i + 1);
    let s: String = r[start..end].iter().filter(|c| **c != ',').collect();
    s.parse()
        .unwrap_or_else(|_| panic!("column {label:?} of {row:?} is not a count: {s:?}"))
}

/// The row of a text table (`block`: header first) naming `name`.
fn text_row<'a>(block: &[&'a str], name: &str) -> &'a str {
    block[1..]
        .iter()
        .find(|l| l.split_whitespace().any(|w| w == name))
        .unwrap_or_else(|| panic!("no row {name:?} in {block:#?}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The "what it would gain" section: in the three formats or in none,
/// naming the same locks.
fn check_gains(f: &Formats) {
    let text = text_block(&f.text, "What it would gain");
    let json = f.json.get("gains");
    let html = html_section(&f.html, "gains");
    assert_eq!(text.is_some(), json.is_some(), "{}", f.text);
    assert_eq!(json.is_some(), html.is_some(), "{:#}", f.html);
    let (Some(text), Some(json)) = (text, json) else {
        return;
    };
    let locks: Vec<&str> = json["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lock"].as_str().unwrap())
        .collect();
    let in_text: Vec<&str> = text
        .iter()
        .filter(|l| l.contains("--remove-lock"))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(in_text, locks, "{text:#?}");
    let in_html: Vec<&str> = html_rows(&f.html, "gains")
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert_eq!(in_html, locks);
}

/// Timing mode: pthread barrier rounds and waits, each semaphore's posts,
/// successful waits and failed trywaits, and the pthread spinlock's
/// acquisitions are the program's own counts in the text, the JSON and
/// the page.
#[test]
fn barrier_semaphore_and_spinlock_counts_agree_in_text_json_and_html() {
    let dir = record_util::temp("formats-bss");
    let bin = record_util::build_c("barrier_sem_spin", &dir);
    let run = record_util::record(&dir, &[], &bin, &[], b"");
    let truth = record_util::truths(&run.stdout);
    let f = formats(&run.trace_path);

    // Barrier: 1000 rounds, 4 threads waiting in each.
    let waits: u64 = truth
        .iter()
        .filter(|x| x.op == "BarrierWait" && x.phase.as_deref() == Some("done"))
        .map(|x| x.count)
        .sum();
    let b = &f.json["barriers"][0];
    assert_eq!((u(&b["rounds"]), u(&b["waits"])), (1000, waits), "{b:#}");
    assert_eq!(waits, 4000);
    let name = b["name"].as_str().unwrap();
    let block = text_block(&f.text, "BARRIERS").expect("a BARRIERS section");
    let row = text_row(&block, name);
    assert_eq!(
        (cell(block[0], row, "rounds"), cell(block[0], row, "waits")),
        (1000, waits)
    );
    let hb = html_rows(&f.html, "barriers");
    assert_eq!(hb.len(), 1);
    assert_eq!((u(&hb[0][2]), u(&hb[0][3])), (1000, waits), "{hb:?}");

    // Semaphores: (posts, waits, trywait failures) per address.
    let mut sems: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for x in &truth {
        let e = sems.entry(x.addr).or_default();
        match (x.op.as_str(), x.phase.as_deref()) {
            ("SemPost", _) => e.0 += x.count,
            ("SemWait" | "SemTimedwait" | "SemTrywait", Some("done")) => e.1 += x.count,
            ("SemTrywait", Some("fail")) => e.2 += x.count,
            _ => {}
        }
    }
    let js = f.json["semaphores"].as_array().unwrap();
    let block = text_block(&f.text, "SEMAPHORES").expect("a SEMAPHORES section");
    let hs = html_rows(&f.html, "semaphores");
    assert_eq!((js.len(), hs.len(), block.len() - 1), (4, 4, 4), "{js:#?}");
    for s in js {
        let want = sems[&record_util::hex(s["address"].as_str().unwrap())];
        let got = (u(&s["posts"]), u(&s["waits"]), u(&s["trywait_failures"]));
        assert_eq!(got, want, "{s:#}");
        let name = s["name"].as_str().unwrap();
        let row = text_row(&block, name);
        let h = block[0];
        assert_eq!(
            (
                cell(h, row, "posts"),
                cell(h, row, "waits"),
                cell(h, row, "trywait-fail")
            ),
            want,
            "{row}"
        );
        let r = hs.iter().find(|r| r[0] == name).unwrap();
        assert_eq!((u(&r[5]), u(&r[1]), u(&r[3])), want, "{r:?}");
    }

    // The pthread spinlock: lock plus successful trylock acquisitions.
    let acq: u64 = truth
        .iter()
        .filter(|x| {
            matches!(
                (x.op.as_str(), x.phase.as_deref()),
                ("SpinLock" | "SpinTrylock", Some("done"))
            )
        })
        .map(|x| x.count)
        .sum();
    let l = f.json["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["kind"] == "spin")
        .expect("the spinlock in the lock table");
    assert_eq!(u(&l["acquisitions"]), acq, "{l:#}");
    let label = l["label"].as_str().unwrap();
    let block = text_block(&f.text, "LOCKS").expect("a LOCKS section");
    assert_eq!(cell(block[0], text_row(&block, label), "acq"), acq);
    let hl = f.html["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == label)
        .unwrap();
    assert_eq!(u(&hl[3]), acq, "{hl:?}");

    check_gains(&f);
    // No section of a detailed trace or of a GPU here, in any format.
    for (heading, key, id) in [
        ("Hand-written spinlocks", "spin", "spinlocks"),
        ("Barriers:", "barrier_instances", "barrier-instances"),
        ("Dead writes:", "dead_writes", "dead-writes"),
        ("GPU (", "gpu", "gpu"),
    ] {
        assert!(text_block(&f.text, heading).is_none(), "{heading}");
        assert!(f.json.get(key).is_none(), "{key}");
        assert!(html_section(&f.html, id).is_none(), "{id}");
    }
}

/// Detailed mode with every access: the phase program's barrier has 8
/// instances, 4 of them redundant by construction, and 24 waits (3
/// threads, 8 rounds): the same in the three formats.
#[test]
fn barrier_instances_agree_in_text_json_and_html() {
    use detailed_support::*;
    let c = compilers()[0];
    let dir = Scratch::new("formats-barriers");
    let bin = dir.path("barrier_phases");
    build_instrumented(c, &fixture("barrier_phases.c"), &bin);
    let trace = dir.path("all.lstrace");
    record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
    let f = formats(&trace);

    let j = &f.json["barrier_instances"];
    assert_eq!((u(&j["instances"]), u(&j["redundant"])), (8, 4), "{j:#}");
    let jb = &j["barriers"][0];
    assert_eq!(jb["barrier"], "bar");
    assert_eq!((u(&jb["instances"]), u(&jb["redundant"])), (8, 4));
    assert!(
        f.text.contains("\nBarriers: 8 instance(s), 4 redundant"),
        "{}",
        f.text
    );
    // No header line: the rows follow the heading.
    let block = text_block(&f.text, "Barriers:").unwrap();
    let row = block
        .iter()
        .find(|l| l.split_whitespace().next() == Some("bar"))
        .unwrap_or_else(|| panic!("no row bar in {block:#?}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        (words[1], words.get(words.len() - 2).copied()),
        ("8", Some("4")),
        "{row}"
    );
    let hr = html_rows(&f.html, "barrier-instances");
    assert_eq!(hr.len(), 1);
    assert_eq!(
        (hr[0][0].as_str(), u(&hr[0][1]), u(&hr[0][3])),
        (Some("bar"), 8, 4)
    );
    assert_eq!(hr[0][2], jb["wait_ns"]);

    // The same barrier in the timing report's BARRIERS table.
    let b = &f.json["barriers"][0];
    assert_eq!((u(&b["rounds"]), u(&b["waits"])), (8, 24), "{b:#}");
    let block = text_block(&f.text, "BARRIERS").unwrap();
    let row = text_row(&block, b["name"].as_str().unwrap());
    assert_eq!(
        (cell(block[0], row, "rounds"), cell(block[0], row, "waits")),
        (8, 24)
    );
    let hb = html_rows(&f.html, "barriers");
    assert_eq!((u(&hb[0][2]), u(&hb[0][3])), (8, 24));
    check_gains(&f);
}

/// The dead-write fixture writes 58 bytes in 9 writes; 26 bytes (5
/// writes) are overwritten before any read, 8 of them by another thread.
#[test]
fn dead_writes_agree_in_text_json_and_html() {
    use detailed_support::*;
    let c = compilers()[0];
    let dir = Scratch::new("formats-deadwrites");
    let bin = dir.path("deadwrites");
    build_instrumented(c, &fixture("deadwrites.c"), &bin);
    let trace = dir.path("all.lstrace");
    record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
    let f = formats(&trace);
    let j = &f.json["dead_writes"];
    let want = [26, 58, 5, 9, 8];
    assert_eq!(
        [
            u(&j["dead_bytes"]),
            u(&j["bytes_written"]),
            u(&j["dead_writes"]),
            u(&j["writes"]),
            u(&j["cross_thread_dead_bytes"])
        ],
        want,
        "{j:#}"
    );
    assert!(
        f.text
            .contains("\nDead writes: 26 of 58 bytes written (44.8%) overwritten before any read"),
        "{}",
        f.text
    );
    let r = &html_rows(&f.html, "dead-writes")[0];
    assert_eq!(
        [u(&r[0]), u(&r[1]), u(&r[3]), u(&r[4]), u(&r[5])],
        want,
        "{r:?}"
    );
    // The advice lines are the JSON's, in the text and on the page.
    let advice = j["advice"].as_array().unwrap();
    let lines = html_section(&f.html, "dead-writes").unwrap()["lines"].clone();
    assert_eq!(lines.as_array().unwrap(), advice);
    for a in advice {
        assert!(
            f.text.contains(&format!("  - {}\n", a.as_str().unwrap())),
            "{a}"
        );
    }
}

/// Two hand-written spinlocks (test-and-set and test-and-test-and-set)
/// with the acquisitions and failed attempts the program counted.
#[test]
fn hand_written_spinlocks_agree_in_text_json_and_html() {
    use detailed_support::*;
    let c = compilers()[0];
    let dir = Scratch::new("formats-spin");
    let bin = dir.path("spinlocks");
    let src = lockscope_test_support::workspace_root().join("tests/programs/spin/spinlocks.c");
    build_instrumented(c, &src, &bin);
    let trace = dir.path("t.lstrace");
    let out = record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
    let truth: BTreeMap<&str, u64> = out
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    let f = formats(&trace);
    let block = text_block(&f.text, "Hand-written spinlocks").expect("the spinlock section");
    let hr = html_rows(&f.html, "spinlocks");
    let js = f.json["spin"]["spinlocks"].as_array().unwrap();
    assert_eq!((js.len(), hr.len(), block.len() - 1), (2, 2, 2));
    for name in ["tas_lock", "ttas_lock"] {
        let want = (
            truth[format!("{name} acquisitions").as_str()],
            truth[format!("{name} failed_attempts").as_str()],
        );
        let l = js.iter().find(|l| l["symbol"] == name).unwrap();
        assert_eq!(
            (u(&l["acquisitions"]), u(&l["failed_attempts"])),
            want,
            "{l:#}"
        );
        let row = text_row(&block, name);
        assert_eq!(
            (
                cell(block[0], row, "acquired"),
                cell(block[0], row, "failed")
            ),
            want,
            "{row}"
        );
        let r = hr.iter().find(|r| r[0] == name).unwrap();
        assert_eq!((u(&r[2]), u(&r[3])), want, "{r:?}");
    }
}

/// GPU capture through the stand-in CUPTI: the program's known schedule
/// (two kernels and one copy) in the GPU section of the three formats.
#[test]
fn gpu_section_agrees_in_text_json_and_html() {
    let dir = record_util::temp("formats-gpu");
    let (cupti, app) = record_util::build_gpu_fixture(&dir);
    let trace = dir.join("gpu.lstrace");
    let o = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&app)
        .env("LOCKSCOPE_CUPTI", &cupti)
        .env_remove("CUDA_INJECTION64_PATH")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = formats(&trace);
    let g = &f.json["gpu"];
    assert_eq!(g["schema"], "lockscope.gpu/1", "{:#}", f.json);
    // Kernels, and copies of any direction (`copy_hto_d`, ...).
    let kernels_and_copies = |rows: Vec<(&Value, u64)>| {
        let of = |copy: bool| {
            rows.iter()
                .filter(|(k, _)| k.as_str().unwrap().starts_with("copy") == copy)
                .map(|(_, n)| n)
                .sum::<u64>()
        };
        (of(false), of(true))
    };
    let work = g["work"].as_array().unwrap();
    assert_eq!(
        kernels_and_copies(work.iter().map(|w| (&w["kind"], u(&w["count"]))).collect()),
        (2, 1),
        "{g:#}"
    );
    let hw = html_rows(&f.html, "gpu-work");
    assert_eq!(
        kernels_and_copies(hw.iter().map(|r| (&r[0], u(&r[4]))).collect()),
        (2, 1),
        "{hw:?}"
    );
    assert_eq!(
        html_rows(&f.html, "gpu").len(),
        g["gpu_idle_causes"].as_array().unwrap().len()
    );
    // The text section is `lockscope gpu`'s text, with its verdict.
    let verdict = g["verdict"].as_str().unwrap();
    assert!(
        f.text.contains("\nGPU (CPU-GPU blame shifting")
            && f.text.contains(&format!("GPU: {verdict}\n")),
        "{}",
        f.text
    );
    let lines = html_section(&f.html, "gpu").unwrap()["lines"].clone();
    assert_eq!(lines[0], g["verdict"]);
}
