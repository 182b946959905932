//! Remote prep over real sockets: preparers serving the demo photographs to a trainer's
//! client, against the trainer's own loader, byte for byte; and preparers that are cut
//! off, stall or refuse, at known points (a proxy between them counts the bytes).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use nostall::clock::Clock;
use nostall::loader::{Checkpoint, LoaderBuilder, LoaderSettings, Next, PipelineSetting, Threads};
use nostall::prep::mixup::MixupArgs;
use nostall::{Loader, Position};
use nostall_peer::Secret;
use nostall_remote::{Remote, RemoteError, RemoteOptions, Server};

const BATCH: usize = 4;

struct Fixture {
    _dir: tempfile::TempDir,
    photos: String,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
        Fixture {
            photos: photos.to_string_lossy().into_owned(),
            _dir: dir,
        }
    }

    fn loader(&self, seed: u64) -> Arc<Loader> {
        self.loader_with(seed, None, None)
    }

    /// A loader with `operators` instead of the `train` preset, and mixing by `mixup`.
    fn loader_with(
        &self,
        seed: u64,
        operators: Option<&str>,
        mixup: Option<MixupArgs>,
    ) -> Arc<Loader> {
        let mut s = LoaderSettings::default();
        match operators {
            Some(ops) => s.pipeline = PipelineSetting::Operators(ops.parse().unwrap()),
            None => s.image_size = Some(48),
        }
        s.plan.batch_size = BATCH;
        s.plan.seed = seed;
        s.threads = Threads::Count(2);
        let (loader, _) = LoaderBuilder::with_settings(&self.photos, s)
            .mixup(mixup)
            .open()
            .unwrap();
        Arc::new(loader)
    }
}

fn secret(byte: u8) -> Secret {
    Secret::new(&[byte; 32]).unwrap()
}

fn serve(loader: Arc<Loader>, secret: &Secret) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    Server::serve(loader, listener, secret).unwrap()
}

/// Per batch: its number, ids, labels and bytes.
type Seen = Vec<(u64, Vec<u64>, Vec<i64>, Vec<u8>)>;

fn seen(batches: impl Iterator<Item = nostall::Result<nostall::loader::Batch>>) -> Seen {
    batches
        .map(|b| {
            let b = b.unwrap();
            (
                b.index(),
                b.ids().to_vec(),
                b.labels().to_vec(),
                b.data().to_vec(),
            )
        })
        .collect()
}

fn start_of(loader: &Loader, epoch: u64) -> Checkpoint {
    loader.run_from(Position::start_of(epoch)).unwrap()
}

/// A client of `server` alone (the trainer's own loader preparing nothing).
fn remote_of(trainer: &Arc<Loader>, secret: &Secret, server: &Server) -> Remote {
    let address = vec![server.local_addr().to_string()];
    Remote::new(trainer.clone(), secret, address, options(false)).unwrap()
}

fn options(local: bool) -> RemoteOptions {
    let mut options = RemoteOptions::default();
    options.part_batches = 2;
    options.local = local;
    options
}

#[test]
fn batches_made_elsewhere_are_the_local_loaders_in_its_order() {
    let f = Fixture::new();
    let trainer = f.loader(7);
    let local = seen(trainer.epoch(1).unwrap());
    assert!(local.len() > 4, "the demo set makes several batches");
    let secret = secret(1);
    let servers: Vec<Server> = (0..2).map(|_| serve(f.loader(7), &secret)).collect();
    let addresses: Vec<String> = servers.iter().map(|s| s.local_addr().to_string()).collect();
    for with_local in [false, true] {
        let remote = Remote::new(
            trainer.clone(),
            &secret,
            addresses.clone(),
            options(with_local),
        )
        .unwrap();
        remote.check().unwrap();
        let got = seen(remote.run(start_of(&trainer, 1)).unwrap());
        assert_eq!(got, local, "with the trainer's own loader: {with_local}");
        let stats = remote.stats();
        let made: u64 = stats.iter().map(|s| s.batches).sum();
        assert_eq!(made as usize, local.len());
        // Every wait of the consumer is some preparer's, and each part took it time.
        let waited: Duration = stats.iter().map(|s| s.waited).sum();
        assert_eq!(waited, remote.delivered().wait);
        assert!(
            stats.iter().all(|s| (s.parts == 0) == s.busy.is_zero()),
            "{stats:?}"
        );
    }
    let sent: u64 = servers.iter().map(|s| s.stats().batches).sum();
    assert!(sent > 0, "the preparers made batches");
}

