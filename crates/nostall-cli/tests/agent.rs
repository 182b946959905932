//! `nostall agent` as a process: it serves jobs, and a second agent for the same socket
//! leaves at once instead of taking it over.

use std::process::{Command, Stdio};
use std::time::Duration;

use nostall::Position;
use nostall_agent::Client;

#[test]
fn the_agent_serves_a_job_and_a_second_one_for_its_socket_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
    let socket = dir.path().join("run/agent.sock");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args(["agent", "--idle", "600", "--socket"])
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let settings: Vec<(String, String)> = [
        ("batch_size", "8"),
        ("pipeline", "val"),
        ("image_size", "32"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut client = Client::attach_within(
        Duration::from_secs(60),
        &socket,
        &photos.to_string_lossy(),
        &settings,
        "",
    )
    .unwrap();
    let mut at = Position::start_of(0);
    let mut samples = 0;
    while let Some(batch) = client.next(at).unwrap() {
        samples += batch.len();
        at = batch.position();
    }
    assert_eq!(samples as u64, client.attached().dataset_len);

    let second = Command::new(env!("CARGO_BIN_EXE_nostall"))
        .args(["agent", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(second.status.success());
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("another agent"), "{said}");
    // The first still serves.
    assert!(client.next(Position::start_of(1)).unwrap().is_some());
    agent.kill().unwrap();
    agent.wait().unwrap();
}
