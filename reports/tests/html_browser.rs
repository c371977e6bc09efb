//! `report.html` in a real browser: headless Chromium renders it, and the rendered DOM and a
//! screenshot must show the charts.
//!
//! String checks on the HTML cannot tell whether a browser draws anything; this test can. It needs
//! Debian's `chromium` on PATH and says so plainly when it is missing instead of failing.

mod common;

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one Chromium call may take before it is killed: generous, the machine may be busy.
const TIMEOUT: Duration = Duration::from_secs(60);

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Runs Chromium headless on `page` with `args`, stdout to `stdout_file`, killed after [`TIMEOUT`].
fn chromium(bin: &Path, scratch: &Path, args: &[String], page: &Path, stdout_file: &Path) {
    // A fresh profile per call: no state from a previous run, no lock held by another test.
    let profile = tempfile::tempdir_in(scratch).unwrap();
    let stderr_file = scratch.join("chromium-stderr.txt");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        // Files, not pipes: a DOM dump larger than a pipe buffer would block Chromium while the test
        // waits for it to exit.
        .stdout(File::create(stdout_file).unwrap())
        .stderr(File::create(&stderr_file).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "chromium {args:?} exited with {status}:\n{}",
                std::fs::read_to_string(&stderr_file).unwrap_or_default()
            );
            return;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium {args:?} did not finish within {TIMEOUT:?}:\n{}",
                std::fs::read_to_string(&stderr_file).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The element `<svg id="{id}" …>…</svg>` in a DOM dump.
fn svg<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<svg id=\"{id}\""))
        .unwrap_or_else(|| panic!("no svg #{id} in the rendered DOM"));
    let end = dom[start..].find("</svg>").unwrap() + start;
    &dom[start..end]
}

#[test]
fn chromium_renders_the_charts() {
    let Some(bin) = find_on_path("chromium") else {
        println!(
            "skipping: chromium not found on PATH (install Debian's chromium package to run this test)"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let files = reports::write_report_dir(&common::sample(), &tmp.path().join("report")).unwrap();

    let dom_file = tmp.path().join("dom.html");
    chromium(
        &bin,
        tmp.path(),
        &["--dump-dom".to_string()],
        &files.html,
        &dom_file,
    );
    let dom = std::fs::read_to_string(&dom_file).unwrap();
    let timeline = svg(&dom, "chart-timeline");
    assert_eq!(
        timeline.matches("<rect").count(),
        20,
        "five waves of four series"
    );
    assert!(svg(&dom, "chart-latency").matches("<rect").count() >= 5);
    assert_eq!(
        svg(&dom, "chart-retry-delays").matches("<circle").count(),
        2_500
    );
    assert!(dom.contains("FAILED: thundering-herd-no-jitter"));

    let png_path = tmp.path().join("report.png");
    chromium(
        &bin,
        tmp.path(),
        &[
            format!("--screenshot={}", png_path.display()),
            "--window-size=1280,2000".to_string(),
        ],
        &files.html,
        &tmp.path().join("screenshot-stdout.txt"),
    );
    assert!(png_path.is_file(), "no screenshot written");

    let decoder = png::Decoder::new(std::io::BufReader::new(File::open(&png_path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1280, 2000));
    let channels = info.color_type.samples();
    assert!(
        channels >= 3,
        "unexpected colour type {:?}",
        info.color_type
    );
    let pixels: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();

    let distinct: HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        distinct.len() > 50,
        "only {} colours: a blank page?",
        distinct.len()
    );
    let non_white = pixels.iter().filter(|p| p.iter().any(|c| *c < 235)).count();
    assert!(
        non_white * 100 > pixels.len() * 5,
        "only {non_white} of {} pixels are not white",
        pixels.len()
    );
    // The 503 bars of the sawtooth are drawn in #d62728; the failed verdict banner is #c62828.
    let near = |p: &[u8; 3], c: [u8; 3]| p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= 8);
    let bars = pixels
        .iter()
        .filter(|p| near(p, [0xd6, 0x27, 0x28]))
        .count();
    assert!(
        bars > 1_000,
        "the 503 waves are not visible: {bars} red pixels"
    );
    let banner = pixels
        .iter()
        .filter(|p| near(p, [0xc6, 0x28, 0x28]))
        .count();
    assert!(banner > 10_000, "no red FAILED banner: {banner} pixels");
}

#[test]
fn chromium_renders_the_scorecard() {
    let Some(bin) = find_on_path("chromium") else {
        println!(
            "skipping: chromium not found on PATH (install Debian's chromium package to run this test)"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let files =
        reports::write_report_dir(&common::scorecard_sample(), &tmp.path().join("report")).unwrap();
    let dom_file = tmp.path().join("dom.html");
    chromium(
        &bin,
        tmp.path(),
        &["--dump-dom".to_string()],
        &files.html,
        &dom_file,
    );
    let dom = std::fs::read_to_string(&dom_file).unwrap();
    // One row per rule, each with its verdict's badge; the failed rule's evidence open.
    for (id, badge) in [
        ("transient-retried", "pass"),
        ("no-retry-4xx", "fail"),
        ("jitter", "weak"),
        ("retry-after", "inconclusive"),
        ("breaker", "inconclusive"),
    ] {
        let at = dom
            .find(&format!("id=\"rule-{id}\""))
            .unwrap_or_else(|| panic!("no row for {id} in the rendered DOM"));
        let row = &dom[at..at + dom[at..].find("</tr>").unwrap()];
        assert!(row.contains(&format!("badge {badge}")), "{id}: {row}");
    }
    assert!(dom.contains("NOT PRESENT"));
    assert!(dom.contains("5 rules: 1 pass, 1 weak, 1 fail, 1 not present, 1 inconclusive"));
    assert!(
        dom.contains("<details class=\"operation\" open=\"\"><summary><code>no-retry-4xx</code>")
    );
    // A scorecard has no load: no charts.
    assert!(!dom.contains("chart-timeline"));

    let png_path = tmp.path().join("scorecard.png");
    chromium(
        &bin,
        tmp.path(),
        &[
            format!("--screenshot={}", png_path.display()),
            "--window-size=1280,900".to_string(),
        ],
        &files.html,
        &tmp.path().join("screenshot-stdout.txt"),
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(File::open(&png_path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    let near = |p: &[u8; 3], c: [u8; 3]| p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= 8);
    // The green pass badge (#1f8a45), the red fail badge and banner (#c62828) are drawn.
    let green = pixels
        .iter()
        .filter(|p| near(p, [0x1f, 0x8a, 0x45]))
        .count();
    let red = pixels
        .iter()
        .filter(|p| near(p, [0xc6, 0x28, 0x28]))
        .count();
    assert!(green > 50, "no pass badge drawn: {green} pixels");
    assert!(red > 1_000, "no fail badge and banner drawn: {red} pixels");
}
