//! The messages between a job and the agent, and their bytes.
//!
//! Each message is one packet of the socket: a tag byte, then fields in little-endian,
//! strings and lists prefixed by their length. Decoding checks every length against what
//! is left and against the limits below, so that a malformed or hostile packet is an
//! error naming what is wrong, never a panic or an allocation it did not pay for.

use std::fmt;

/// The protocol's version: a job and an agent of different versions refuse each other.
pub const PROTOCOL: u32 = 1;

/// The most samples in a batch served through the agent (labels and ids travel in the
/// message).
pub const MAX_BATCH: usize = 8192;

/// The most settings a job sends, and the longest text of one.
const MAX_SETTINGS: usize = 64;
const MAX_TEXT: usize = 4096;

/// A malformed message: what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed message: {}", self.0)
    }
}

/// What a job asks of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// The first message: which stream the job reads.
    Hello {
        protocol: u32,
        /// The dataset's location, as `Loader` takes it.
        location: String,
        /// The loader's settings as text (`LoaderBuilder::set`).
        settings: Vec<(String, String)>,
        /// A group name given by the job; empty to group by stream.
        group: String,
    },
    /// The next batch: the job stands at this position (after its last batch).
    Next { epoch: u64, batch: u64, sample: u64 },
    /// The job is done with the batch of this ticket.
    Release { ticket: u64 },
}

/// The agent's answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The job is attached: its group and what it reads.
    Welcome(crate::Attached),
    /// A batch, in the shared buffer named by `buffer` (its memfd comes with the message
    /// the first time this job is sent that buffer).
    Batch(BatchHeader),
    /// The epoch has no more batches.
    End { epoch: u64 },
    /// The request failed.
    Failed(Failure),
}

/// Why a request failed: the text says why and what to do; a bad sample is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) sample: Option<SampleFailure>,
}

/// A sample that could not be read or prepared, as the loader names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampleFailure {
    /// The sample's id in the catalog.
    pub sample_id: u64,
    /// Where its bytes live (a path).
    pub location: String,
    /// The cause's stable name (`"corrupt"`, `"missing"`, ...).
    pub cause: String,
    /// The cause in words.
    pub detail: String,
}

impl Failure {
    /// A failure in words only.
    pub(crate) fn text(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            sample: None,
        }
    }

    /// The loader's error, with the sample it names.
    pub(crate) fn of(err: &nostall::Error) -> Failure {
        let sample = match err {
            nostall::Error::Sample(e) => Some(SampleFailure {
                sample_id: e.id,
                location: e.location.clone(),
                cause: e.cause.kind().to_string(),
                detail: e.cause.to_string(),
            }),
            _ => None,
        };
        Failure {
            message: err.to_string(),
            sample,
        }
    }
}

/// Where a batch is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    /// Names this delivery in [`Request::Release`].
    pub(crate) ticket: u64,
    /// The shared buffer holding the batch, and its length.
    pub(crate) buffer: u64,
    pub(crate) buffer_len: u64,
    /// Bytes of the batch's data at the buffer's start.
    pub(crate) data_len: u64,
    /// The batch's number within its epoch.
    pub(crate) index: u64,
    /// The position just after the batch.
    pub(crate) epoch: u64,
    pub(crate) batch: u64,
    pub(crate) sample: u64,
    /// Whether the batch came from the group's shared stream (else from this job's own).
    pub(crate) shared: bool,
    pub(crate) labels: Vec<i64>,
    pub(crate) ids: Vec<u64>,
    /// The group's figures when the batch was sent.
    pub(crate) group: crate::GroupStats,
}

const HELLO: u8 = 1;
const NEXT: u8 = 2;
const RELEASE: u8 = 3;
const WELCOME: u8 = 11;
const BATCH: u8 = 12;
const END: u8 = 13;
const FAILED: u8 = 14;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn text(&mut self, s: &str) -> &mut Self {
        // Longer texts are cut (at a character boundary) rather than refused by the
        // reader: an error message must arrive.
        let mut end = s.len().min(MAX_TEXT);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u32(end as u32);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
        self
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Malformed> {
        if self.bytes.len() < n {
            return Err(Malformed(format!(
                "{what} runs past the end of the message"
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8, Malformed> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32, Malformed> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, Malformed> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    fn count(&mut self, what: &str, max: usize) -> Result<usize, Malformed> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(Malformed(format!(
                "{what}: {n} is more than the {max} allowed"
            )));
        }
        Ok(n)
    }
    fn text(&mut self, what: &str) -> Result<String, Malformed> {
        let n = self.count(what, MAX_TEXT)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed(format!("{what} is not UTF-8")))
    }
    fn end(&self) -> Result<(), Malformed> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Malformed(format!(
                "{} bytes after the end",
                self.bytes.len()
            )))
        }
    }
}

