//! The agent's socket: Unix-domain, sequenced packets (one message per send, boundaries
//! kept), memfds passed beside messages, the peer's user checked on both ends.
//!
//! All the `unsafe` of the crate's networking is here, each call on descriptors this
//! module owns.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use nostall::net::{accept_failed, AcceptFailure, ACCEPT_BACKOFF};

/// The largest message either end sends or accepts, in bytes: a batch's labels and ids
/// for [`MAX_BATCH`](crate::wire::MAX_BATCH) samples, with room to spare.
pub(crate) const MAX_MESSAGE: usize = 160 << 10;

/// Room for the control messages of one packet (two descriptors at most), aligned as a
/// `cmsghdr` must be: on the stack, as every message of a batch passes through here.
#[derive(Default)]
struct Control([u64; 8]);

/// A connected socket.
#[derive(Debug)]
pub(crate) struct Channel {
    fd: OwnedFd,
}

/// A message received, with the descriptor that came with it.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) fd: Option<OwnedFd>,
}

/// What [`Channel::recv`] found instead of a message.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// The other end closed the connection.
    Closed,
    /// A message larger than [`MAX_MESSAGE`], or with more descriptors than one.
    Oversized,
    /// The socket failed (or the receive timed out).
    Io(io::Error),
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) address.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is longer than {} bytes: set NOSTALL_AGENT_SOCKET to a \
                 shorter one",
                path.display(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation; the descriptor is owned below.
    let fd = check(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: just created, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A listening socket.
#[derive(Debug)]
pub(crate) struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Listens at `path` (which must not exist).
    pub(crate) fn bind(path: &Path) -> io::Result<Listener> {
        let fd = new_socket()?;
        let (addr, len) = sockaddr(path)?;
        // SAFETY: a valid address of `len` bytes for a socket we own.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        })?;
        // SAFETY: a bound socket we own.
        check(unsafe { libc::listen(fd.as_raw_fd(), 64) })?;
        Ok(Listener { fd })
    }

    /// The next connection; waits at most `timeout` (then `Ok(None)`), so that the
    /// caller can check whether it should still listen.
    pub(crate) fn accept(&self, timeout: Duration) -> io::Result<Option<Channel>> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one pollfd, valid for the call.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(err)
            };
        }
        if ready == 0 {
            return Ok(None);
        }
        // SAFETY: accepting on our listening socket; no address wanted.
        let fd = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return match accept_failed(&err) {
                AcceptFailure::Retry => Ok(None),
                AcceptFailure::BackOff => {
                    // Out of descriptors or memory: the connection waits in the backlog,
                    // and the jobs already served go on. Waiting keeps poll from spinning.
                    std::thread::sleep(ACCEPT_BACKOFF);
                    Ok(None)
                }
                AcceptFailure::Fatal => Err(err),
            };
        }
        // SAFETY: just accepted, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Some(Channel { fd }))
    }
}

/// The user and process at the other end of a connection, as the kernel saw them when
/// it was made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    pub(crate) uid: u32,
    pub(crate) pid: i32,
}

