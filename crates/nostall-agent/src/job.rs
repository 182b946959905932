//! A training job's side of nostall, assembled in one place: the dataset, the peers, the
//! node agent's group, and the loader.
//!
//! A job reads a dataset with a loader's settings in one of three ways, which combine:
//!
//! - **alone**: a loader of its own over the dataset;
//! - **as a rank of a partitioned cache** ([`JobBuilder::on_node`]): it joins its job's
//!   nodes (its node's cache and peer service, the rendezvous) and plans locality-aware
//!   batches over them (CoorDL, Yang & Cong);
//! - **through the node agent** ([`JobBuilder::share`]): its batches come from the agent's
//!   group in shared memory. A rank of a partitioned cache that shares leaves the node to
//!   the agent, which joins once for the node's local ranks.
//!
//! The command line (`nostall run`, `bench`, `node`) and the Python bindings make a
//! [`JobBuilder`] from their arguments and call [`JobBuilder::start`]; the policy (who
//! joins the node, whether the job can go on if the agent is lost, how long to wait for
//! an agent it started) is here, not in them. Every wait (listing a bucket, the
//! rendezvous, reaching the agent) happens inside `start`, which callers run where their
//! waits belong: the bindings on a thread that Ctrl-C abandons.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nostall::dataset::Dataset;
use nostall::loader::LoaderBuilder;
use nostall::storage::Source;
use nostall::Loader;
use nostall_peer::{Membership, Node, NodeConfig};

use crate::client::{AgentError, Client, Reading};

/// Whether, and with whom, a job shares its batches through the node agent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Share {
    /// Not at all: the job prepares its own batches.
    #[default]
    Off,
    /// In the group of every job that reads the same stream (`auto`).
    Auto,
    /// In the group of the jobs that give this name.
    Group(String),
}

impl FromStr for Share {
    type Err = String;

    /// `off`, `auto`, or a group's name.
    fn from_str(text: &str) -> Result<Share, String> {
        match text {
            "off" => Ok(Share::Off),
            "auto" => Ok(Share::Auto),
            "" => Err("share: give \"auto\", \"off\" or a group's name".into()),
            name => Ok(Share::Group(name.to_string())),
        }
    }
}

/// Starts a node agent that listens at the socket given, when none answers there (the
/// Python bindings start `python -m nostall.agent`). A job without one asks the user to
/// start the agent.
pub type StartAgent = Box<dyn FnOnce(&Path) -> Result<(), AgentError> + Send>;

/// How long a job waits for an agent it started to listen.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// What a job is made of, before it starts; see the [module](self).
pub struct JobBuilder {
    loader: LoaderBuilder,
    node: Option<NodeConfig>,
    locality_aware: bool,
    share: Share,
    socket: PathBuf,
    start_agent: Option<StartAgent>,
    /// A dataset opened by the caller (samples made by code), instead of the one at the
    /// loader's location.
    dataset: Option<Dataset>,
}

impl JobBuilder {
    /// A job reading the dataset `loader` names with its settings: alone until told
    /// otherwise.
    pub fn new(loader: LoaderBuilder) -> JobBuilder {
        JobBuilder {
            loader,
            node: None,
            locality_aware: true,
            share: Share::Off,
            socket: crate::default_socket(),
            start_agent: None,
            dataset: None,
        }
    }

    /// Reads `dataset` (opened by the caller: samples made by code) instead of opening
    /// the loader's location.
    pub fn dataset(&mut self, dataset: Dataset) -> &mut JobBuilder {
        self.dataset = Some(dataset);
        self
    }

    /// As a rank of the job of partitioned caching that `node` describes.
    pub fn on_node(&mut self, node: NodeConfig) -> &mut JobBuilder {
        self.node = Some(node);
        self
    }

    /// With peers, keeps the plain plan (each rank a fixed slice of every global batch)
    /// instead of locality-aware batches: partitioned caching alone, the baseline that
    /// locality-aware loading is compared with.
    pub fn plain_plan(&mut self) -> &mut JobBuilder {
        self.locality_aware = false;
        self
    }

    /// Through the node agent, in the group `share` says.
    pub fn share(&mut self, share: Share) -> &mut JobBuilder {
        self.share = share;
        self
    }

    /// Looks for the node agent at `socket` instead of [`crate::default_socket`].
    pub fn agent_socket(&mut self, socket: PathBuf) -> &mut JobBuilder {
        self.socket = socket;
        self
    }

    /// Starts the node agent with `start` when none answers, and waits for it to listen.
    pub fn start_agent_with(&mut self, start: StartAgent) -> &mut JobBuilder {
        self.start_agent = Some(start);
        self
    }

    /// The loader's settings and what else it was given.
    pub fn loader(&self) -> &LoaderBuilder {
        &self.loader
    }