#[test]
fn the_next_epoch_is_started_ahead_and_taken_only_where_it_starts() {
    let f = Fixture::new();
    let trainer = f.loader(9);
    let secret = secret(5);
    let servers: Vec<Server> = (0..2).map(|_| serve(f.loader(9), &secret)).collect();
    let addresses: Vec<String> = servers.iter().map(|s| s.local_addr().to_string()).collect();
    for ahead in [true, false] {
        let mut options = options(true);
        options.ahead = ahead;
        let remote = Remote::new(trainer.clone(), &secret, addresses.clone(), options).unwrap();
        let mut first = remote.run(start_of(&trainer, 0)).unwrap();
        assert!(!first.started_ahead());
        assert_eq!(seen(first.by_ref()), seen(trainer.epoch(0).unwrap()));
        // Every part of epoch 0 was given out before its end: epoch 1 was started then.
        let mut second = remote
            .run_after(Some(first), start_of(&trainer, 1))
            .unwrap();
        assert_eq!(second.started_ahead(), ahead);
        assert_eq!(remote.runs_taken_ahead(), u64::from(ahead));
        assert_eq!(seen(second.by_ref()), seen(trainer.epoch(1).unwrap()));
        // Started ahead at epoch 2, but asked for epoch 5 (a state loaded, say).
        let elsewhere = remote
            .run_after(Some(second), start_of(&trainer, 5))
            .unwrap();
        assert!(!elsewhere.started_ahead());
        assert_eq!(seen(elsewhere), seen(trainer.epoch(5).unwrap()));
    }
}

#[test]
fn the_options_for_a_loader_follow_what_its_batches_cost_the_trainer_to_receive() {
    let f = Fixture::new();
    // Normalised floats travel as bytes the trainer converts: epochs ahead, the
    // trainer's loader never held back.
    let floats = RemoteOptions::for_loader(&f.loader(1));
    assert!(floats.ahead && floats.local_cpu >= 1.0);
    // uint8 batches travel as they are: the defaults.
    let mut settings = LoaderSettings::default();
    settings.pipeline = PipelineSetting::Operators("[RandomResizedCrop(48)]".parse().unwrap());
    settings.dtype = nostall::DType::U8;
    let (uint8, _) = LoaderBuilder::with_settings(&f.photos, settings)
        .open()
        .unwrap();
    for options in [RemoteOptions::for_loader(&uint8), RemoteOptions::default()] {
        assert!(!options.ahead && options.local_cpu >= 1.0);
    }
}

#[test]
fn float32_samples_travel_as_their_bytes_and_come_back_bit_for_bit() {
    let f = Fixture::new();
    let secret = secret(4);
    let ops = "[RandomResizedCrop(48), RandomHorizontalFlip(), Normalize(mean=[0.485, \
               0.456, 0.406], std=[0.229, 0.224, 0.225])";
    let classes = f.loader(1).catalog().classes().len();
    let mixup = MixupArgs {
        num_classes: classes,
        switch_prob: 0.5,
        ..MixupArgs::default()
    };
    // Plain: one byte an element. Erased rectangles of noise: one byte an element too,
    // the trainer erasing with the sample's draws. Blended (MixUp): whole, four bytes a
    // sample more than the batch.
    for (recipe, mix, most) in [
        (format!("{ops}]"), None, 0.26),
        (
            format!("{ops}, RandomErasing(p=1.0, value='random')]"),
            None,
            0.26,
        ),
        (format!("{ops}]"), Some(mixup), 1.001),
    ] {
        let loader = || f.loader_with(5, Some(&recipe), mix.clone());
        let trainer = loader();
        let local = seen(trainer.epoch(1).unwrap());
        let server = serve(loader(), &secret);
        let remote = remote_of(&trainer, &secret, &server);
        let got = seen(remote.run(start_of(&trainer, 1)).unwrap());
        assert_eq!(got, local, "{recipe}, mixed: {}", mix.is_some());
        let whole: usize = local.iter().map(|b| b.3.len()).sum();
        let sent = server.stats().bytes as f64 / whole as f64;
        assert!(sent < most, "{recipe}: {sent} of the bytes sent");
    }
}

