//! A job that pauses past its lease every epoch: it falls out of its group, reads the rest
//! of the epoch from a private stream, and rejoins at the next. Leases run on a manual
//! clock, so that each pause outlasts the lease exactly when the test says.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Duration;

use nostall::clock::Clock;
use nostall::Position;

use super::{Fixture, Read};
use crate::{AgentError, Client, SharedBatch};

/// The next batch at `at`, asked again when a loaded machine kept the agent silent for a
/// (real) lease.
fn next(client: &mut Client, at: Position) -> Option<SharedBatch> {
    loop {
        match client.next(at) {
            Err(AgentError::Silent(_)) => continue,
            other => return other.unwrap(),
        }
    }
}

fn row(batch: &SharedBatch) -> (Vec<u64>, Vec<i64>, Vec<u8>, bool) {
    (
        batch.ids().to_vec(),
        batch.labels().to_vec(),
        batch.data().to_vec(),
        batch.from_group(),
    )
}

#[test]
fn a_job_pausing_past_its_lease_every_epoch_keeps_no_buffer_of_the_streams_it_left() {
    // Three batches staged ahead of the slowest member; each pause outlasts the lease,
    // the other member's waits do not (the clock moves by 0.6 lease twice a pause).
    let lease = Duration::from_secs(60);
    let clock = Clock::manual();
    let f = Fixture::with(3, lease, |agent| agent.clock = clock.clone());
    let mut pauser = f.attach(8, "").unwrap();
    let mut reader = f.attach(8, "").unwrap();
    // Buffers the pauser was sent batches in: by its group, and by its private streams.
    let (mut group, mut left) = (HashSet::new(), HashSet::new());
    for epoch in 0..5 {
        let expected = f.expected(8, epoch);
        assert!(expected.len() >= 8, "{} batches", expected.len());
        // The pauser takes three batches of the group and holds them (as a stopped
        // process would): its credit is spent, so the agent sends it nothing more.
        let mut at = Position::start_of(epoch);
        let mut held = Vec::new();
        for _ in 0..3 {
            let batch = next(&mut pauser, at).unwrap();
            assert!(batch.from_group(), "epoch {epoch}: back in the group");
            group.insert(batch.buffer());
            at = batch.position();
            held.push(batch);
        }
        // The buffers of the private streams it left are closed: it holds its group's.
        let holds = pauser.buffers_held();
        assert!(
            holds.is_disjoint(&left),
            "epoch {epoch}: still holds {:?} of the private streams it left",
            holds.intersection(&left).collect::<Vec<_>>()
        );
        assert!(holds.is_subset(&group), "{holds:?} beyond {group:?}");
        if epoch == 4 {
            break;
        }
        clock.advance(lease.mul_f64(0.6));
        // The reader goes on until the window is full behind the pauser (batches 3 to 5),
        // then waits for it; the pause outlasts the lease, the pauser is detached, and
        // the reader finishes the epoch.
        let (got, reached) = mpsc::channel();
        let read: Read = std::thread::scope(|scope| {
            let reading = scope.spawn(|| {
                let got = got; // (gone with the thread, should it fail)
                let (mut at, mut read) = (Position::start_of(epoch), Vec::new());
                while let Some(batch) = next(&mut reader, at) {
                    at = batch.position();
                    got.send(batch.index()).unwrap();
                    read.push(row(&batch));
                }
                read
            });
            while reached.recv().unwrap() < 5 {}
            clock.advance(lease.mul_f64(0.6));
            reading.join().unwrap()
        });
        assert_eq!(super::strip(&read), expected, "epoch {epoch}");
        assert!(
            read.iter().all(|b| b.3),
            "epoch {epoch}: the reader in the group"
        );
        // Back, the pauser reads the rest of its epoch from a stream of its own.
        let mut rows: Read = held.iter().map(row).collect();
        drop(held);
        while let Some(batch) = next(&mut pauser, at) {
            assert!(!batch.from_group(), "epoch {epoch}: detached, read alone");
            left.insert(batch.buffer());
            at = batch.position();
            rows.push(row(&batch));
        }
        assert_eq!(super::strip(&rows), expected, "epoch {epoch}");
    }
    assert_eq!(f.agent.stats().groups[0].1.detached, 4);
    assert!(!left.is_empty());
}
