//! `nostall analyze` end to end on the built-in demo photographs: the summary, the JSON
//! report, reuse of its rates, and the HTML page rendered by headless Chromium (Debian's
//! `chromium` package; `make deps` installs it).

use std::path::Path;
use std::process::Command;

fn nostall(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the nostall binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The DOM of `page` after its scripts ran, from headless Chromium.
fn rendered(page: &Path) -> String {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok())
        .expect("no Chromium found: install Debian's chromium package (`make deps` does)");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn analyze_reports_in_the_terminal_as_json_and_as_a_page_that_renders() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = nostall(
        &[
            "analyze",
            "--budget",
            "2",
            "--run-seconds",
            "1",
            "--max-threads",
            "2",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    for needle in [
        "G  model",
        "P  prep, 2 thread(s)",
        "F  fetch",
        "predicted:",
        "measured:",
    ] {
        assert!(
            stdout.contains(needle),
            "{needle:?} missing from:\n{stdout}"
        );
    }
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("nostall-analysis.json")).unwrap(),
    )
    .unwrap();
    let prep = report["rates"]["prep"].as_array().unwrap();
    assert_eq!(prep.len(), 2);
    assert!(prep.iter().all(|p| p.as_f64().unwrap() > 0.0));
    assert!(report["rates"]["storage_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["observed"]["images_per_s"].as_f64().unwrap() > 0.0);
    assert!(!report["advice"]["verdict"].as_str().unwrap().is_empty());

    let dom = rendered(&dir.path().join("nostall-analysis.html"));
    assert!(
        !dom.contains("data-script-errors"),
        "a script failed:\n{dom}"
    );
    // The page's own script ran to its end and counted the charts.
    assert!(
        dom.contains(r#"data-charts="5""#),
        "{}",
        &dom[..dom.len().min(2000)]
    );
    assert_eq!(dom.matches("<figure>").count(), 5);
    assert!(
        dom.matches("<polyline").count() >= 12,
        "four what-if charts with lines"
    );
    for label in [
        "share of epoch time (%)",
        "dataset cached (%)",
        "prep threads (cores)",
        "storage bandwidth (MB/s, log scale)",
        "samples/s per node",
        r#"id="download" href="blob:"#,
    ] {
        assert!(
            dom.contains(label),
            "{label:?} missing from the rendered page"
        );
    }
}

#[test]
fn earlier_rates_are_reused_and_a_bad_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = nostall(
        &[
            "analyze",
            "--budget",
            "1",
            "--no-run",
            "--json",
            "first.json",
            "--html",
            "first.html",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    let (ok, stdout, stderr) = nostall(
        &[
            "analyze",
            "--rates",
            "first.json",
            "--model-rate",
            "1",
            "--no-run",
            "--json",
            "second.json",
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains("from earlier report"), "{stdout}");
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
    };
    let (first, second) = (read("first.json"), read("second.json"));
    assert_eq!(first["rates"]["prep"], second["rates"]["prep"]);
    assert_eq!(second["rates"]["model"], 1.0);
    assert_eq!(second["prediction"]["bottleneck"], "model");

    std::fs::write(dir.path().join("bad.json"), "{\"rates\": 3}").unwrap();
    let (ok, _, stderr) = nostall(&["analyze", "--rates", "bad.json"], dir.path());
    assert!(!ok);
    assert!(
        stderr.contains("bad.json: not a report written by `nostall analyze`"),
        "{stderr}"
    );
}

#[test]
fn a_pipeline_given_as_operators_is_the_one_analysed() {
    let dir = tempfile::tempdir().unwrap();
    let operators =
        "[Resize(64), CenterCrop(size=48), Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))]";
    let args = [
        "analyze",
        "--budget",
        "1",
        "--no-run",
        "--json",
        "report.json",
    ];
    let (ok, _, stderr) = nostall(
        &[&args[..], &["--pipeline", operators]].concat(),
        dir.path(),
    );
    assert!(ok, "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let pipeline = report["configuration"]["pipeline"].as_str().unwrap();
    assert!(
        pipeline.starts_with("Resize(64) → CenterCrop(48)"),
        "{pipeline}"
    );

    let (ok, _, stderr) = nostall(
        &[&args[..], &["--pipeline", "[Resize(64), Blur(3)]"]].concat(),
        dir.path(),
    );
    assert!(!ok);
    assert!(stderr.contains("unknown operator \"Blur\""), "{stderr}");
    let (ok, _, stderr) = nostall(
        &[&args[..], &["--pipeline", operators, "--size", "96"]].concat(),
        dir.path(),
    );
    assert!(!ok);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
