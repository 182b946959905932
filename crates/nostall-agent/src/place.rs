//! Where the agent of a user listens, and the lock that makes it one agent per user.
//!
//! The socket lives in a directory only the user can enter (mode 0700, owned by the
//! user, checked before use): with the peer-credential check on every connection, no
//! other user's process can reach the agent, nor put a socket of its own in its place.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The socket the agent of this user listens on: `NOSTALL_AGENT_SOCKET`, else
/// `agent-p9.sock` (9: the [protocol](crate::PROTOCOL)) in `$XDG_RUNTIME_DIR/nostall`,
/// else in `/tmp/nostall-<uid>`. One socket per protocol: after an upgrade, a job starts
/// (or finds) an agent of its own version while one of the previous version still serves
/// its jobs, until it is idle.
pub fn default_socket() -> PathBuf {
    if let Some(path) = std::env::var_os("NOSTALL_AGENT_SOCKET") {
        return PathBuf::from(path);
    }
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(runtime) => PathBuf::from(runtime).join("nostall"),
        // SAFETY: geteuid cannot fail.
        None => PathBuf::from(format!("/tmp/nostall-{}", unsafe { libc::geteuid() })),
    };
    dir.join(format!("agent-p{}.sock", crate::PROTOCOL))
}

/// Makes the socket's directory if needed (mode 0700) and checks that it is this
/// user's alone; returns it.
///
/// # Errors
///
/// It cannot be made, or it is not a directory of this user that no one else can enter.
pub fn private_dir(socket: &Path) -> io::Result<&Path> {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the agent's socket {} has no directory", socket.display()),
            )
        })?;
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} must be a directory of user {uid} that no one else can enter (mode \
                 0700); it is not, so the agent's socket cannot be trusted there: remove \
                 it or set NOSTALL_AGENT_SOCKET to a path in a private directory",
                dir.display()
            ),
        ));
    }
    Ok(dir)
}

/// Takes the agent's lock beside `socket`: `None` if another agent holds it. While the
/// returned file is open, this process is the user's agent for that socket; a stale
/// socket file left by an agent that died is removed.
pub(crate) fn claim(socket: &Path) -> io::Result<Option<File>> {
    let dir = private_dir(socket)?;
    let name = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join(format!("{name}.lock")))?;
    // SAFETY: flock on a descriptor we own; LOCK_NB makes it fail rather than wait.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(err)
        };
    }
    match fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(Some(lock))
}
