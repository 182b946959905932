//! Every fuzz target over its seed corpus (`corpus/TARGET`), every input that once made
//! it fail (`regressions/TARGET`, added as fuzzing finds them), and seeded mutations of
//! the seeds: what `cargo test` checks of the parsers of untrusted bytes between fuzzing
//! runs (`bash bench/fuzz.sh`).
//!
//! Every input runs under the fuzzers' allocator: one that makes a target hold more than
//! [`alloc::LIMIT`] aborts this test binary, naming the input.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nostall::rng::Rng;
use nostall_fuzz::alloc;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// Held by each replay: the allocator counts the whole process, so a replay beside
/// another would be charged with the other's bytes (two targets each under the limit
/// could pass it together).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

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
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The limit is only seen if this binary's allocations are counted: while the probe
    // is held, the count holds it too, whatever other threads free meanwhile.
    let probe = std::hint::black_box(vec![1u8; 1 << 20]);
    assert!(alloc::live() >= probe.len(), "allocations are not counted");
    drop(probe);
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "no corpus for {target}");
    for (n, (path, bytes)) in inputs.iter().enumerate() {
        alloc::running(format!("{target} on {}", path.display()));
        run(bytes);
        let mut rng = Rng::new(nostall::rng::derive(&[0xF022, n as u64]));
        for i in 0..MUTATIONS {
            let mutated = mutate(bytes, &mut rng);
            // The mutation by its number: the seeds make it again.
            alloc::running(format!("{target} on mutation {i} of {}", path.display()));
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
fn video() {
    replay("video", nostall_fuzz::video);
}

#[test]
fn manifest() {
    replay("manifest", nostall_fuzz::manifest);
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

#[test]
fn fields() {
    replay("fields", nostall::fields::prepare_for_fuzzing);
}

#[test]
fn remote_wire() {
    replay("remote_wire", nostall_remote::wire::parse_for_fuzzing);
}