/// Reads a whole message with `read`: bytes left over are malformed too.
fn read_whole<T>(
    bytes: &[u8],
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, Malformed>,
) -> Result<T, Malformed> {
    let mut r = Reader { bytes };
    let value = read(&mut r)?;
    r.end()?;
    Ok(value)
}

impl Request {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Request::Hello {
                protocol,
                location,
                settings,
                group,
            } => {
                w.u8(HELLO).u32(*protocol).text(location).text(group);
                w.u32(settings.len() as u32);
                for (name, value) in settings {
                    w.text(name).text(value);
                }
            }
            Request::Next {
                epoch,
                batch,
                sample,
            } => {
                w.u8(NEXT).u64(*epoch).u64(*batch).u64(*sample);
            }
            Request::Release { ticket } => {
                w.u8(RELEASE).u64(*ticket);
            }
        }
        w.0
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Request, Malformed> {
        read_whole(bytes, Self::read)
    }

    fn read(r: &mut Reader<'_>) -> Result<Request, Malformed> {
        Ok(match r.u8("the tag")? {
            HELLO => {
                let protocol = r.u32("the protocol")?;
                let location = r.text("the location")?;
                let group = r.text("the group")?;
                let n = r.count("the settings", MAX_SETTINGS)?;
                let mut settings = Vec::with_capacity(n);
                for _ in 0..n {
                    settings.push((r.text("a setting's name")?, r.text("a setting's value")?));
                }
                Request::Hello {
                    protocol,
                    location,
                    settings,
                    group,
                }
            }
            NEXT => Request::Next {
                epoch: r.u64("the epoch")?,
                batch: r.u64("the batch")?,
                sample: r.u64("the sample")?,
            },
            RELEASE => Request::Release {
                ticket: r.u64("the ticket")?,
            },
            tag => return Err(Malformed(format!("unknown request {tag}"))),
        })
    }
}

impl Reply {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Reply::Welcome(a) => {
                w.u8(WELCOME).text(&a.group).u32(a.members);
                w.u64(a.batches_per_epoch).u64(a.dataset_len);
                w.u32(a.sample_shape.len() as u32);
                for d in &a.sample_shape {
                    w.u64(*d as u64);
                }
                w.text(&a.dtype);
                // Only as many class names as fit a message; the rest are left out.
                let mut budget = crate::socket::MAX_MESSAGE / 2;
                let kept: Vec<&String> = a
                    .classes
                    .iter()
                    .take_while(|c| {
                        budget = budget.saturating_sub(c.len() + 4);
                        budget > 0
                    })
                    .collect();
                w.u32(kept.len() as u32);
                for c in kept {
                    w.text(c);
                }
            }
            Reply::Batch(h) => {
                w.u8(BATCH).u64(h.ticket).u64(h.buffer).u64(h.buffer_len);
                w.u64(h.data_len)
                    .u64(h.index)
                    .u64(h.epoch)
                    .u64(h.batch)
                    .u64(h.sample);
                let g = &h.group;
                w.u32(g.members as u32).u64(g.produced).u64(g.delivered);
                w.u64(g.detached).u64(g.ahead);
                w.u8(u8::from(h.shared)).u32(h.labels.len() as u32);
                for l in &h.labels {
                    w.u64(*l as u64);
                }
                for id in &h.ids {
                    w.u64(*id);
                }
            }
            Reply::End { epoch } => {
                w.u8(END).u64(*epoch);
            }
            Reply::Failed(failure) => {
                w.u8(FAILED).text(&failure.message);
                match &failure.sample {
                    None => {
                        w.u8(0);
                    }
                    Some(f) => {
                        w.u8(1).u64(f.sample_id).text(&f.location);
                        w.text(&f.cause).text(&f.detail);
                    }
                }
            }
        }
        w.0
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Reply, Malformed> {
        read_whole(bytes, Self::read)
    }

    fn read(r: &mut Reader<'_>) -> Result<Reply, Malformed> {
        Ok(match r.u8("the tag")? {
            WELCOME => {
                let group = r.text("the group")?;
                let members = r.u32("the members")?;
                let batches_per_epoch = r.u64("the batches per epoch")?;
                let dataset_len = r.u64("the dataset's length")?;
                let dims = r.count("the shape", 8)?;
                let sample_shape = (0..dims)
                    .map(|_| r.u64("a dimension").map(|d| d as usize))
                    .collect::<Result<_, _>>()?;
                let dtype = r.text("the dtype")?;
                let n = r.count("the classes", crate::socket::MAX_MESSAGE)?;
                let classes = (0..n)
                    .map(|_| r.text("a class"))
                    .collect::<Result<_, _>>()?;
                Reply::Welcome(crate::Attached {
                    group,
                    members,
                    batches_per_epoch,
                    dataset_len,
                    sample_shape,
                    dtype,
                    classes,
                })
            }
            BATCH => {
                let ticket = r.u64("the ticket")?;
                let buffer = r.u64("the buffer")?;
                let buffer_len = r.u64("the buffer's length")?;
                let data_len = r.u64("the data's length")?;
                if data_len > buffer_len {
                    return Err(Malformed(format!(
                        "{data_len} bytes of data in a buffer of {buffer_len}"
                    )));
                }
                let index = r.u64("the index")?;
                let epoch = r.u64("the epoch")?;
                let batch = r.u64("the batch")?;
                let sample = r.u64("the sample")?;
                let group = crate::GroupStats {
                    members: r.u32("the members")? as usize,
                    produced: r.u64("the batches produced")?,
                    delivered: r.u64("the batches delivered")?,
                    detached: r.u64("the members detached")?,
                    ahead: r.u64("the batches ahead")?,
                };
                let shared = r.u8("the stream")? != 0;
                let n = r.count("the labels", MAX_BATCH)?;
                let labels = (0..n)
                    .map(|_| r.u64("a label").map(|l| l as i64))
                    .collect::<Result<_, _>>()?;
                let ids = (0..n).map(|_| r.u64("an id")).collect::<Result<_, _>>()?;
                Reply::Batch(BatchHeader {
                    ticket,
                    buffer,
                    buffer_len,
                    data_len,
                    index,
                    epoch,
                    batch,
                    sample,
                    shared,
                    labels,
                    ids,
                    group,
                })
            }
            END => Reply::End {
                epoch: r.u64("the epoch")?,
            },
            FAILED => {
                let message = r.text("the message")?;
                let sample = match r.u8("the sample flag")? {
                    0 => None,
                    _ => Some(SampleFailure {
                        sample_id: r.u64("the sample's id")?,
                        location: r.text("the sample's location")?,
                        cause: r.text("the cause")?,
                        detail: r.text("the detail")?,
                    }),
                };
                Reply::Failed(Failure { message, sample })
            }
            tag => return Err(Malformed(format!("unknown reply {tag}"))),
        })
    }
}

