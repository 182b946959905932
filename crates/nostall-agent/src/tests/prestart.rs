//! A group starts on the start of epoch 0 when it is made, before any job asks, as a job's
//! own loader does while the job gets ready; a first ask elsewhere moves it there.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use nostall::Position;

use super::{read_epoch, strip, Fixture};

const WINDOW: u64 = 3;

/// Waits until the job's group has made `n` batches, woken as each is staged (bounded only
/// to end a failure).
fn made(f: &Fixture, n: u64) {
    let (name, _) = &f.agent.stats().groups[0];
    let group = f.agent.group(name).expect("the job's group");
    let made = group.made_within(n, Duration::from_secs(60));
    assert!(made >= n, "the group made {made} of {n} batches");
}

#[test]
fn a_group_makes_its_first_batches_before_its_job_asks_and_serves_them() {
    let f = Fixture::new(WINDOW, Duration::from_secs(30));
    let expected = f.expected(7, 0);
    let mut client = f.attach(7, "").unwrap();
    // A full window staged with nobody asking yet: the producer waits there.
    made(&f, WINDOW);
    let (_, group) = &f.agent.stats().groups[0];
    assert_eq!(group.produced, WINDOW, "{group:?}");
    let (read, _) = read_epoch(&mut client, Position::start_of(0), None);
    assert_eq!(strip(&read), expected);
    assert!(
        read.iter().all(|b| b.3),
        "every batch from the group's stream"
    );
    let (_, group) = &f.agent.stats().groups[0];
    // Made once: what was made ahead was served, not made again.
    let batches = expected.len() as u64;
    assert!(group.produced >= batches, "{group:?}");
    assert!(group.produced <= batches + WINDOW, "{group:?}");
}

#[test]
fn a_first_ask_elsewhere_moves_the_stream_and_the_jobs_getting_ready_follow_it() {
    let f = Fixture::new(WINDOW, Duration::from_secs(30));
    let expected = f.expected(7, 1);
    let jobs = 2;
    let clients: Vec<_> = (0..jobs).map(|_| f.attach(7, "").unwrap()).collect();
    made(&f, WINDOW);
    let barrier = Arc::new(Barrier::new(jobs));
    let reads: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .into_iter()
            .map(|mut client| {
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    read_epoch(&mut client, Position::start_of(1), None).0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for read in &reads {
        assert_eq!(strip(read), expected);
        assert!(
            read.iter().all(|b| b.3),
            "every batch from the group's stream"
        );
    }
}
