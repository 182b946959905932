//! The agent end to end in one process: an agent thread, jobs as threads with their own
//! connections (real sockets, real shared memory). Signals to real processes are in
//! `python/tests/test_share.py`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
use nostall::Position;

use crate::socket::{Channel, RecvError, MAX_MESSAGE};
use crate::test_common as common;
use crate::wire::{Reply, Request};
use crate::{Agent, AgentConfig, AgentError, Client, Reading};

mod opening;
mod orders;
mod pauses;
mod prestart;
mod records;
mod versions;

const BATCH: usize = 4;
const SIDE: usize = 64;

fn settings(seed: u64) -> LoaderSettings {
    let mut s = LoaderSettings::default();
    s.image_size = Some(SIDE as u32);
    s.plan.batch_size = BATCH;
    s.plan.seed = seed;
    s.threads = Threads::Count(2);
    s
}

struct Fixture {
    _dir: tempfile::TempDir,
    photos: String,
    socket: PathBuf,
    agent: Arc<Agent>,
    serving: Option<JoinHandle<std::io::Result<bool>>>,
}

impl Fixture {
    /// An agent whose groups stage `window` batches and detach after `lease`.
    fn new(window: u64, lease: Duration) -> Fixture {
        Self::with(window, lease, |_| {})
    }

    fn with(window: u64, lease: Duration, adjust: impl FnOnce(&mut Agent)) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
        Self::serving(
            dir,
            photos.to_string_lossy().into_owned(),
            window,
            lease,
            adjust,
        )
    }

    /// Another agent (another node's, say) over the same photographs as `other`.
    fn beside(other: &Fixture, window: u64, lease: Duration) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        Self::serving(dir, other.photos.clone(), window, lease, |_| {})
    }

    fn serving(
        dir: tempfile::TempDir,
        photos: String,
        window: u64,
        lease: Duration,
        adjust: impl FnOnce(&mut Agent),
    ) -> Fixture {
        let socket = dir.path().join("run/agent.sock");
        let mut config = AgentConfig::new();
        config.socket = socket.clone();
        config.staging = window * (BATCH * 3 * SIDE * SIDE * 4) as u64;
        config.lease = lease;
        let mut agent = Agent::new(config);
        adjust(&mut agent);
        let agent = Arc::new(agent);
        let serving = {
            let agent = agent.clone();
            Some(std::thread::spawn(move || agent.serve()))
        };
        Fixture {
            _dir: dir,
            photos,
            socket,
            agent,
            serving,
        }
    }

    fn attach(&self, seed: u64, group: &str) -> Result<Client, AgentError> {
        self.attach_with(&settings(seed), group)
    }

    fn attach_with(&self, settings: &LoaderSettings, group: &str) -> Result<Client, AgentError> {
        Client::attach_within(
            Duration::from_secs(30),
            &self.socket,
            &Reading::new(&self.photos, settings.clone()).in_group(group),
        )
    }

    /// What a loader of the job's own gives: per batch, ids, labels and bytes.
    fn expected(&self, seed: u64, epoch: u64) -> Vec<(Vec<u64>, Vec<i64>, Vec<u8>)> {
        self.expected_with(&settings(seed), epoch)
    }

    fn expected_with(
        &self,
        settings: &LoaderSettings,
        epoch: u64,
    ) -> Vec<(Vec<u64>, Vec<i64>, Vec<u8>)> {
        let (loader, _) = LoaderBuilder::with_settings(&self.photos, settings.clone())
            .open()
            .unwrap();
        loader
            .epoch(epoch)
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                let ids = b.ids().to_vec();
                (ids, b.labels().to_vec(), b.data().to_vec())
            })
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.agent.stop();
        if let Some(serving) = self.serving.take() {
            serving.join().unwrap().unwrap();
        }
    }
}

/// One epoch read through `client` from `from`: each batch's ids, labels, bytes, and
/// whether it came from the group.
type Read = Vec<(Vec<u64>, Vec<i64>, Vec<u8>, bool)>;

fn read_epoch(client: &mut Client, from: Position, stop_after: Option<usize>) -> (Read, Position) {
    read_epoch_changing(client, from, stop_after, false)
}

