//! The data plane's framing, inside a TLS 1.3 connection (see [`crate::auth`]): a hello,
//! then fetch requests and sample responses, all integers big-endian.
//!
//! ```text
//! client → server   "NSTL" | version u8 | node u32
//! server → client   status u8 | length u32 | reason       (status OK: length 0)
//! then, repeated:
//! client → server   length u32 | op u8 = FETCH | id u64  (length counts op and id)
//! server → client   status u8 | length u32 | payload      (OK: the sample's bytes;
//!                                                          otherwise a reason, UTF-8)
//! ```
//!
//! A request whose length is over [`MAX_REQUEST_BYTES`], or an unknown op, is answered
//! with [`Status::BadRequest`] and the connection is closed: the stream can no longer be
//! trusted to be in step. Per-sample refusals ([`Status::UnknownId`], [`Status::NotHeld`],
//! [`Status::Unavailable`], [`Status::TooLarge`]) keep the connection open.

use std::io::{self, Read, Write};

/// The first bytes a client sends.
pub(crate) const MAGIC: &[u8; 4] = b"NSTL";

/// The protocol version; a server refuses any other.
pub(crate) const VERSION: u8 = 2;

/// The largest request a server reads: a fetch is 9 bytes.
pub const MAX_REQUEST_BYTES: u32 = 64;

/// The only request op: fetch one sample by catalog id.
pub(crate) const FETCH: u8 = 1;

/// A response's status byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// The payload is the sample's bytes (or, after the handshake, the client is in).
    Ok = 0,
    /// The id is not in the catalog.
    UnknownId = 1,
    /// This node does not cache that sample (ask its holder or storage).
    NotHeld = 2,
    /// The server could not read the sample from storage.
    Unavailable = 3,
    /// The sample is larger than the server's response limit.
    TooLarge = 4,
    /// Malformed or oversized request, or a hello of another protocol version: the
    /// connection is closed after this.
    BadRequest = 5,
}

impl Status {
    fn from_byte(byte: u8) -> io::Result<Status> {
        Ok(match byte {
            0 => Status::Ok,
            1 => Status::UnknownId,
            2 => Status::NotHeld,
            3 => Status::Unavailable,
            4 => Status::TooLarge,
            5 => Status::BadRequest,
            _ => return Err(invalid(format!("unknown status byte {byte}"))),
        })
    }
}

pub(crate) fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// The client's hello: who it is, in which protocol version.
pub(crate) fn write_hello(w: &mut impl Write, node: u32) -> io::Result<()> {
    let mut frame = [0; 4 + 1 + 4];
    frame[..4].copy_from_slice(MAGIC);
    frame[4] = VERSION;
    frame[5..].copy_from_slice(&node.to_be_bytes());
    w.write_all(&frame)?;
    w.flush()
}

/// Reads a client's hello: its node index, once the magic and version match.
pub(crate) fn read_hello(r: &mut impl Read) -> io::Result<u32> {
    let mut frame = [0; 4 + 1 + 4];
    r.read_exact(&mut frame)?;
    if &frame[..4] != MAGIC {
        return Err(invalid("not a nostall peer (bad hello)"));
    }
    if frame[4] != VERSION {
        return Err(invalid(format!(
            "peer speaks protocol version {}, this build {VERSION}: run the same nostall \
             version on every node",
            frame[4]
        )));
    }
    Ok(u32::from_be_bytes(frame[5..].try_into().expect("4 bytes")))
}

/// A fetch request for `id`.
pub(crate) fn write_fetch(w: &mut impl Write, id: u64) -> io::Result<()> {
    let mut frame = [0; 4 + 1 + 8];
    frame[..4].copy_from_slice(&9u32.to_be_bytes());
    frame[4] = FETCH;
    frame[5..].copy_from_slice(&id.to_be_bytes());
    w.write_all(&frame)?;
    w.flush()
}

/// What a server makes of the next request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Fetch(u64),
    /// Malformed: the reason, to log and send back before closing.
    Bad(String),
}

