//! `lockscope html` in a real headless Chromium (Debian's
//! `chromium`): the page loads with no errors, the timeline draws, a hover
//! over the longest wait shows its lock, site and call path, names that
//! are markup stay text; screenshots are saved under the target's
//! test-temporary directory (`target/tmp/html-report/`) for a person to
//! look at.

use crate::export_util;

use std::path::{Path, PathBuf};
use std::process::Command;

use export_util::{lockscope, record_fixture, require_tool};
use serde_json::Value;

fn html(trace: &Path, out: &Path) -> String {
    lockscope(&[
        "html".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    std::fs::read_to_string(out).unwrap()
}

fn chromium(page: &Path, extra: &[String], fragment: &str, home: &Path) -> String {
    let browser = require_tool("chromium", "chromium");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1400,1000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            home.join("chromium").display()
        ))
        .args(extra)
        .arg(format!("file://{}{fragment}", page.display()))
        .env("HOME", home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page's self-test result (`#selftest`), from the DOM after load.
fn selftest(page: &Path, home: &Path) -> (Value, String) {
    let dom = chromium(page, &["--dump-dom".to_string()], "#selftest", home);
    let start = dom
        .find("<pre id=\"selftest\">")
        .unwrap_or_else(|| panic!("no self-test result in the DOM:\n{dom}"));
    let rest = &dom[start + "<pre id=\"selftest\">".len()..];
    let json = &rest[..rest.find("</pre>").unwrap()];
    let json = json
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    (serde_json::from_str(&json).expect("self-test JSON"), dom)
}

fn screenshot(page: &Path, name: &str, home: &Path) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-report");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    chromium(page, &[format!("--screenshot={}", png.display())], "", home);
    let bytes = std::fs::read(&png).expect("a screenshot was written");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{}",
        png.display()
    );
    eprintln!("screenshot: {}", png.display());
    png
}

/// No request leaves the page: no external resource of any kind in its
/// markup, style or script (the data element holds names, which may say
/// anything, and is never markup).
fn self_contained(text: &str) {
    let open = "id=\"lockscope-data\">";
    let a = text.find(open).expect("data element") + open.len();
    let b = a + text[a..].find("</script>").unwrap();
    let text = format!("{}{}", &text[..a], &text[b..]);
    for needle in [
        "src=",
        "href=",
        "<link",
        "@import",
        "url(",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(
            !text.contains(needle),
            "the page refers to a resource: {needle}"
        );
    }
}

#[test]
fn html_loads_draws_and_hovers_in_chromium() {
    let (dir, trace) = record_fixture("i11-html-sleep", "report/sleep_hold", &[]);
    let page = dir.join("report.html");
    let text = html(&trace, &page);
    self_contained(&text);
    let (r, dom) = selftest(&page, &dir);
    assert_eq!(r["errors"], serde_json::json!([]), "page errors: {r}");
    assert!(
        r["painted"].as_u64().unwrap() > 2000,
        "timeline not drawn: {r}"
    );
    let hover = r["hover"]
        .as_str()
        .unwrap_or_else(|| panic!("no hover: {r}"));
    assert!(hover.starts_with("wait held_lock"), "{hover}");
    assert!(hover.contains("at wait_for_it (sleep_hold.c:"), "{hover}");
    assert!(hover.contains("call path:"), "{hover}");
    // The time axis is labelled at round values in one unit: equal steps
    // of 1, 2 or 5 times a power of ten, from 0.
    let ticks: Vec<&str> = r["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(ticks.len() >= 4, "{ticks:?}");
    let unit = ticks[0].split(' ').nth(1).unwrap();
    let v: Vec<f64> = ticks
        .iter()
        .map(|t| {
            let (n, u) = t.split_once(' ').unwrap();
            assert_eq!(u, unit, "{ticks:?}");
            n.parse().unwrap()
        })
        .collect();
    assert_eq!(v[0], 0.0, "{ticks:?}");
    let step = v[1];
    let mantissa = step / 10f64.powf(step.log10().floor());
    assert!(
        [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-6),
        "{ticks:?}"
    );
    assert!(
        v.windows(2)
            .all(|w| (w[1] - w[0] - step).abs() < step * 1e-6),
        "{ticks:?}"
    );
    // Rows: every thread once.
    let mut rows: Vec<u64> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    rows.sort();
    assert_eq!(rows, (0..rows.len() as u64).collect::<Vec<_>>(), "{r}");
    // The per-lock flame graph of the only contended lock can be chosen.
    assert_eq!(r["flame_lock"], "lock held_lock", "{r}");
    // The report's verdict and tables are on the page.
    assert!(dom.contains("threads waited for locks"), "verdict missing");
    assert!(dom.contains("<table id=\"locks\">"), "lock table missing");
    assert!(dom.contains(">held_lock</td>"), "held_lock row missing");
    eprintln!("ms per timeline frame: {}", r["ms_per_frame"]);
    screenshot(&page, "sleep_hold", &dir);
}

#[test]
fn html_thread_names_with_markup_stay_text() {
    let (dir, trace) = record_fixture("i11-html-xss", "export/xss_names", &[]);
    let page = dir.join("report.html");
    let text = html(&trace, &page);
    self_contained(&text);
    // Our three script elements and nothing else; the names are in the
    // JSON with `<` escaped.
    assert_eq!(text.matches("<script").count(), 3, "a name became markup");
    assert!(!text.contains("<img"), "a name became markup");
    assert!(
        text.contains("\\u003cscript>"),
        "the name is in the data, escaped"
    );
    let (r, dom) = selftest(&page, &dir);
    assert_eq!(r["errors"], serde_json::json!([]), "page errors: {r}");
    assert_eq!(r["scripts"], 3, "a script element was injected: {r}");
    assert!(!dom.contains("<img"), "an img element was injected");
    // Shown as text in the threads table.
    assert!(dom.contains("<td class=\"t\">&lt;script&gt;</td>"), "{dom}");
    assert!(
        dom.contains("<td class=\"t\">&lt;img src=x&gt;</td>"),
        "{dom}"
    );
    screenshot(&page, "xss_names", &dir);
}
