//! `nostall agent`: the node agent, serving batches to the jobs of this user on this node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nostall_agent::{Agent, AgentConfig};

use crate::run::parse_bytes;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The socket to listen on (default: `NOSTALL_AGENT_SOCKET`, else
    /// `$XDG_RUNTIME_DIR/nostall/agent-p9.sock`, else `/tmp/nostall-<uid>/agent-p9.sock`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Bytes of batches a group prepares ahead of its slowest job.
    #[arg(long, default_value = "512MiB", value_parser = parse_bytes)]
    staging: u64,
    /// Seconds a job may hold its group up without asking for a batch before it is
    /// detached (it goes on alone if it comes back).
    #[arg(long, default_value_t = 2.0)]
    lease: f64,
    /// Seconds with no job attached after which the agent leaves.
    #[arg(long, default_value_t = 60.0)]
    idle: f64,
}

pub(crate) fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = AgentConfig::new();
    if let Some(socket) = args.socket {
        config.socket = socket;
    }
    config.staging = args.staging;
    config.lease = seconds("--lease", args.lease)?;
    config.idle = seconds("--idle", args.idle)?;
    let agent = Arc::new(Agent::new(config));
    if !agent.serve()? {
        eprintln!("nostall agent: another agent of this user serves that socket already");
    }
    Ok(())
}

fn seconds(flag: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("{flag} {s}: give seconds, 0 or more"))
}