/// As [`read_epoch`]; with `scribble`, each batch is then overwritten in place, as a
/// training script's `images.sub_(0.5)` would.
fn read_epoch_changing(
    client: &mut Client,
    from: Position,
    stop_after: Option<usize>,
    scribble: bool,
) -> (Read, Position) {
    let mut at = from;
    let mut read = Vec::new();
    while stop_after.is_none_or(|n| read.len() < n) {
        let next = match client.next(at) {
            // A loaded machine may keep the agent from saying it still works for a whole
            // short lease: a job that would rather wait asks again.
            Err(AgentError::Silent(_)) => continue,
            other => other.unwrap(),
        };
        let Some(mut batch) = next else {
            break;
        };
        at = batch.position();
        read.push((
            batch.ids().to_vec(),
            batch.labels().to_vec(),
            batch.data().to_vec(),
            batch.from_group(),
        ));
        if scribble {
            // Two pages of three, so that the changed pages come in runs between
            // unchanged ones.
            let changed = |i: usize| (i / 4096) % 3 != 1;
            for (i, b) in batch.data_mut().iter_mut().enumerate() {
                if changed(i) {
                    *b = 0xAA;
                }
            }
            let data = batch.data();
            assert!((0..data.len()).all(|i| !changed(i) || data[i] == 0xAA));
        }
    }
    (read, at)
}

fn strip(read: &Read) -> Vec<(Vec<u64>, Vec<i64>, Vec<u8>)> {
    read.iter()
        .map(|(i, l, d, _)| (i.clone(), l.clone(), d.clone()))
        .collect()
}

/// `b` reads epoch 0 from its start while `a`, which read `first`, goes on from `at`:
/// both get the epoch exactly as `expected`.
fn a_goes_on_as_b_reads(
    a: &mut Client,
    at: Position,
    first: &Read,
    b: &mut Client,
    expected: &[(Vec<u64>, Vec<i64>, Vec<u8>)],
) {
    let (rest_a, read_b) = std::thread::scope(|scope| {
        let hb = scope.spawn(|| read_epoch(b, Position::start_of(0), None).0);
        (read_epoch(a, at, None).0, hb.join().unwrap())
    });
    let mut all = strip(first);
    all.extend(strip(&rest_a));
    assert_eq!(all, expected);
    assert_eq!(strip(&read_b), expected);
}

