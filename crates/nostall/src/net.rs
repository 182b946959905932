//! What a server does about descriptors: the nostall services (the node agent, the peer
//! service, the metrics endpoint) keep serving through a machine's shortages, which one
//! client holding descriptors could otherwise turn into the end of the service, or into a
//! thread spinning on an error that does not go away; and they start with the most
//! descriptors the system allows them.

use std::io;
use std::time::Duration;

/// How long a listener waits after running out of descriptors or memory at accept.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What a failed `accept` means for the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptFailure {
    /// The client gave up between poll and accept, or a signal came: look again.
    Retry,
    /// The process or the system is out of descriptors, buffers or memory, which the end
    /// of a connection (or of another process) gives back: wait [`ACCEPT_BACKOFF`], then
    /// look again. The connection waits in the backlog meanwhile.
    BackOff,
    /// The listener itself is broken.
    Fatal,
}

/// Classifies a failed `accept`: only a broken listener ends a service, never the state
/// of the machine.
pub fn accept_failed(err: &io::Error) -> AcceptFailure {
    match err.raw_os_error() {
        Some(libc::ECONNABORTED | libc::EAGAIN | libc::EINTR | libc::EPROTO | libc::EPERM) => {
            AcceptFailure::Retry
        }
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP | libc::EFAULT) => {
            AcceptFailure::Fatal
        }
        _ => AcceptFailure::BackOff,
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit, and returns
/// the limit now in force. A server holds one descriptor per connection, and the default
/// soft limit (often 1 024) is what a large job, or a stranger opening connections, runs
/// it out of first; the hard limit is what the administrator allows.
pub fn raise_descriptor_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the one rlimit passed, which lives
    // for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_failures_end_the_listener_only_when_it_is_broken() {
        let of = |errno| accept_failed(&io::Error::from_raw_os_error(errno));
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert_eq!(of(errno), AcceptFailure::BackOff, "errno {errno}");
        }
        assert_eq!(of(libc::ECONNABORTED), AcceptFailure::Retry);
        assert_eq!(of(libc::EBADF), AcceptFailure::Fatal);
    }

    /// Set in the child process of `the_descriptor_limit_is_raised_to_the_hard_limit`.
    const CHILD: &str = "NOSTALL_TEST_RLIMIT_CHILD";

    /// Runs in a process of its own, started with a low soft limit (lowering it here
    /// would starve the tests running beside it).
    #[test]
    fn the_descriptor_limit_is_raised_to_the_hard_limit() {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit with a valid pointer to an rlimit.
        let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        assert_eq!(got, 0);
        if std::env::var_os(CHILD).is_none() {
            let status = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "ulimit -Sn {} && exec \"$0\" --exact net::tests::{} --test-threads=1",
                    limit.rlim_max.min(256),
                    "the_descriptor_limit_is_raised_to_the_hard_limit"
                ))
                .arg(std::env::current_exe().unwrap())
                .env(CHILD, "1")
                .status()
                .unwrap();
            assert!(status.success());
            return;
        }
        assert!(limit.rlim_cur <= 256, "started with a low soft limit");
        assert_eq!(raise_descriptor_limit(), limit.rlim_max);
    }
}