impl Channel {
    /// Connects to the agent listening at `path`.
    pub(crate) fn connect(path: &Path) -> io::Result<Channel> {
        let fd = new_socket()?;
        let (addr, len) = sockaddr(path)?;
        // SAFETY: a valid address of `len` bytes for a socket we own.
        check(unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        })?;
        Ok(Channel { fd })
    }

    /// Who is at the other end.
    pub(crate) fn peer(&self) -> io::Result<Peer> {
        // SAFETY: ucred is plain data.
        let mut cred: libc::ucred = unsafe { zeroed() };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: SO_PEERCRED fills a ucred of `len` bytes.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        })?;
        Ok(Peer {
            uid: cred.uid,
            pid: cred.pid,
        })
    }

    /// Bounds how long a send may block (a peer that stopped reading) and, if given, a
    /// receive.
    pub(crate) fn set_timeouts(&self, send: Duration, recv: Option<Duration>) -> io::Result<()> {
        let set = |option, d: Duration| {
            let tv = libc::timeval {
                tv_sec: d.as_secs() as libc::time_t,
                tv_usec: d.subsec_micros() as libc::suseconds_t,
            };
            // SAFETY: a timeval of the size given, for a socket we own.
            check(unsafe {
                libc::setsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    option,
                    (&tv as *const libc::timeval).cast(),
                    size_of::<libc::timeval>() as libc::socklen_t,
                )
            })
        };
        set(libc::SO_SNDTIMEO, send)?;
        set(libc::SO_RCVTIMEO, recv.unwrap_or(Duration::ZERO))?;
        Ok(())
    }

    /// Sends one message, with `fd` beside it if given.
    pub(crate) fn send(&self, message: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        self.send_with(message, fd, 0)
    }

    /// Sends one message if the socket has room for it now (`Ok(false)` if not),
    /// never waiting.
    pub(crate) fn send_if_room(&self, message: &[u8]) -> io::Result<bool> {
        match self.send_with(message, None, libc::MSG_DONTWAIT) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn send_with(
        &self,
        message: &[u8],
        fd: Option<BorrowedFd<'_>>,
        flags: libc::c_int,
    ) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: message.as_ptr() as *mut libc::c_void,
            iov_len: message.len(),
        };
        // SAFETY: CMSG_SPACE is arithmetic.
        let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
        let mut control = Control::default();
        debug_assert!(space <= size_of::<Control>());
        // SAFETY: msghdr is plain data; all zeroes is an empty header.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            // SAFETY: the control buffer has room for one header and one descriptor
            // (CMSG_SPACE above), so CMSG_FIRSTHDR is non-null and CMSG_DATA in bounds.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&msg);
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
            }
        }
        loop {
            // SAFETY: the header points at live buffers for the duration of the call.
            let sent =
                unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | flags) };
            if sent >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Receives one message into `buf` (at least [`MAX_MESSAGE`] bytes).
    pub(crate) fn recv(&self, buf: &mut [u8]) -> Result<Received, RecvError> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for two descriptors: a peer sending more is caught as truncated control.
        // SAFETY: CMSG_SPACE is arithmetic.
        let space = unsafe { libc::CMSG_SPACE(2 * size_of::<RawFd>() as u32) } as usize;
        let mut control = Control::default();
        debug_assert!(space <= size_of::<Control>());
        // SAFETY: msghdr is plain data; all zeroes is an empty header.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let len = loop {
            // SAFETY: the header points at live buffers for the duration of the call;
            // descriptors received are close-on-exec.
            let len =
                unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if len >= 0 {
                break len as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(RecvError::Io(err));
            }
        };
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote into our buffer, within
        // msg_controllen; each SCM_RIGHTS payload is a whole number of descriptors, which
        // are now ours and are owned (so closed) at once.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    for i in 0..bytes / size_of::<RawFd>() {
                        let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() > 1 {
            return Err(RecvError::Oversized);
        }
        if len == 0 {
            return Err(RecvError::Closed);
        }
        Ok(Received { len, fd: fds.pop() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs in a process of its own (it lowers the process's descriptor limit): a client
    /// waits in the backlog while the listener has no descriptor left; accept waits and
    /// says "nothing yet" instead of failing, and takes the client once one is free.
    #[test]
    fn a_listener_out_of_descriptors_waits_and_then_accepts() {
        if !crate::test_common::alone_in_a_process(
            "socket::tests::a_listener_out_of_descriptors_waits_and_then_accepts",
            "NOSTALL_TEST_EMFILE_CHILD",
        ) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = Listener::bind(&path).unwrap();
        let _client = Channel::connect(&path).unwrap();
        let limit = libc::rlimit {
            rlim_cur: 64,
            rlim_max: 64,
        };
        // SAFETY: setrlimit with a valid struct, in this test's own process.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
        let mut held = Vec::new();
        while let Ok(file) = std::fs::File::open("/dev/null") {
            held.push(file);
        }
        let started = std::time::Instant::now();
        assert!(listener.accept(Duration::from_secs(1)).unwrap().is_none());
        assert!(
            started.elapsed() >= ACCEPT_BACKOFF,
            "it waited before looking again"
        );
        held.pop();
        assert!(listener.accept(Duration::from_secs(1)).unwrap().is_some());
    }
}
