//! `nostall node` without peers over the built-in demo photographs: `--prefill` reads a
//! frequency cache's placement before the first epoch, and refuses a policy that has
//! nothing to fill before it.

use std::process::Command;

fn node(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args([
            "node",
            "--no-peers",
            "--world",
            "1",
            "--epochs",
            "1",
            "--size",
            "32",
        ])
        .args(args)
        // The demo photographs are written under the temporary directory.
        .env("TMPDIR", dir)
        .current_dir(dir)
        .output()
        .expect("the nostall binary runs")
}

#[test]
fn prefill_reads_a_frequency_placement_first_and_refuses_lookahead() {
    let dir = tempfile::tempdir().unwrap();
    let refused = node(&["--prefill", "--cache-policy", "lookahead"], dir.path());
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("--prefill") && why.contains("minio or frequency"),
        "{why}"
    );

    let json = dir.path().join("epochs.jsonl");
    let json_arg = json.to_str().unwrap();
    let args = [
        "--prefill",
        "--cache-policy",
        "frequency",
        "--cache-size",
        "100%",
        "--json",
        json_arg,
    ];
    let filled = node(&args, dir.path());
    assert!(
        filled.status.success(),
        "{}",
        String::from_utf8_lossy(&filled.stderr)
    );
    let row = std::fs::read_to_string(&json).unwrap();
    let field = |name: &str| -> u64 {
        let at = row
            .find(&format!("\"{name}\":"))
            .unwrap_or_else(|| panic!("{name} in {row}"));
        let rest = &row[at + name.len() + 3..];
        rest[..rest.find([',', '}']).unwrap()].parse().unwrap()
    };
    // The whole dataset was placed and read while the loader was made: the first epoch
    // only hits, and storage was read before it, not during it.
    assert_eq!(field("cache_misses"), 0, "{row}");
    assert_eq!(field("cache_hits"), field("images"), "{row}");
    assert_eq!(field("storage_bytes"), 0, "{row}");
    assert!(field("made_storage_bytes") > 0, "{row}");
}
