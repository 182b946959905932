//! What a server does when `accept` fails: the nostall services (the node agent, the
//! peer service, the metrics endpoint) keep serving through a machine's shortages, which
//! one client holding descriptors could otherwise turn into the end of the service, or
//! into a thread spinning on an error that does not go away.

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
}