#[test]
fn a_run_stopped_and_resumed_from_its_state_goes_on_exactly() {
    let f = Fixture::new();
    let trainer = f.loader(3);
    let local = seen(trainer.epoch(0).unwrap());
    let secret = secret(2);
    let server = serve(f.loader(3), &secret);
    let remote = remote_of(&trainer, &secret, &server);
    let mut run = remote.run(start_of(&trainer, 0)).unwrap();
    let head = seen(run.by_ref().take(3));
    let state = run.checkpoint();
    drop(run);
    let resumed = trainer.resolve(&[state]).unwrap();
    let tail = seen(remote.run(resumed).unwrap());
    let mut all = head;
    all.extend(tail);
    assert_eq!(all, local);
}

/// What a proxy does to the first connection's replies.
enum Faults {
    /// Forwards this many bytes, then closes both connections.
    Cut(usize),
    /// Forwards this many bytes, then nothing more, holding the connections open until
    /// the client leaves.
    Stall(usize),
    /// Forwards nothing until told, then everything.
    After(mpsc::Receiver<()>),
}

/// A proxy to `to` that treats the first connection's replies as `faults` says (later
/// connections are refused). Returns its address, a receiver told when a cut or stall
/// happened, and its thread.
fn proxy(to: String, faults: Faults) -> (String, mpsc::Receiver<()>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (told, happened) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        drop(listener);
        let server = TcpStream::connect(&to).unwrap();
        let (mut up_from, mut up_to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut up_from, &mut up_to);
            // The client left: so does the proxy, towards the preparer.
            let _ = up_to.shutdown(Shutdown::Write);
        });
        let (mut from, mut into) = (server, client);
        let (limit, stall) = match faults {
            Faults::Cut(n) => (n, false),
            Faults::Stall(n) => (n, true),
            Faults::After(gate) => {
                let _ = gate.recv();
                let _ = std::io::copy(&mut from, &mut into);
                return;
            }
        };
        let mut left = limit;
        let mut buf = vec![0u8; 64 << 10];
        while left > 0 {
            let n = from.read(&mut buf[..left.min(64 << 10)]).unwrap();
            assert!(n > 0, "the preparer ended before the cut");
            into.write_all(&buf[..n]).unwrap();
            left -= n;
        }
        told.send(()).unwrap();
        if stall {
            let _ = into.read(&mut [0u8; 1]);
        }
        let _ = into.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
    (addr, happened, thread)
}

#[test]
fn a_preparer_lost_or_stalled_mid_part_costs_nothing_but_time() {
    let f = Fixture::new();
    let trainer = f.loader(11);
    let local = seen(trainer.epoch(0).unwrap());
    let secret = secret(3);
    let steady = serve(f.loader(11), &secret);
    let flaky = serve(f.loader(11), &secret);
    // A batch of 4 photos of 48×48 in f32 is sent as their bytes, 27 664 of them (and a few
    // kB of handshake go first): the cut falls inside the second batch of the flaky
    // preparer's first part. The steady one answers nothing until
    // then (not even its handshake), so the flaky one surely has parts to lose.
    for stall in [false, true] {
        let faults = if stall {
            Faults::Stall(45_000)
        } else {
            Faults::Cut(45_000)
        };
        let (through, cut, flaky_proxy) = proxy(flaky.local_addr().to_string(), faults);
        let (gate, open_gate) = mpsc::channel();
        let (gated, _, gate_proxy) =
            proxy(steady.local_addr().to_string(), Faults::After(open_gate));
        let opener = std::thread::spawn(move || {
            cut.recv().unwrap();
            gate.send(()).unwrap();
        });
        let mut options = options(false);
        options.stall_limit = Duration::from_millis(500);
        let remote = Remote::new(
            trainer.clone(),
            &secret,
            vec![through.clone(), gated],
            options,
        )
        .unwrap();
        let got = seen(remote.run(start_of(&trainer, 0)).unwrap());
        assert_eq!(got, local, "stalled: {stall}");
        let lost = remote
            .stats()
            .into_iter()
            .find(|s| s.name == through)
            .unwrap();
        // It had parts, and lost them: to the stall limit, or to a hedge that made them
        // first (whichever came first; either way every batch came once).
        assert!(
            lost.bytes > 0 && lost.parts == 0,
            "stalled: {stall}: {lost:?}"
        );
        for thread in [opener, flaky_proxy, gate_proxy] {
            thread.join().unwrap();
        }
    }
}