/// Reads `data` as the agent reads a job's message (a hello's settings applied to a
/// loader's configuration, as the agent does before opening anything) and as a job reads
/// the agent's: what fuzzers run, so that no byte sequence on the socket panics or
/// allocates beyond the limits.
#[doc(hidden)]
pub fn parse_for_fuzzing(data: &[u8]) {
    if let Ok(Request::Hello {
        location, settings, ..
    }) = Request::decode(data)
    {
        let mut builder = nostall::pipeline::LoaderBuilder::new(location);
        for (name, value) in &settings {
            if builder.set(name, value).is_err() {
                return;
            }
        }
        let _ = builder.config();
    }
    let _ = Reply::decode(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_read_back_as_written() {
        let requests = [
            Request::Hello {
                protocol: PROTOCOL,
                location: "/data/train".into(),
                settings: vec![("batch_size".into(), "64".into())],
                group: "search".into(),
            },
            Request::Next {
                epoch: 3,
                batch: 7,
                sample: 448,
            },
            Request::Release { ticket: 9 },
        ];
        for r in requests {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let replies = [
            Reply::Welcome(crate::Attached {
                group: "g".into(),
                members: 2,
                batches_per_epoch: 10,
                dataset_len: 640,
                sample_shape: vec![3, 224, 224],
                dtype: "float32".into(),
                classes: vec!["cat".into(), "dog".into()],
            }),
            Reply::Batch(BatchHeader {
                ticket: 1,
                buffer: 2,
                buffer_len: 4096,
                data_len: 1024,
                index: 0,
                epoch: 0,
                batch: 1,
                sample: 2,
                shared: true,
                labels: vec![-1, 4],
                ids: vec![10, 11],
                group: crate::GroupStats {
                    members: 3,
                    produced: 9,
                    delivered: 20,
                    detached: 1,
                    ahead: 2,
                },
            }),
            Reply::End { epoch: 4 },
            Reply::Failed(Failure::text("no")),
            Reply::Failed(Failure {
                message: "bad".into(),
                sample: Some(SampleFailure {
                    sample_id: 3,
                    location: "/d/a.jpg".into(),
                    cause: "corrupt".into(),
                    detail: "not a JPEG".into(),
                }),
            }),
        ];
        for r in replies {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn every_cut_and_every_flipped_tag_is_an_error_not_a_panic() {
        let hello = Request::Hello {
            protocol: PROTOCOL,
            location: "/d".into(),
            settings: vec![("seed".into(), "1".into()); 3],
            group: String::new(),
        }
        .encode();
        for cut in 0..hello.len() {
            assert!(Request::decode(&hello[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = hello.clone();
        long.push(0);
        assert!(Request::decode(&long).is_err());
        for tag in 0..=255u8 {
            let mut m = hello.clone();
            m[0] = tag;
            let _ = Request::decode(&m);
            let _ = Reply::decode(&m);
        }
        // A length field claiming far more than the message holds.
        let mut huge = vec![HELLO];
        huge.extend_from_slice(&PROTOCOL.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        let err = Request::decode(&huge).unwrap_err();
        assert!(err.0.contains("more than"), "{err}");
    }
}
