//! A job and an agent of other nostall versions (an agent still running after an
//! upgrade): each says which versions met, and a job sharing by stream goes on alone.

use std::path::Path;
use std::time::Duration;

use nostall::loader::LoaderBuilder;
use nostall::Position;

use super::{read_epoch, settings, Fixture, MAX_MESSAGE};
use crate::job::{JobBuilder, JobError, Share};
use crate::socket::{Channel, Listener};
use crate::wire::{Reply, Request, StorageSettings, NOSTALL_VERSION, PROTOCOL};
use crate::{AgentError, Client, Reading};

/// What the agent answers a hello of `bytes`.
fn answer(socket: &Path, bytes: &[u8]) -> Reply {
    let channel = Channel::connect(socket).unwrap();
    channel.send(bytes, None).unwrap();
    let mut buf = vec![0u8; MAX_MESSAGE];
    let r = channel.recv(&mut buf).unwrap();
    Reply::decode(&buf[..r.len]).unwrap()
}

fn hello(protocol: u32) -> Vec<u8> {
    Request::Hello {
        protocol,
        location: "/data/train".into(),
        settings: Vec::new(),
        group: String::new(),
        node: None,
        ranks: None,
        storage: StorageSettings::default(),
        sources: Vec::new(),
        fields: None,
    }
    .encode()
}

#[test]
fn the_agent_tells_a_job_of_another_protocol_both_versions_by_its_first_bytes() {
    let f = Fixture::new(2, Duration::from_secs(30));
    let mut job = f.attach(1, "").unwrap(); // the agent listens
                                            // A later job's hello, laid out as this version cannot read past its protocol.
    let mut later = hello(PROTOCOL + 1);
    later.extend_from_slice(b"fields of a later version");
    assert_eq!(
        answer(&f.socket, &later),
        Reply::Versions {
            protocol: PROTOCOL,
            release: NOSTALL_VERSION.into()
        }
    );
    // An earlier job's (protocol 7 had no fields: its hello ends before their flag) is
    // told in words, which every version reads.
    let mut earlier = hello(7);
    earlier.pop();
    let Reply::Failed { failure, .. } = answer(&f.socket, &earlier) else {
        panic!("expected a refusal");
    };
    let why = failure.message;
    assert!(why.contains("this job speaks protocol 7"), "{why}");
    assert!(
        why.contains(&format!("protocol {PROTOCOL} (nostall ")),
        "{why}"
    );
    assert!(why.contains("NOSTALL_AGENT_SOCKET"), "{why}");
    assert_eq!(f.agent.stats().refused, 2);
    // The agent serves on.
    let (read, _) = read_epoch(&mut job, Position::start_of(0), None);
    assert_eq!(super::strip(&read), f.expected(1, 0));
}

/// An agent of another version at `socket`: it answers each hello, in turn, with the
/// replies given.
fn other_agent(socket: &Path, replies: Vec<Reply>) -> std::thread::JoinHandle<()> {
    crate::place::private_dir(socket).unwrap();
    let listener = Listener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; MAX_MESSAGE];
        for reply in replies {
            let channel = loop {
                if let Some(channel) = listener.accept(Duration::from_secs(60)).unwrap() {
                    break channel;
                }
            };
            channel.recv(&mut buf).unwrap();
            channel.send(&reply.encode(), None).unwrap();
        }
    })
}

#[test]
fn a_job_meeting_an_agent_of_another_version_names_both() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/agent.sock");
    let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
    let old = other_agent(
        &socket,
        vec![
            // Protocol 7's agent, which read a hello whole before its protocol.
            Reply::refusal("malformed message: 5 bytes after the end"),
            // Protocol 8's, which read this version's hello (laid out as its own).
            Reply::refusal(
                "the job speaks protocol 9, this agent 8: run the same nostall version (or \
                 stop the old agent)",
            ),
            // A later agent's.
            Reply::Versions {
                protocol: PROTOCOL + 1,
                release: "9.9.9".into(),
            },
        ],
    );
    let reading = Reading::new(photos.to_string_lossy(), settings(1));
    let met = |expected: Option<(u32, Option<&str>)>| {
        let err = Client::attach(&socket, &reading).unwrap_err();
        let said = err.to_string();
        let AgentError::Versions { agent, pid, .. } = err else {
            panic!("expected another version, got {said}");
        };
        assert_eq!(
            agent.as_ref().map(|(p, r)| (*p, r.as_deref())),
            expected,
            "{said}"
        );
        assert_eq!(pid, std::process::id() as i32);
        assert!(
            said.contains(&format!("this job protocol {PROTOCOL}")),
            "{said}"
        );
        assert!(said.contains(&socket.display().to_string()), "{said}");
        said
    };
    let said = met(None);
    assert!(said.contains("a protocol before 9"), "{said}");
    assert!(met(Some((8, None))).contains("speaks protocol 8,"));
    let said = met(Some((PROTOCOL + 1, Some("9.9.9"))));
    assert!(said.contains("(nostall 9.9.9)"), "{said}");
    old.join().unwrap();
}

#[test]
fn a_job_sharing_by_stream_reads_alone_beside_an_agent_of_another_version() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/agent.sock");
    let photos = nostall_demo::write(&dir.path().join("photos")).unwrap();
    let earlier = || Reply::refusal("malformed message: 5 bytes after the end");
    let old = other_agent(&socket, vec![earlier(), earlier()]);
    let job = |share| {
        let builder = LoaderBuilder::with_settings(photos.to_string_lossy(), settings(1));
        let mut job = JobBuilder::new(builder);
        job.share(share).agent_socket(socket.clone());
        job.start()
    };
    let alone = job(Share::Auto).unwrap();
    assert!(
        alone.agent.is_none(),
        "the job reads with a loader of its own"
    );
    let batches = alone.loader.epoch(0).unwrap().count();
    assert_eq!(batches, nostall_demo::PHOTOS.len().div_ceil(super::BATCH));
    // A named group is the user's to find: the job says why it cannot join it.
    let refused = job(Share::Group("search".into())).unwrap_err();
    assert!(
        matches!(refused, JobError::Agent(AgentError::Versions { .. })),
        "{refused}"
    );
    old.join().unwrap();
}