    /// As [`JobBuilder::loader`], to change.
    pub fn loader_mut(&mut self) -> &mut LoaderBuilder {
        &mut self.loader
    }

    /// Attaches to the node agent of this user (at [`crate::default_socket`] unless
    /// [`JobBuilder::agent_socket`] says otherwise) in the job's group, starting one if
    /// none answers and [`JobBuilder::start_agent_with`] was given; `None` when the job
    /// does not share, or shares by stream ([`Share::Auto`]) and the agent there runs
    /// another nostall version (it says so on stderr).
    ///
    /// # Errors
    ///
    /// [`JobError::Settings`] when the loader has more than settings to send (a pipeline
    /// made in code, a device), [`JobError::NoAgent`] when no agent answers, and the
    /// agent's refusal ([`AgentError::Versions`] for a named group's agent of another
    /// version).
    pub fn attach(&mut self) -> Result<Option<Client>, JobError> {
        let group = match &self.share {
            Share::Off => return Ok(None),
            Share::Auto => String::new(),
            Share::Group(name) => name.clone(),
        };
        let Some(settings) = self.loader.portable_settings() else {
            return Err(JobError::Settings(
                "sharing sends the loader's settings to the node agent, and this loader has \
                 more than settings (a device, a pipeline made in code, ops.Python): leave sharing off"
                    .into(),
            ));
        };
        let mut reading = Reading::new(self.loader.location(), settings.clone())
            .in_group(group)
            .mixing(self.loader.sources().to_vec())
            .with_fields(self.loader.given_fields().cloned());
        if let Some(node) = &self.node {
            if matches!(node.membership, Membership::Store { .. }) {
                // The agent, another process, cannot reach the store the rank was given.
                return Err(JobError::Settings(
                    "the node agent joins the job for the node, and cannot reach the \
                     key-value store this job's nodes meet in: with sharing, meet at \
                     nostall's rendezvous (NodeConfig::from_env)"
                        .into(),
                ));
            }
            reading = reading.on_node(node.clone());
        } else if let Some(ranks) = nostall::env::LocalRanks::from_env() {
            // Under torchrun, the agent balances its threads between the local ranks'
            // streams (unless the settings turn balance_ranks off).
            reading = reading.among(ranks);
        }
        let socket = &self.socket;
        let unreachable = |cause| JobError::NoAgent {
            socket: socket.display().to_string(),
            cause,
        };
        let attached = match (Client::attach(socket, &reading), self.start_agent.take()) {
            (Err(AgentError::Unreachable(_)), Some(start)) => {
                start(socket)?;
                match Client::attach_within(START_PATIENCE, socket, &reading) {
                    Err(AgentError::Unreachable(cause)) => return Err(unreachable(cause)),
                    attached => attached,
                }
            }
            (Err(AgentError::Unreachable(cause)), None) => return Err(unreachable(cause)),
            (attached, _) => attached,
        };
        match attached {
            // An agent of another nostall version serves the socket this job was given:
            // with `auto`, the job prepares alone rather than fail (a named group is the
            // user's to find).
            Err(e @ AgentError::Versions { .. }) if self.share == Share::Auto => {
                eprintln!("nostall: {e}. With share=\"auto\", this job prepares its own batches");
                Ok(None)
            }
            attached => Ok(Some(attached?)),
        }
    }

    /// Starts the job: attaches to the node agent if it shares, opens the dataset, joins
    /// the peers if it is a rank of a partitioned cache that does not share, and makes
    /// the loader. Waits as long as those do (the rendezvous up to the node's join
    /// timeout, an agent it started up to 30 s).
    ///
    /// # Errors
    ///
    /// Those of [`JobBuilder::attach`], of opening the dataset and making the loader
    /// ([`JobError::Loader`]), and of joining the peers ([`JobError::Peers`]).
    pub fn start(mut self) -> Result<Job, JobError> {
        let agent = self.attach()?;
        // A rank that shares leaves its node to the agent; its own loader is the one it
        // would go on with, and it cannot go on without its node.
        let joining = self.node.clone().filter(|_| agent.is_none());
        let (dataset, node) = match joining {
            Some(config) => {
                let (dataset, node) = join_node(&self.loader, config)?;
                node.configure(&mut self.loader);
                if !self.locality_aware {
                    self.loader.locality(None);
                }
                (dataset, Some(node))
            }
            None => match self.dataset.take() {
                Some(dataset) => (dataset, None),
                None => (self.loader.open_dataset()?, None),
            },
        };
        let source: Arc<dyn Source> = match &node {
            Some(node) => node.source(),
            None => dataset.source.clone(),
        };
        let (rank, world) = match (&node, &self.node) {
            (Some(node), _) => (node.rank(), node.world()),
            (None, Some(config)) => (config.rank(), config.world()),
            (None, None) => {
                let plan = &self.loader.settings().plan;
                (plan.rank, plan.world)
            }
        };
        let making = Instant::now();
        let loader = self.loader.build(dataset.catalog, source)?;
        if let Some(client) = &agent {
            // The job reads the group's batches with its own loader's layout (a record's
            // fields at their offsets): the agent's must be the same.
            let (own, group) = (loader.config().pipeline.layout(), client.attached());
            if own.shape() != group.sample_shape || own.dtype().to_string() != group.dtype {
                return Err(JobError::Agent(AgentError::Protocol(format!(
                    "the group's samples are {} {:?}, this job's {} {:?}: run the same \
                     nostall version as the agent (or stop the old agent)",
                    group.dtype,
                    group.sample_shape,
                    own.dtype(),
                    own.shape()
                ))));
            }
        }
        Ok(Job {
            goes_alone: agent.is_some() && self.node.is_none(),
            loader,
            made_in: making.elapsed(),
            storage: dataset.source,
            node,
            agent,
            rank,
            world,
        })
    }
}

