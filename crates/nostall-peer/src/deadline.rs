//! A TCP stream whose reads and writes share one deadline.
//!
//! Socket timeouts bound each system call, not a request: a peer that sends one byte
//! every few seconds satisfies every call and is never timed out. [`Deadline`] sets each
//! call's timeout to the time left before the deadline, and fails once it has passed.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TCP stream whose I/O must finish by a deadline (none: it may wait for ever).
///
/// The stream may be shared (one descriptor: the service keeps a handle to shut each
/// connection down when it stops).
#[derive(Debug)]
pub(crate) struct Deadline {
    stream: Arc<TcpStream>,
    until: Option<Instant>,
}

impl Deadline {
    pub(crate) fn new(stream: impl Into<Arc<TcpStream>>) -> Deadline {
        Deadline {
            stream: stream.into(),
            until: None,
        }
    }

    /// From now on, I/O must finish within `limit`.
    pub(crate) fn within(&mut self, limit: Duration) {
        self.until = Some(Instant::now() + limit);
    }

    /// From now on, I/O may wait up to `limit` for each call (between requests, when a
    /// connection idles).
    pub(crate) fn idle(&mut self, limit: Duration) -> io::Result<()> {
        self.until = None;
        self.stream.set_read_timeout(Some(limit))?;
        self.stream.set_write_timeout(Some(limit))
    }

    /// The time left before the deadline (`None`: no deadline); an error once none is.
    fn left(&self) -> io::Result<Option<Duration>> {
        let Some(until) = self.until else {
            return Ok(None);
        };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request's deadline passed",
            ));
        }
        Ok(Some(left))
    }
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(left) = self.left()? {
            self.stream.set_read_timeout(Some(left))?;
        }
        (&*self.stream).read(buf)
    }
}

impl Write for Deadline {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(left) = self.left()? {
            self.stream.set_write_timeout(Some(left))?;
        }
        (&*self.stream).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self.stream).flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_slow_drip_misses_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let dripper = std::thread::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            // One byte every 20 ms until told to stop: every read gets a byte in time.
            while stopped.recv_timeout(Duration::from_millis(20)).is_err() {
                if peer.write_all(b"x").is_err() {
                    return;
                }
            }
        });
        let mut stream = Deadline::new(TcpStream::connect(addr).unwrap());
        stream.within(Duration::from_millis(300));
        let mut buf = [0; 1 << 20];
        let err = stream.read_exact(&mut buf).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{err}"
        );
        stop.send(()).unwrap();
        dripper.join().unwrap();
    }
}
