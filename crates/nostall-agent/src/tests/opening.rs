//! A group's dataset opened on slow storage: held open by a hook until the test lets it
//! go, while other jobs attach and leave.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use nostall::Position;

use super::{read_epoch, strip, Fixture};
use crate::server::OpenStep;

#[test]
fn a_slow_opening_holds_up_no_other_group_and_its_own_jobs_open_it_once() {
    let (reached, steps) = mpsc::channel::<(String, OpenStep)>();
    let (go, gate) = mpsc::channel::<()>();
    let (reached, gate) = (Mutex::new(reached), Mutex::new(gate));
    let holding = AtomicBool::new(true);
    let f = Fixture::with(2, Duration::from_secs(60), |agent| {
        agent.open_hook = Some(Box::new(move |name, step| {
            let _ = reached.lock().unwrap().send((name.to_string(), step));
            // The first opening waits for the test's word, as on storage that hangs.
            if step == OpenStep::Opens && holding.swap(false, Ordering::SeqCst) {
                let _ = gate.lock().unwrap().recv();
            }
        }))
    });
    let expected = f.expected(1, 0);
    // (Waits are bounded only to end a failure: a job held up would wait for ever.)
    let bound = Duration::from_secs(60);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| f.attach(1, "").unwrap());
        let (slow, step) = steps.recv_timeout(bound).expect("the first job opens");
        assert_eq!(step, OpenStep::Opens);
        // While it opens: a job of the same group, which waits for that opening instead
        // of opening again, and a job of another group, which attaches, reads and
        // leaves (its group is gone once it left).
        let second = scope.spawn(|| f.attach(1, "").unwrap());
        let (done, other) = mpsc::channel();
        scope.spawn(|| {
            let done = done; // (gone with the thread, should it fail)
            let mut client = f.attach(2, "").unwrap();
            let name = client.attached().group.clone();
            let (read, _) = read_epoch(&mut client, Position::start_of(0), None);
            assert_eq!(strip(&read), f.expected(2, 0));
            drop(client);
            let give_up = Instant::now() + bound;
            while f.agent.stats().groups.iter().any(|(g, _)| *g == name) {
                assert!(
                    Instant::now() < give_up,
                    "the group of a job that left stays"
                );
                std::thread::yield_now();
            }
            done.send(name).unwrap();
        });
        let other = other.recv_timeout(bound);
        let mut seen = Vec::new();
        let waited = loop {
            match steps.recv_timeout(bound) {
                Ok(step) if step == (slow.clone(), OpenStep::Waits) => break true,
                Ok(step) => seen.push(step),
                Err(_) => break false,
            }
        };
        go.send(()).unwrap();
        let other = other.expect("another group's job attached and left during the opening");
        assert!(
            waited,
            "the second job of the group did not wait for it: {seen:?}"
        );
        // (The hook names what the jobs wait on: their stream, whose group is named once
        // its dataset is open.)
        let (mut first, mut second) = (first.join().unwrap(), second.join().unwrap());
        assert_ne!(other, first.attached().group);
        assert_eq!(first.attached().group, second.attached().group);
        seen.extend(steps.try_iter());
        assert!(
            !seen.contains(&(slow.clone(), OpenStep::Opens)),
            "opened again: {seen:?}"
        );
        assert_eq!(f.agent.stats().groups[0].1.members, 2);
        let reading = scope.spawn(move || read_epoch(&mut second, Position::start_of(0), None).0);
        let (read, _) = read_epoch(&mut first, Position::start_of(0), None);
        assert_eq!(strip(&read), expected);
        assert_eq!(strip(&reading.join().unwrap()), expected);
    });
}