impl fmt::Debug for JobBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobBuilder")
            .field("loader", &self.loader)
            .field("node", &self.node)
            .field("locality_aware", &self.locality_aware)
            .field("share", &self.share)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// A started job: what [`JobBuilder::start`] made.
#[non_exhaustive]
pub struct Job {
    /// The job's own loader: its batches when it does not share; when it does, what it
    /// knows of the dataset, and the loader it goes on with if the agent is lost (see
    /// [`Job::goes_alone`]).
    pub loader: Loader,
    /// How long making the loader took, once the dataset was open and the peers joined
    /// (a cache filled before the first epoch is read then).
    pub made_in: Duration,
    /// The dataset's storage, below any node or cache.
    pub storage: Arc<dyn Source>,
    /// The node this process joined: a rank of a partitioned cache that does not share.
    pub node: Option<Node>,
    /// The node agent's group, when the job shares.
    pub agent: Option<Client>,
    /// This process's rank in the job.
    pub rank: usize,
    /// The job's ranks.
    pub world: usize,
    goes_alone: bool,
}

impl Job {
    /// Whether the job goes on with its own loader if the node agent is lost: yes, unless
    /// its node of a partitioned cache was the agent's (its peers read their parts from
    /// it).
    pub fn goes_alone(&self) -> bool {
        self.goes_alone
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("joined_node", &self.node.is_some())
            .field("shares", &self.agent.is_some())
            .finish_non_exhaustive()
    }
}

/// Why a job did not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum JobError {
    /// Opening the dataset or making the loader failed.
    Loader(nostall::Error),
    /// Joining the peers failed.
    Peers(nostall_peer::Error),
    /// The settings cannot be shared as asked; the text says why.
    Settings(String),
    /// No node agent answers at the socket.
    NoAgent {
        /// Where the job looked.
        socket: String,
        /// Why it could not connect.
        cause: std::io::Error,
    },
    /// The node agent refused the job or failed it.
    Agent(AgentError),
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Loader(e) => e.fmt(f),
            JobError::Peers(e) => e.fmt(f),
            JobError::Settings(why) => f.write_str(why),
            JobError::NoAgent { socket, cause } => write!(
                f,
                "no nostall agent answers at {socket} ({cause}): start the node's agent \
                 (`nostall agent`, or `python -m nostall.agent`), or set \
                 NOSTALL_AGENT_SOCKET to where it listens"
            ),
            JobError::Agent(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for JobError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JobError::Loader(e) => Some(e),
            JobError::Peers(e) => Some(e),
            JobError::NoAgent { cause, .. } => Some(cause),
            JobError::Agent(e) => Some(e),
            JobError::Settings(_) => None,
        }
    }
}

impl From<nostall::Error> for JobError {
    fn from(e: nostall::Error) -> JobError {
        JobError::Loader(e)
    }
}

impl From<nostall_peer::Error> for JobError {
    fn from(e: nostall_peer::Error) -> JobError {
        JobError::Peers(e)
    }
}

impl From<AgentError> for JobError {
    fn from(e: AgentError) -> JobError {
        JobError::Agent(e)
    }
}

/// `builder`'s dataset, opened, and the node of `config`, joined over it: for a job's
/// rank, or for the node agent joining once for a node's local ranks. The dataset's
/// source is its storage, below the node.
pub(crate) fn join_node(
    builder: &LoaderBuilder,
    config: NodeConfig,
) -> Result<(Dataset, Node), JobError> {
    let dataset = builder.open_dataset()?;
    let node = Node::join(&dataset.catalog, dataset.source.clone(), config)?;
    Ok((dataset, node))
}

#[cfg(test)]
mod tests;