/// Reads one request; `Ok(None)` when the client closed the connection between requests.
pub(crate) fn read_request(r: &mut impl Read) -> io::Result<Option<Request>> {
    let mut len = [0; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_REQUEST_BYTES {
        return Ok(Some(Request::Bad(format!(
            "request of {len} bytes is over the limit of {MAX_REQUEST_BYTES}"
        ))));
    }
    let mut body = vec![0; len as usize];
    r.read_exact(&mut body)?;
    Ok(Some(match body.as_slice() {
        [FETCH, id @ ..] if id.len() == 8 => {
            Request::Fetch(u64::from_be_bytes(id.try_into().expect("8 bytes")))
        }
        [op, ..] => Request::Bad(format!("unknown request op {op} of {len} bytes")),
        [] => Request::Bad("empty request".into()),
    }))
}

/// A response: status, then payload.
pub(crate) fn write_response(w: &mut impl Write, status: Status, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len()).map_err(|_| invalid("payload over 4 GiB"))?;
    let mut head = [0; 5];
    head[0] = status as u8;
    head[1..].copy_from_slice(&len.to_be_bytes());
    w.write_all(&head)?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads a response into `out` (replacing its contents), refusing payloads over `limit`
/// bytes before reading them.
pub(crate) fn read_response(
    r: &mut impl Read,
    out: &mut Vec<u8>,
    limit: u64,
) -> io::Result<Status> {
    let mut head = [0; 5];
    r.read_exact(&mut head)?;
    let status = Status::from_byte(head[0])?;
    let len = u32::from_be_bytes(head[1..].try_into().expect("4 bytes"));
    if u64::from(len) > limit {
        return Err(invalid(format!(
            "peer sent a {len}-byte response, over the limit of {limit}"
        )));
    }
    out.clear();
    out.resize(len as usize, 0);
    r.read_exact(out)?;
    Ok(status)
}

/// Reads `data` as a server reads a client (hello, then requests), as a client reads a
/// server (responses of at most `limit` bytes), and as a rank reads the rendezvous's node
/// list: what fuzzers run, so that no byte sequence from a peer panics or allocates
/// beyond the limits.
#[doc(hidden)]
pub fn parse_for_fuzzing(data: &[u8], limit: u64) {
    // A job of as many nodes as the list claims, where that is few enough to reach the
    // entries (a rank's count is its own; here the list's, so the entries get read).
    let claimed = data.get(1..5).map_or(0, |c| {
        u32::from_be_bytes(c.try_into().expect("4 bytes")) as usize
    });
    let _ = crate::control::decode_nodes(data, claimed.min(data.len()));
    let mut as_server = data;
    if read_hello(&mut as_server).is_ok() {
        while let Ok(Some(Request::Fetch(_))) = read_request(&mut as_server) {}
    }
    let mut as_client = data;
    let mut out = Vec::new();
    while read_response(&mut as_client, &mut out, limit).is_ok() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_hello(&mut buf, 3).unwrap();
        assert_eq!(read_hello(&mut buf.as_slice()).unwrap(), 3);

        buf.clear();
        write_fetch(&mut buf, 1 << 40).unwrap();
        assert_eq!(
            read_request(&mut buf.as_slice()).unwrap(),
            Some(Request::Fetch(1 << 40))
        );
        assert_eq!(read_request(&mut [].as_slice()).unwrap(), None);

        buf.clear();
        write_response(&mut buf, Status::Ok, b"jpeg bytes").unwrap();
        let mut out = Vec::new();
        assert_eq!(
            read_response(&mut buf.as_slice(), &mut out, 100).unwrap(),
            Status::Ok
        );
        assert_eq!(out, b"jpeg bytes");
        let err = read_response(&mut buf.as_slice(), &mut out, 5).unwrap_err();
        assert!(err.to_string().contains("over the limit of 5"), "{err}");
    }

    #[test]
    fn oversized_and_unknown_requests_are_named() {
        let mut frame = 1000u32.to_be_bytes().to_vec();
        frame.extend_from_slice(&[0; 16]);
        let Some(Request::Bad(reason)) = read_request(&mut frame.as_slice()).unwrap() else {
            panic!("an oversized request must be refused");
        };
        assert!(reason.contains("1000 bytes is over the limit"), "{reason}");

        let frame = [0, 0, 0, 2, 9, 9];
        let Some(Request::Bad(reason)) = read_request(&mut frame.as_slice()).unwrap() else {
            panic!("an unknown op must be refused");
        };
        assert!(reason.contains("unknown request op 9"), "{reason}");

        let mut buf = Vec::new();
        write_hello(&mut buf, 0).unwrap();
        buf[4] = 1;
        let err = read_hello(&mut buf.as_slice()).unwrap_err();
        assert!(err.to_string().contains("version 1"), "{err}");
    }
}
