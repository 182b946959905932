use std::sync::{Arc, Mutex};
use std::time::Duration;

use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
use nostall::Position;

use super::*;
use crate::{Agent, AgentConfig};

/// Settings for the demo photographs, small batches of small images.
fn settings() -> LoaderSettings {
    let mut s = LoaderSettings::default();
    s.image_size = Some(32);
    s.plan.batch_size = 4;
    s.threads = Threads::Count(1);
    s
}

fn photos(dir: &Path) -> String {
    let photos = nostall_demo::write(&dir.join("photos")).unwrap();
    photos.to_string_lossy().into_owned()
}

#[test]
fn share_is_off_auto_or_a_group_name() {
    assert_eq!("off".parse(), Ok(Share::Off));
    assert_eq!("auto".parse(), Ok(Share::Auto));
    assert_eq!("search-17".parse(), Ok(Share::Group("search-17".into())));
    let empty = "".parse::<Share>().unwrap_err();
    assert!(empty.contains("auto"), "{empty}");
}

#[test]
fn a_job_alone_reads_with_a_loader_of_its_own_as_its_rank() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings();
    (settings.plan.rank, settings.plan.world) = (1, 2);
    let job = JobBuilder::new(LoaderBuilder::with_settings(photos(dir.path()), settings))
        .start()
        .unwrap();
    assert_eq!((job.rank, job.world), (1, 2));
    assert!(job.node.is_none() && job.agent.is_none() && !job.goes_alone());
    assert_eq!(job.loader.catalog().len(), nostall_demo::PHOTOS.len());
    let mut epoch = job.loader.epoch(0).unwrap();
    let delivered: usize = epoch.by_ref().map(|b| b.unwrap().len()).sum();
    // Rank 1 of 2 reads half of the photographs (the last batch dropped or kept).
    assert!(delivered > 0 && delivered <= nostall_demo::PHOTOS.len().div_ceil(2));
}

#[test]
fn a_job_that_shares_more_than_settings_is_refused_before_it_looks_for_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let mut builder = LoaderBuilder::with_settings(photos(dir.path()), settings());
    builder.link_phases(vec![(Duration::ZERO, nostall::storage::Link::default())]);
    let mut job = JobBuilder::new(builder);
    // No agent could answer here: the refusal comes first.
    job.share(Share::Auto)
        .agent_socket(dir.path().join("nobody/agent.sock"));
    let refused = job.start().unwrap_err();
    assert!(matches!(refused, JobError::Settings(_)), "{refused}");
}

#[test]
fn a_job_that_finds_no_agent_names_the_socket_and_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody/agent.sock");
    let mut job = JobBuilder::new(LoaderBuilder::with_settings(photos(dir.path()), settings()));
    job.share(Share::Group("g".into()))
        .agent_socket(socket.clone());
    let missing = job.start().unwrap_err();
    let said = missing.to_string();
    assert!(matches!(missing, JobError::NoAgent { .. }), "{said}");
    assert!(said.contains(&socket.display().to_string()), "{said}");
    assert!(said.contains("nostall agent"), "{said}");
}

#[test]
fn a_job_starts_the_agent_it_does_not_find_and_reads_from_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/agent.sock");
    let started: Arc<Mutex<Option<Arc<Agent>>>> = Arc::default();
    let serving = Arc::new(Mutex::new(None));
    let start: StartAgent = {
        let (started, serving) = (started.clone(), serving.clone());
        Box::new(move |socket: &Path| {
            let mut config = AgentConfig::new();
            config.socket = socket.to_path_buf();
            let agent = Arc::new(Agent::new(config));
            let serve = agent.clone();
            *serving.lock().unwrap() = Some(std::thread::spawn(move || serve.serve()));
            *started.lock().unwrap() = Some(agent);
            Ok(())
        })
    };
    let mut job = JobBuilder::new(LoaderBuilder::with_settings(photos(dir.path()), settings()));
    job.share(Share::Auto)
        .agent_socket(socket)
        .start_agent_with(start);
    let job = job.start().unwrap();
    assert!(
        started.lock().unwrap().is_some(),
        "the job started its agent"
    );
    assert!(
        job.goes_alone(),
        "a job with no node of its own goes on alone"
    );
    assert!(job.node.is_none());
    let mut client = job.agent.expect("the job shares");
    let batch = client
        .next(Position::start_of(0))
        .unwrap()
        .expect("a batch");
    // The group's loader is the job's own: the same first batch.
    let own = job.loader.epoch(0).unwrap().next().unwrap().unwrap();
    assert_eq!(batch.ids(), own.ids());
    drop((batch, client));
    started.lock().unwrap().take().unwrap().stop();
    let served = serving.lock().unwrap().take().unwrap().join().unwrap();
    assert!(served.is_ok(), "{served:?}");
}