/// The first reply on `channel` that `wanted` takes (a minute at most).
fn reply_on<T>(channel: &Channel, mut wanted: impl FnMut(Reply) -> Option<T>) -> T {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        match channel.recv(&mut buf) {
            Ok(r) => {
                if let Some(found) = wanted(Reply::decode(&buf[..r.len]).unwrap()) {
                    return found;
                }
            }
            Err(RecvError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < give_up, "no such reply within a minute");
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn jobs_of_a_group_get_every_batch_once_as_their_own_loader_would_each_made_once() {
    let f = Fixture::new(3, Duration::from_secs(30));
    let expected: Vec<_> = (0..2).map(|e| f.expected(7, e)).collect();
    let batches = expected[0].len();
    let jobs = 3;
    let barrier = Arc::new(Barrier::new(jobs));
    let (reads, clients): (Vec<Vec<Read>>, Vec<Client>) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                let barrier = barrier.clone();
                let f = &f;
                scope.spawn(move || {
                    let mut client = f.attach(7, "").unwrap();
                    assert_eq!(client.attached().batches_per_epoch as usize, batches);
                    barrier.wait(); // every job attached before any reads
                    let reads = (0..2)
                        .map(|e| read_epoch(&mut client, Position::start_of(e), None).0)
                        .collect();
                    (reads, client) // attached until the figures are read
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).unzip()
    });
    for read in &reads {
        for (epoch, got) in read.iter().enumerate() {
            assert_eq!(strip(got), expected[epoch], "epoch {epoch}");
            let flags: Vec<bool> = got.iter().map(|b| b.3).collect();
            assert!(
                flags.iter().all(|f| *f),
                "every batch from the group's stream: {flags:?}"
            );
        }
    }
    let stats = f.agent.stats();
    let (_, group) = &stats.groups[0];
    // Made once for all three jobs (the producer may have staged a few batches of the
    // next epoch ahead).
    assert!(group.produced >= 2 * batches as u64, "{group:?}");
    assert!(group.produced <= 2 * batches as u64 + 3, "{group:?}");
    assert_eq!(group.detached, 0);
    drop(clients);
}

#[test]
fn a_member_changing_its_batches_in_place_changes_nothing_for_the_others_nor_its_later_batches() {
    let f = Fixture::new(1, Duration::from_secs(30));
    let expected: Vec<_> = (0..2).map(|e| f.expected(7, e)).collect();
    let barrier = Arc::new(Barrier::new(2));
    let reads: Vec<Vec<Read>> = std::thread::scope(|scope| {
        let handles: Vec<_> = [true, false]
            .into_iter()
            .map(|scribble| {
                let barrier = barrier.clone();
                let f = &f;
                scope.spawn(move || {
                    let mut client = f.attach(7, "").unwrap();
                    barrier.wait();
                    (0..2)
                        .map(|e| {
                            read_epoch_changing(&mut client, Position::start_of(e), None, scribble)
                                .0
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // The scribbler too: a buffer it changed carries its next batch unchanged.
    for read in &reads {
        for (epoch, got) in read.iter().enumerate() {
            assert_eq!(strip(got), expected[epoch], "epoch {epoch}");
        }
    }
}

#[test]
fn a_member_that_stops_asking_is_detached_and_later_finishes_alone_exactly() {
    // A staging window of two batches: the group cannot finish an epoch of 8 batches
    // while a member holds it up, unless its lease detaches it.
    let f = Fixture::new(2, Duration::from_millis(300));
    let expected = f.expected(3, 0);
    let mut stopper = f.attach(3, "").unwrap();
    let mut a = f.attach(3, "").unwrap();
    let mut b = f.attach(3, "").unwrap();
    // The stopped member reads one batch, then asks for nothing while the others read
    // the whole epoch.
    let (first, at, read_a, read_b) = std::thread::scope(|scope| {
        let ha = scope.spawn(|| read_epoch(&mut a, Position::start_of(0), None).0);
        let hb = scope.spawn(|| read_epoch(&mut b, Position::start_of(0), None).0);
        let (first, at) = read_epoch(&mut stopper, Position::start_of(0), Some(1));
        (first, at, ha.join().unwrap(), hb.join().unwrap())
    });
    assert_eq!(strip(&read_a), expected);
    assert_eq!(strip(&read_b), expected);
    // (A thread of `a` or `b` held up past the lease by a loaded machine would be
    // detached too, and would go on alone: the bytes above hold either way.)
    assert!(f.agent.stats().groups[0].1.detached >= 1);
    // Back: it goes on from exactly where it was, on a stream of its own.
    let (rest, _) = read_epoch(&mut stopper, at, None);
    let mut all = strip(&first);
    all.extend(strip(&rest));
    assert_eq!(all, expected);
}

#[test]
fn a_member_releasing_batches_it_does_not_hold_makes_no_progress_and_is_detached() {
    // As above, but the member that stops reading keeps sending releases of tickets it
    // does not hold: only progress renews a lease, so it is detached all the same.
    let f = Fixture::new(2, Duration::from_millis(300));
    let expected = f.expected(3, 0);
    let mut chatty = f.attach(3, "").unwrap();
    let mut a = f.attach(3, "").unwrap();
    let mut b = f.attach(3, "").unwrap();
    let (first, _) = read_epoch(&mut chatty, Position::start_of(0), Some(1));
    let done = std::sync::atomic::AtomicUsize::new(0);
    let (read_a, read_b, chatted_until_done) = std::thread::scope(|scope| {
        let done = &done;
        let read = move |client: &mut Client| {
            let read = read_epoch(client, Position::start_of(0), None).0;
            done.fetch_add(1, Ordering::SeqCst);
            read
        };
        let ha = scope.spawn(move || read(&mut a));
        let hb = scope.spawn(move || read(&mut b));
        // Far longer than the lease: without the fix the others wait all of it.
        let deadline = Instant::now() + Duration::from_secs(120);
        let release = Request::Release { ticket: u64::MAX }.encode();
        while done.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
            chatty.channel.send(&release, None).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        let chatted_until_done = done.load(Ordering::SeqCst) == 2;
        (ha.join().unwrap(), hb.join().unwrap(), chatted_until_done)
    });
    assert!(
        chatted_until_done,
        "the others finished only once the releases stopped"
    );
    assert_eq!(strip(&read_a), expected);
    assert_eq!(strip(&read_b), expected);
    assert!(!first.is_empty());
    assert!(f.agent.stats().groups[0].1.detached >= 1);
}

#[test]
fn a_job_in_step_asks_once_per_epoch_and_the_agent_sends_the_rest_unasked() {
    let f = Fixture::new(4, Duration::from_secs(60));
    let expected: Vec<_> = (0..2).map(|e| f.expected(4, e)).collect();
    let mut client = f.attach(4, "").unwrap();
    // Each batch dropped before the next is asked for: one request, the epoch's first.
    for (epoch, want) in expected.iter().enumerate() {
        let (read, _) = read_epoch(&mut client, Position::start_of(epoch as u64), None);
        assert_eq!(&strip(&read), want);
    }
    assert_eq!(client.ask, 2, "one request per epoch");
    // Holding the last batch while taking the next (a training loop's tensors, freed
    // as the names are bound again) is still in step.
    let mut at = Position::start_of(2);
    let mut last = None;
    while let Some(batch) = client.next(at).unwrap() {
        at = batch.position();
        last = Some(batch);
    }
    drop(last);
    assert_eq!(client.ask, 3);
    // Holding three: the credit is spent, and every batch is asked for (and served).
    let mut at = Position::start_of(3);
    let mut held = std::collections::VecDeque::new();
    let mut ids = Vec::new();
    while let Some(batch) = client.next(at).unwrap() {
        at = batch.position();
        ids.push(batch.ids().to_vec());
        held.push_back(batch);
        if held.len() > 3 {
            held.pop_front();
        }
    }
    let want: Vec<_> = f.expected(4, 3).into_iter().map(|b| b.0).collect();
    assert_eq!(ids, want);
    assert!(
        client.ask >= 3 + want.len() as u64 - 2,
        "{} requests for {} batches held three at a time",
        client.ask - 3,
        want.len()
    );
}

#[test]
fn a_job_that_moves_elsewhere_gets_its_new_position_not_the_batches_sent_ahead() {
    let f = Fixture::new(4, Duration::from_secs(60));
    let expected: Vec<_> = (0..2).map(|e| f.expected(6, e)).collect();
    let mut client = f.attach(6, "").unwrap();
    // The positions of epoch 0, read once in step.
    let mut positions = vec![Position::start_of(0)];
    while let Some(batch) = client.next(*positions.last().unwrap()).unwrap() {
        positions.push(batch.position());
    }
    // Two batches read, so that the next ones are on their way unasked; then a jump
    // ahead, one back, and to the next epoch mid-way.
    for (from, to) in [(0, 5), (6, 2), (3, 0)] {
        let (read, at) = read_epoch(&mut client, positions[from], Some(2));
        assert_eq!(strip(&read), expected[0][from..from + 2]);
        assert_ne!(at, positions[to]);
        let (read, _) = read_epoch(&mut client, positions[to], None);
        assert_eq!(strip(&read), expected[0][to..], "from batch {from} to {to}");
    }
    let (read, _) = read_epoch(&mut client, Position::start_of(0), Some(1));
    assert_eq!(strip(&read), expected[0][..1]);
    let (read, _) = read_epoch(&mut client, Position::start_of(1), None);
    assert_eq!(strip(&read), expected[1]);
}

#[test]
fn a_wait_given_up_is_forgotten_and_the_next_request_gets_its_own_batch() {
    // A staging window of two batches: `a`, two batches ahead of `b`, waits for it.
    let f = Fixture::new(2, Duration::from_secs(60));
    let expected = f.expected(9, 0);
    let mut a = f.attach(9, "").unwrap();
    let mut b = f.attach(9, "").unwrap();
    let (first, at) = read_epoch(&mut a, Position::start_of(0), Some(2));
    let mut asked = 0;
    let waited = a.next_while(at, &mut || {
        asked += 1;
        false // a Ctrl-C: give the wait up
    });
    assert!(matches!(waited, Err(AgentError::Interrupted)), "{waited:?}");
    assert_eq!(asked, 1);
    // `b` frees the window: the answer to the request given up reaches `a`'s socket, and
    // must not be taken for the next one's.
    a_goes_on_as_b_reads(&mut a, at, &first, &mut b, &expected);
}

#[test]
fn a_member_that_leaves_mid_epoch_holds_nobody_up() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let expected = f.expected(5, 0);
    let mut leaver = f.attach(5, "").unwrap();
    let mut stayer = f.attach(5, "").unwrap();
    let _ = read_epoch(&mut leaver, Position::start_of(0), Some(2));
    drop(leaver); // its connection closes: gone at once, not after a lease
    let (read, _) = read_epoch(&mut stayer, Position::start_of(0), None);
    assert_eq!(strip(&read), expected);
}

#[test]
fn a_late_job_reads_its_first_epoch_alone_and_joins_the_group_at_the_next() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let expected: Vec<_> = (0..2).map(|e| f.expected(9, e)).collect();
    let mut early = f.attach(9, "").unwrap();
    let (mut early_read, at) = read_epoch(&mut early, Position::start_of(0), Some(4));
    let mut late = f.attach(9, "").unwrap();
    let (late_reads, early_rest) = std::thread::scope(|scope| {
        let hl = scope.spawn(|| {
            (0..2)
                .map(|e| read_epoch(&mut late, Position::start_of(e), None).0)
                .collect::<Vec<_>>()
        });
        let he = scope.spawn(|| {
            let (rest, _) = read_epoch(&mut early, at, None);
            let (next, _) = read_epoch(&mut early, Position::start_of(1), None);
            (rest, next)
        });
        (hl.join().unwrap(), he.join().unwrap())
    });
    early_read.extend(early_rest.0);
    assert_eq!(strip(&early_read), expected[0]);
    assert_eq!(strip(&early_rest.1), expected[1]);
    assert!(early_rest.1.iter().all(|b| b.3));
    assert_eq!(strip(&late_reads[0]), expected[0]);
    // It came mid-epoch: its own stream (until, perhaps, the group's next batch is the
    // one it wants next: then it is served that, the same bytes).
    assert!(!late_reads[0][0].3, "mid-epoch: its own stream");
    assert_eq!(strip(&late_reads[1]), expected[1]);
    assert!(
        late_reads[1].iter().all(|b| b.3),
        "the next epoch: the group's"
    );
}

#[test]
fn a_bad_sample_fails_every_member_at_the_same_batch_naming_it_and_skip_serves_them_alike() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let broken = std::path::Path::new(&f.photos).join("flowers/zz-broken.jpg");
    let mut bytes = std::fs::read(
        std::path::Path::new(&f.photos)
            .join("flowers")
            .read_dir()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    bytes.truncate(bytes.len() / 3); // a JPEG cut short: corrupt
    bytes[200..400].fill(0xAB);
    std::fs::write(&broken, bytes).unwrap();
    let (mut a, mut b) = (f.attach(4, "").unwrap(), f.attach(4, "").unwrap());
    let read_until_error = |client: &mut Client| {
        let (mut at, mut batches) = (Position::start_of(0), 0);
        loop {
            match client.next(at) {
                Ok(Some(batch)) => {
                    at = batch.position();
                    batches += 1;
                }
                Ok(None) => panic!("the epoch ended without the bad sample"),
                Err(AgentError::Sample { sample, .. }) => return (batches, sample),
                Err(e) => panic!("{e}"),
            }
        }
    };
    let (in_a, in_b) = std::thread::scope(|scope| {
        let ha = scope.spawn(|| read_until_error(&mut a));
        let hb = scope.spawn(|| read_until_error(&mut b));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    assert_eq!(in_a, in_b);
    assert!(in_a.1.location.ends_with("zz-broken.jpg"), "{:?}", in_a.1);
    // The stream starts over where a member moves on: the next epoch, for both.
    let next = Position::start_of(1);
    let first_a = a.next(next);
    let first_b = b.next(next);
    assert!(matches!(
        (&first_a, &first_b),
        (Ok(Some(_)), Ok(Some(_))) | (Err(_), Err(_))
    ));

    // Skipping: both get what a loader of their own gives, the bad sample left out.
    let mut skipping = settings(4);
    skipping.on_error = nostall::ErrorPolicy::Skip;
    let (mut c, mut d) = (
        f.attach_with(&skipping, "").unwrap(),
        f.attach_with(&skipping, "").unwrap(),
    );
    let expected = f.expected_with(&skipping, 0);
    let (rc, rd) = std::thread::scope(|scope| {
        let hc = scope.spawn(|| read_epoch(&mut c, Position::start_of(0), None).0);
        let hd = scope.spawn(|| read_epoch(&mut d, Position::start_of(0), None).0);
        (hc.join().unwrap(), hd.join().unwrap())
    });
    assert_eq!(strip(&rc), expected);
    assert_eq!(strip(&rd), expected);
}

#[test]
fn a_job_holding_too_many_batches_is_told_to_free_them_and_then_served_again() {
    let f = Fixture::with(2, Duration::from_secs(60), |agent| {
        agent.config.max_held = 3
    });
    let mut client = f.attach(2, "").unwrap();
    let mut held = Vec::new();
    let mut at = Position::start_of(0);
    for _ in 0..3 {
        let batch = client.next(at).unwrap().unwrap();
        at = batch.position();
        held.push(batch);
    }
    match client.next(at) {
        Err(AgentError::Refused(m)) => assert!(m.contains("free the tensors"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(held); // released
    let batch = client.next(at).unwrap().unwrap();
    assert_eq!(batch.ids(), &f.expected(2, 0)[3].0[..]);
}

#[test]
fn a_batch_larger_than_a_message_can_describe_is_refused_at_attach() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let mut settings = settings(1);
    settings.plan.batch_size = crate::MAX_BATCH + 1;
    match f.attach_with(&settings, "") {
        Err(AgentError::Refused(m)) => assert!(m.contains(&crate::MAX_BATCH.to_string()), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn absurd_positions_are_refused_and_the_agent_serves_on() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let mut odd = f.attach(1, "").unwrap();
    for at in [
        Position {
            epoch: u64::MAX,
            batch: u64::MAX,
            sample: u64::MAX,
        },
        Position {
            epoch: 0,
            batch: 10_000,
            sample: 3,
        },
        Position {
            epoch: u64::MAX,
            batch: 0,
            sample: 0,
        },
    ] {
        // Refused, or (an epoch that exists) served exactly: never a hang or a crash.
        match odd.next(at) {
            Err(AgentError::Refused(m)) => assert!(!m.is_empty()),
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let mut other = f.attach(2, "").unwrap();
    let (read, _) = read_epoch(&mut other, Position::start_of(0), None);
    assert_eq!(strip(&read), f.expected(2, 0));
}

#[test]
fn malformed_and_oversized_requests_are_refused_and_the_agent_serves_on() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let mut ok = f.attach(1, "").unwrap();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let refused = |channel: &Channel, buf: &mut [u8]| -> String {
        match channel.recv(buf) {
            Ok(r) => match Reply::decode(&buf[..r.len]).unwrap() {
                Reply::Failed { failure, .. } => failure.message,
                other => panic!("expected a refusal, got {other:?}"),
            },
            Err(e) => panic!("expected a refusal, got {e:?}"),
        }
    };
    let garbage = Channel::connect(&f.socket).unwrap();
    garbage.send(&[1, 0xff, 0xff, 0xff], None).unwrap();
    assert!(refused(&garbage, &mut buf).contains("malformed"));
    assert!(matches!(garbage.recv(&mut buf), Err(RecvError::Closed)));

    let oversized = Channel::connect(&f.socket).unwrap();
    // A socket buffer holds more than the agent reads per message.
    let big = vec![7u8; MAX_MESSAGE + 1];
    if oversized.send(&big, None).is_ok() {
        assert!(refused(&oversized, &mut buf).contains("oversized"));
    }
    // Mid-conversation garbage ends that job's connection only.
    let victim = f.attach(1, "").unwrap();
    victim.channel.send(&[99], None).unwrap();
    assert!(refused(&victim.channel, &mut buf).contains("unknown request"));
    assert!(matches!(
        victim.channel.recv(&mut buf),
        Err(RecvError::Closed)
    ));
    let (read, _) = read_epoch(&mut ok, Position::start_of(0), None);
    assert_eq!(strip(&read), f.expected(1, 0));
    assert!(f.agent.stats().refused >= 2);
}

#[test]
fn another_users_process_is_refused_by_its_credentials() {
    // The agent believes it serves another user: the test process is then a stranger,
    // with the kernel's real credentials on a real connection.
    let f = Fixture::with(2, Duration::from_secs(60), |agent| agent.uid ^= 1);
    match f.attach(1, "") {
        Err(AgentError::Refused(m)) => assert!(m.contains("serves user"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_named_group_refuses_a_job_reading_another_stream() {
    let f = Fixture::new(2, Duration::from_secs(60));
    let _first = f.attach(1, "search").unwrap();
    match f.attach(2, "search") {
        Err(AgentError::Refused(m)) => assert!(m.contains("seed 1") && m.contains("seed 2"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Another batch size alone: refused, saying so; by stream, a group of its own.
    let mut larger = settings(1);
    larger.plan.batch_size = 2 * BATCH;
    match f.attach_with(&larger, "search") {
        Err(AgentError::Refused(m)) => assert!(
            m.contains(&format!("batches of {BATCH} samples"))
                && m.contains(&format!("batch_size={}", 2 * BATCH)),
            "{m}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let mut own = f.attach_with(&larger, "").unwrap();
    let (read, _) = read_epoch(&mut own, Position::start_of(0), None);
    assert_eq!(strip(&read), f.expected_with(&larger, 0));
    assert_ne!(own.attached().group, "search");
}

#[test]
fn the_socket_directory_must_be_the_users_alone() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let err = crate::place::claim(&open.join("agent.sock")).unwrap_err();
    assert!(err.to_string().contains("0700"), "{err}");
}

/// The local ranks of a job whose cache is partitioned across nodes, through their
/// nodes' agents: two nodes (an agent each, serving the other over real sockets), two
/// local ranks each (threads as jobs). Every epoch delivers each sample once across the
/// job; the ranks read their node's part from the agent, never over TCP (the services
/// served no byte to their own node); and each node read from its own part and the
/// other's.
#[test]
fn local_ranks_of_a_partitioned_cache_read_their_node_through_the_agent() {
    let a = Fixture::new(8, Duration::from_secs(30));
    let b = Fixture::beside(&a, 8, Duration::from_secs(30));
    let peers = common::free_addrs(2);
    let n = nostall::dataset::open(
        &a.photos,
        nostall::storage::ReadMode::Cached,
        nostall::Modality::Image,
    )
    .unwrap()
    .catalog
    .len() as u64;
    let ranks: Vec<(usize, usize)> = (0..2)
        .flat_map(|node| (0..2).map(move |r| (node, r)))
        .collect();
    let results: Vec<(Vec<Vec<u64>>, nostall_peer::NodeStats)> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|&(node, local_rank)| {
                let f = if node == 0 { &a } else { &b };
                let peers = peers.clone();
                scope.spawn(move || {
                    let mut config = nostall_peer::NodeConfig::new(
                        node,
                        peers,
                        "60%".parse().unwrap(),
                        nostall_peer::Secret::new(b"the secret of the agent's test job").unwrap(),
                    );
                    config.ranks_per_node = 2;
                    config.local_rank = local_rank;
                    config.seed = 3;
                    let reading = Reading::new(&f.photos, settings(3)).on_node(config);
                    let mut client =
                        Client::attach_within(Duration::from_secs(30), &f.socket, &reading)
                            .unwrap();
                    let mut epochs = Vec::new();
                    let mut last = None;
                    for epoch in 0..2 {
                        let mut at = Position::start_of(epoch);
                        let mut ids = Vec::new();
                        while let Some(batch) = client.next(at).unwrap() {
                            at = batch.position();
                            ids.extend_from_slice(batch.ids());
                            let node = batch.node().expect("a rank's batch has its node's figures");
                            let served = node
                                .service
                                .as_ref()
                                .expect("the agent runs the node's service");
                            assert_eq!(
                                served.served_local_bytes, 0,
                                "read over TCP by its own node"
                            );
                            last = Some(node);
                        }
                        epochs.push(ids);
                    }
                    (epochs, last.expect("batches"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for epoch in 0..2 {
        let mut ids: Vec<u64> = results.iter().flat_map(|r| r.0[epoch].clone()).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..n).collect::<Vec<_>>(),
            "epoch {epoch}: each sample once"
        );
    }
    // A node's counters as its later rank saw them at its last batch: they include
    // every read both its ranks' epochs made.
    let nodes: Vec<&nostall_peer::NodeStats> = results
        .chunks(2)
        .map(|ranks| {
            ranks
                .iter()
                .map(|r| &r.1)
                .max_by_key(|s| s.source.local_samples + s.source.peer_samples)
                .unwrap()
        })
        .collect();
    for node in &nodes {
        assert!(node.source.local_samples > 0, "{node:?}");
        assert_eq!(node.source.fallbacks, 0, "{node:?}");
    }
    // Locality-aware batches leave a few samples to cross between the nodes.
    let crossed: u64 = nodes.iter().map(|s| s.source.peer_samples).sum();
    assert!(crossed > 0, "{nodes:?}");
}

/// The streams of a job's local ranks share the agent's prep threads by demand, through
/// the table their own loaders would use; a job that turns `balance_ranks` off gets
/// none.
#[test]
fn the_local_ranks_of_a_job_are_balanced_through_their_table_as_the_job_says() {
    let f = Fixture::new(8, Duration::from_secs(30));
    // Names no other job has: the tables are files in /dev/shm, named by the job.
    let job = |what: &str| nostall::rng::digest_text(&format!("{what} {:?}", f.socket));
    // Where the engine keeps them: /dev/shm, else the temporary directory.
    let table = |job: u64| {
        [PathBuf::from("/dev/shm"), std::env::temp_dir()]
            .iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .find(|path| {
                path.to_string_lossy()
                    .ends_with(&format!("{job:016x}.ranks"))
            })
    };
    // Each case its own streams (its seeds), so that no job joins the other case's group.
    let auto = |rank: usize, balance: &str| -> LoaderSettings {
        let mut s = settings(rank as u64 + if balance == "true" { 0 } else { 10 });
        s.threads = Threads::Auto;
        s.plan.rank = rank;
        s.plan.world = 2;
        s.balance_ranks = Some(balance == "true");
        s
    };
    for (name, balance) in [("balanced", "true"), ("even", "false")] {
        let ranks = (0..2).map(|local_rank| nostall::env::LocalRanks {
            job: job(name),
            local_rank,
            local_world: 2,
        });
        // Attached, each rank's group and its loader live (the last rank to leave
        // removes the table).
        let clients: Vec<Client> = ranks
            .enumerate()
            .map(|(rank, among)| {
                let reading = Reading::new(&f.photos, auto(rank, balance)).among(among);
                let mut client =
                    Client::attach_within(Duration::from_secs(30), &f.socket, &reading).unwrap();
                let (read, _) = read_epoch(&mut client, Position::start_of(0), None);
                assert_eq!(strip(&read), f.expected_with(&auto(rank, balance), 0));
                client
            })
            .collect();
        assert_eq!(table(job(name)).is_some(), balance == "true", "{name}");
        drop(clients);
    }
}

#[test]
fn a_job_gives_up_an_agent_silent_for_its_lease_and_says_so() {
    // An agent that welcomes a job and then says nothing, as a stopped or stuck agent
    // would: the job's wait for its batch ends with `Silent`, not at its own Ctrl-C.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let listener = crate::socket::Listener::bind(&socket).unwrap();
    let lease = Duration::from_millis(200);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let silent = std::thread::spawn(move || {
        let channel = loop {
            if let Some(channel) = listener.accept(Duration::from_secs(1)).unwrap() {
                break channel;
            }
        };
        let mut buf = vec![0u8; MAX_MESSAGE];
        channel.recv(&mut buf).unwrap(); // the hello
        let welcome = Reply::Welcome(crate::Attached {
            group: "g".into(),
            members: 1,
            batches_per_epoch: 8,
            dataset_len: 32,
            sample_shape: vec![3, 8, 8],
            dtype: "uint8".into(),
            classes: vec!["a".into()],
            lease,
        });
        channel.send(&welcome.encode(), None).unwrap();
        channel.recv(&mut buf).unwrap(); // the request for a batch, never answered
        let _ = finished.recv(); // (the connection stays open)
    });
    let mut client = Client::attach(&socket, &Reading::new("/d", settings(1))).unwrap();
    assert_eq!(client.attached().lease, lease);
    let mut asked_to_go_on = 0;
    let got = client.next_while(Position::start_of(0), &mut || {
        asked_to_go_on += 1;
        true
    });
    match got {
        Err(AgentError::Silent(limit)) => assert_eq!(limit, lease),
        other => panic!("expected the agent given up as silent, got {other:?}"),
    }
    assert!(asked_to_go_on > 0);
    done.send(()).unwrap();
    silent.join().unwrap();
}

#[test]
fn a_job_waiting_on_its_group_is_told_the_agent_still_works() {
    // `a`, two batches ahead of `b` in a two-batch window, waits for it: the agent says
    // it still works every quarter lease (2 s of this 8 s lease), long before `b` could
    // be detached, so the job does not take the wait for a stopped agent.
    let f = Fixture::new(2, Duration::from_secs(8));
    let expected = f.expected(9, 0);
    let mut a = f.attach(9, "").unwrap();
    let mut b = f.attach(9, "").unwrap();
    // In step, the agent goes on to make `a`'s third batch unasked, for `a`'s request.
    let (first, at) = read_epoch(&mut a, Position::start_of(0), Some(2));
    let pulse = reply_on(&a.channel, Some);
    assert_eq!(pulse, Reply::Working { ask: a.ask });
    assert_eq!(f.agent.stats().groups[0].1.detached, 0);
    // `b` reads: the answer to the request reaches `a`, then the rest of the epoch.
    a_goes_on_as_b_reads(&mut a, at, &first, &mut b, &expected);
}

#[test]
fn batches_a_job_holds_when_the_agent_ends_its_session_never_change_under_it() {
    // A two-batch window: the group recycles its buffers every other batch.
    let f = Fixture::new(2, Duration::from_secs(60));
    let expected = f.expected(5, 0);
    let mut victim = f.attach(5, "").unwrap();
    let mut other = f.attach(5, "").unwrap();
    let held = victim.next(Position::start_of(0)).unwrap().unwrap();
    let as_received = held.data().to_vec();
    // Out of protocol: the agent ends this job's session while it holds the batch (once
    // it has read the message: after the batches it sends ahead, which wait for `other`).
    victim.channel.send(&[99], None).unwrap();
    let refusal = std::thread::scope(|scope| {
        // The other member reads two epochs through the group: every buffer is reused.
        let reading = scope.spawn(|| {
            for epoch in 0..2 {
                let (read, _) = read_epoch(&mut other, Position::start_of(epoch), None);
                assert_eq!(strip(&read), f.expected(5, epoch));
            }
        });
        // (The batches sent ahead come first.)
        let refusal = reply_on(&victim.channel, |reply| match reply {
            Reply::Failed { failure, .. } => Some(failure.message),
            _ => None,
        });
        reading.join().unwrap();
        refusal
    });
    assert!(refusal.contains("unknown request"), "{refusal}");
    // (Compared whole, not printed: a changed batch is thousands of bytes.)
    assert!(
        held.data() == &as_received[..],
        "the held batch changed under the job"
    );
    assert!(held.data() == &expected[0].2[..]);
}
