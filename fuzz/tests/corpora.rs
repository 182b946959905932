//! Every fuzz target over its seed corpus (`corpus/TARGET`), every input that once made
//! it fail (`regressions/TARGET`, added as fuzzing finds them), and seeded mutations of
//! the seeds: what `cargo test` checks of the parsers of untrusted bytes between fuzzing
//! runs (`bash bench/fuzz.sh`).

use std::path::{Path, PathBuf};

use nostall::rng::Rng;

/// Mutations tried per seed: enough to walk every parser's error paths, few enough that
/// the suite stays fast in a debug build.
const MUTATIONS: u64 = 500;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut inputs = Vec::new();
    for dir in ["corpus", "regressions"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            inputs.push((path, bytes));
        }
    }
    inputs.sort();
    inputs
}

/// A copy of `seed` changed the way fuzzers change inputs: bytes flipped or set to
/// boundary values, cut short, chunks repeated or dropped.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if out.is_empty() {
            out.push(rng.next_u64() as u8);
            continue;
        }
        let at = rng.below(out.len() as u64) as usize;
        match rng.below(6) {
            0 => out[at] ^= 1 << rng.below(8),
            1 => out[at] = [0x00, 0xFF, 0x7F, 0x80, 0x01][rng.below(5) as usize],
            2 => out.truncate(at),
            3 => {
                let end = (at + 1 + rng.below(64) as usize).min(out.len());
                let chunk = out[at..end].to_vec();
                out.splice(at..at, chunk);
            }
            4 => {
                let end = (at + 1 + rng.below(64) as usize).min(out.len());
                out.drain(at..end);
            }
            _ => {
                let wide = rng.next_u64().to_be_bytes();
                let end = (at + 8).min(out.len());
                out[at..end].copy_from_slice(&wide[..end - at]);
            }
        }
    }
    out
}

fn replay(target: &str, run: fn(&[u8])) {
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "no corpus for {target}");
    for (n, (path, bytes)) in inputs.iter().enumerate() {
        run(bytes);
        let mut rng = Rng::new(nostall::rng::derive(&[0xF022, n as u64]));
        for i in 0..MUTATIONS {
            let mutated = mutate(bytes, &mut rng);
            let outcome = std::panic::catch_unwind(|| run(&mutated));
            assert!(
                outcome.is_ok(),
                "{target} panicked on mutation {i} of {}: {mutated:02x?}",
                path.display()
            );
        }
    }
}

#[test]
fn parquet() {
    replay("parquet", nostall_fuzz::parquet);
}

#[test]
fn tar_index() {
    replay("tar_index", nostall_fuzz::tar_index);
}

#[test]
fn index() {
    replay("index", nostall_fuzz::index);
}

#[test]
fn image() {
    replay("image", nostall_fuzz::image);
}

#[test]
fn audio() {
    replay("audio", nostall_fuzz::audio);
}

#[test]
fn peer_frames() {
    replay("peer_frames", nostall_fuzz::peer_frames);
}

#[test]
fn s3_response() {
    replay("s3_response", nostall_fuzz::s3_response);
}

#[test]
fn agent_messages() {
    replay("agent_messages", nostall_fuzz::agent_messages);
}

#[test]
fn operators() {
    replay("operators", nostall_fuzz::operators);
}