#[test]
fn a_preparer_without_the_secret_or_for_other_settings_is_refused_by_name() {
    let f = Fixture::new();
    let trainer = f.loader(5);
    let ours = secret(4);
    let theirs = serve(f.loader(5), &secret(9));
    let other_seed = serve(f.loader(6), &ours);
    let check = |address: String| {
        Remote::new(trainer.clone(), &ours, vec![address], options(false))
            .unwrap()
            .check()
            .unwrap_err()
    };
    match check(theirs.local_addr().to_string()) {
        RemoteError::Refused { address, .. } => {
            assert_eq!(address, theirs.local_addr().to_string())
        }
        other => panic!("{other:?}"),
    }
    match check(other_seed.local_addr().to_string()) {
        RemoteError::Config(message) => assert!(message.contains("seed"), "{message}"),
        other => panic!("{other:?}"),
    }
    let nobody = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = nobody.local_addr().unwrap().to_string();
    drop(nobody);
    assert!(matches!(check(address), RemoteError::Unreachable { .. }));
    // A run given a preparer for other settings stops with that error, never waits.
    let remote = Remote::new(
        trainer.clone(),
        &ours,
        vec![other_seed.local_addr().to_string()],
        options(false),
    )
    .unwrap();
    let first = remote.run(start_of(&trainer, 0)).unwrap().next().unwrap();
    assert!(matches!(first, Err(nostall::Error::Config(_))), "{first:?}");
}

#[test]
fn bytes_that_are_not_the_protocol_end_only_their_connection() {
    let f = Fixture::new();
    let secret = secret(5);
    let server = serve(f.loader(5), &secret);
    let addr = server.local_addr();
    let served = Arc::new(AtomicUsize::new(0));
    for junk in [
        &b""[..],
        b"GET / HTTP/1.1\r\n\r\n",
        &[0x16, 3, 1, 0xff, 0xff][..],
    ] {
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let _ = sock.write_all(junk);
        let _ = sock.shutdown(Shutdown::Write);
        let _ = sock.read_to_end(&mut Vec::new());
        served.fetch_add(1, Ordering::Relaxed);
    }
    // And it still serves a client with the secret.
    let trainer = f.loader(5);
    let remote = Remote::new(
        trainer.clone(),
        &secret,
        vec![addr.to_string()],
        options(false),
    );
    remote.unwrap().check().unwrap();
    assert_eq!(served.load(Ordering::Relaxed), 3);
}

#[test]
fn a_run_whose_preparers_are_all_unreachable_fails_instead_of_waiting() {
    let f = Fixture::new();
    let trainer = f.loader(2);
    let nobody = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = nobody.local_addr().unwrap().to_string();
    drop(nobody);
    let mut options = options(false);
    options.stall_limit = Duration::from_secs(30);
    options.clock = Clock::manual();
    let clock = options.clock.clone();
    let remote = Remote::new(trainer.clone(), &secret(6), vec![address.clone()], options).unwrap();
    let mut run = remote.run(start_of(&trainer, 0)).unwrap();
    // The preparer is recorded lost once its failure is counted; until the clock passes
    // the stall limit from there, the run waits.
    while remote.stats().iter().all(|s| s.failures == 0) {
        assert!(matches!(
            run.next_within(Duration::from_millis(10)),
            Next::Pending
        ));
    }
    assert!(matches!(
        run.next_within(Duration::from_millis(10)),
        Next::Pending
    ));
    clock.advance(Duration::from_secs(31));
    let message = run.next().unwrap().unwrap_err().to_string();
    assert!(
        message.contains(&address) && message.contains("none of the 1 preparers"),
        "{message}"
    );
}
