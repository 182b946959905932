//! The framing between a trainer's client and a preparer, inside TLS 1.3 (the job's
//! identity: `nostall_peer::auth`). Integers are big-endian.
//!
//! ```text
//! client → server   "NSRP" | version u8
//! server → client   frame WELCOME: its loader's description (name, value) pairs
//! then, repeated:
//! client → server   frame PART: tag u64 | first u64 | count u64 | the run's state
//! server → client   frame BATCH: tag | header | skips | data length u64, then the data
//!                   (as the batch holds it, or each sample coded: `coding`)
//!                   ... one per batch of the part, then
//!                   frame END: tag | skips          (the part is done)
//!                or frame FAILED: tag | why        (the part stops there)
//! frame:            length u32 | kind u8 | body     (length counts kind and body)
//! ```
//!
//! Every length is checked against a bound before anything is allocated for it, and a
//! batch's data length against what the receiving loader's batch holds, so that bytes
//! from the network never size an allocation. A frame that does not parse ends the
//! connection: the stream can no longer be trusted to be in step.

use std::io::{self, Read, Write};

use nostall::loader::{BatchHeader, Checkpoint, RunIdentity};
use nostall::plan::elastic::Stretch;
use nostall::{Cause, Position};

/// The first bytes a client sends.
const MAGIC: &[u8; 4] = b"NSRP";
/// The protocol version; a server refuses any other. (2: float32 samples coded as
/// their bytes where the pipeline allows; 3: made unconverted also where operators run
/// after the conversion, which the trainer then runs.)
const VERSION: u8 = 3;

/// The largest frame body read: a batch's header is 16 bytes a sample plus its mixed
/// labels and skips, far below this for any batch a loader accepts.
pub(crate) const MAX_FRAME: u32 = 64 << 20;
/// The most skips one frame reports (a batch skips at most a few of its own samples; a
/// part's end reports those of its tail).
const MAX_SKIPS: usize = 1 << 16;
/// The most bytes of one string (a location, a cause's words).
const MAX_TEXT: usize = 64 << 10;
/// The most stretches a run's state carries (`nostall`'s own bound).
const MAX_STRETCHES: usize = 1 << 12;

const WELCOME: u8 = 1;
const PART: u8 = 2;
const BATCH: u8 = 3;
const END: u8 = 4;
const FAILED: u8 = 5;

pub(crate) fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// A skipped sample as a preparer reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skip {
    pub(crate) id: u64,
    pub(crate) location: String,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl Skip {
    pub(crate) fn of(error: &nostall::SampleError) -> Skip {
        Skip {
            id: error.id,
            location: error.location.clone(),
            kind: error.cause.kind(),
            message: error.cause.to_string(),
        }
    }

    /// The samples `batches` skipped since `reported` of them were told.
    pub(crate) fn since(batches: &nostall::Epoch, reported: &mut usize) -> Vec<Skip> {
        let skipped = batches.skipped();
        let new = skipped[(*reported).min(skipped.len())..]
            .iter()
            .map(Skip::of)
            .collect();
        *reported = skipped.len();
        new
    }

    pub(crate) fn into_error(self) -> nostall::SampleError {
        nostall::SampleError {
            id: self.id,
            location: self.location,
            cause: Cause::Reported {
                kind: self.kind,
                message: self.message,
            },
        }
    }
}

/// Why a part stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A sample failed under the error policy: the run stops there, as a local one does.
    Sample(Skip),
    /// The preparer cannot make this run (another dataset or settings): the user's to fix.
    Config(String),
    /// Anything else (a storage error, a bug): another preparer may do better.
    Other(String),
}

/// A part of a run asked of a preparer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    pub(crate) tag: u64,
    pub(crate) first: u64,
    pub(crate) count: u64,
    pub(crate) run: Checkpoint,
}

/// A frame a preparer sends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// A batch's header; its data (`data` bytes) follows the frame.
    Batch {
        tag: u64,
        header: BatchHeader,
        skips: Vec<Skip>,
        data: u64,
    },
    End {
        tag: u64,
        skips: Vec<Skip>,
    },
    Failed {
        tag: u64,
        failure: Failure,
    },
}

pub(crate) fn write_hello(w: &mut impl Write) -> io::Result<()> {
    let mut hello = MAGIC.to_vec();
    hello.push(VERSION);
    w.write_all(&hello)?;
    w.flush()
}

pub(crate) fn read_hello(r: &mut impl Read) -> io::Result<()> {
    let mut hello = [0u8; 5];
    r.read_exact(&mut hello)?;
    if &hello[..4] != MAGIC {
        return Err(invalid("not a nostall remote-prep client"));
    }
    if hello[4] != VERSION {
        return Err(invalid(format!(
            "protocol version {} (this preparer speaks {VERSION}): run the same nostall on \
             both ends",
            hello[4]
        )));
    }
    Ok(())
}

/// Writes one frame of `kind` with `body`.
fn write_frame(w: &mut impl Write, kind: u8, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len() + 1)
        .ok()
        .filter(|&len| len <= MAX_FRAME)
        .ok_or_else(|| invalid("frame over the limit"))?;
    let mut head = len.to_be_bytes().to_vec();
    head.push(kind);
    w.write_all(&head)?;
    w.write_all(body)
}

/// Reads one frame: its kind and body.
fn read_frame(r: &mut impl Read) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if len == 0 || len > MAX_FRAME {
        return Err(invalid(format!("a frame of {len} bytes")));
    }
    let mut body = Vec::new();
    r.take(u64::from(len - 1)).read_to_end(&mut body)?;
    if body.len() as u64 != u64::from(len - 1) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok((head[4], body))
}

pub(crate) fn write_welcome(w: &mut impl Write, description: &[(String, u64)]) -> io::Result<()> {
    let mut out = Out::default();
    out.u32(description.len() as u32);
    for (name, value) in description {
        out.text(name);
        out.u64(*value);
    }
    write_frame(w, WELCOME, &out.0)?;
    w.flush()
}

pub(crate) fn read_welcome(r: &mut impl Read) -> io::Result<Vec<(String, u64)>> {
    let (kind, body) = read_frame(r)?;
    if kind != WELCOME {
        return Err(invalid(format!("frame {kind} where a welcome was due")));
    }
    let mut at = In::new(&body);
    let n = at.count(64)?;
    let mut description = Vec::with_capacity(n);
    for _ in 0..n {
        description.push((at.text()?, at.u64()?));
    }
    at.end()?;
    Ok(description)
}

pub(crate) fn write_part(w: &mut impl Write, part: &Part) -> io::Result<()> {
    let mut out = Out::default();
    out.u64(part.tag);
    out.u64(part.first);
    out.u64(part.count);
    let run = &part.run;
    out.position(run.position);
    for (_, value) in run.identity.fields() {
        out.u64(value);
    }
    out.u64(run.rank);
    out.u32(run.history.len() as u32);
    for stretch in &run.history {
        out.u64(stretch.world);
        out.u64(stretch.batches);
        match &stretch.consumed {
            None => out.u8(0),
            Some(counts) => {
                out.u8(1);
                out.u32(counts.len() as u32);
                counts.iter().for_each(|&c| out.u64(c));
            }
        }
    }
    write_frame(w, PART, &out.0)?;
    w.flush()
}

/// The next part asked for; `None` when the client closed the connection cleanly.
pub(crate) fn read_part(r: &mut impl Read) -> io::Result<Option<Part>> {
    let (kind, body) = match read_frame(r) {
        Ok(frame) => frame,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if kind != PART {
        return Err(invalid(format!("frame {kind} where a part was due")));
    }
    let mut at = In::new(&body);
    let (tag, first, count) = (at.u64()?, at.u64()?, at.u64()?);
    let position = at.position()?;
    let mut values = [0u64; 9];
    for value in &mut values {
        *value = at.u64()?;
    }
    let names = RunIdentity::FIELDS;
    let identity =
        RunIdentity::from_fields(|name| names.iter().position(|&n| n == name).map(|i| values[i]))
            .map_err(|e| invalid(e.to_string()))?;
    let rank = at.u64()?;
    let stretches = at.count(MAX_STRETCHES)?;
    let mut history = Vec::with_capacity(stretches);
    for _ in 0..stretches {
        let (world, batches) = (at.u64()?, at.u64()?);
        let consumed = match at.u8()? {
            0 => None,
            1 => {
                // Bounded by the frame: eight bytes each.
                let n = at.count(body.len() / 8)?;
                let mut counts = Vec::with_capacity(n);
                for _ in 0..n {
                    counts.push(at.u64()?);
                }
                Some(counts)
            }
            other => return Err(invalid(format!("a stretch marked {other}"))),
        };
        history.push(Stretch {
            world,
            batches,
            consumed,
        });
    }
    at.end()?;
    Ok(Some(Part {
        tag,
        first,
        count,
        run: Checkpoint {
            position,
            identity,
            skipped: Default::default(),
            rank,
            history,
        },
    }))
}

/// Writes a batch's frame and then its `data`.
pub(crate) fn write_batch(
    w: &mut impl Write,
    tag: u64,
    header: &BatchHeader,
    skips: &[Skip],
    data: &[u8],
) -> io::Result<()> {
    let mut out = Out::default();
    out.u64(tag);
    out.u64(header.index);
    out.position(header.position);
    out.u32(header.labels.len() as u32);
    header.labels.iter().for_each(|&l| out.u64(l as u64));
    header.ids.iter().for_each(|&id| out.u64(id));
    match &header.soft_labels {
        None => out.u8(0),
        Some(soft) => {
            out.u8(1);
            out.u32(soft.len() as u32);
            soft.iter().for_each(|&v| out.u32(v.to_bits()));
        }
    }
    out.skips(skips);
    out.u64(data.len() as u64);
    write_frame(w, BATCH, &out.0)?;
    w.write_all(data)?;
    w.flush()
}

pub(crate) fn write_end(w: &mut impl Write, tag: u64, skips: &[Skip]) -> io::Result<()> {
    let mut out = Out::default();
    out.u64(tag);
    out.skips(skips);
    write_frame(w, END, &out.0)?;
    w.flush()
}

pub(crate) fn write_failed(w: &mut impl Write, tag: u64, failure: &Failure) -> io::Result<()> {
    let mut out = Out::default();
    out.u64(tag);
    match failure {
        Failure::Sample(skip) => {
            out.u8(0);
            out.skips(std::slice::from_ref(skip));
        }
        Failure::Config(message) => {
            out.u8(1);
            out.text(message);
        }
        Failure::Other(message) => {
            out.u8(2);
            out.text(message);
        }
    }
    write_frame(w, FAILED, &out.0)?;
    w.flush()
}

/// Reads the next frame from a preparer. After a [`Reply::Batch`], the caller reads
/// exactly `data` bytes of data before the next frame.
pub(crate) fn read_reply(r: &mut impl Read) -> io::Result<Reply> {
    let (kind, body) = read_frame(r)?;
    let mut at = In::new(&body);
    let tag = at.u64()?;
    let reply = match kind {
        BATCH => {
            let index = at.u64()?;
            let position = at.position()?;
            // Bounded by the frame: sixteen bytes a sample.
            let n = at.count(body.len() / 16)?;
            let mut labels = Vec::with_capacity(n);
            for _ in 0..n {
                labels.push(at.u64()? as i64);
            }
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(at.u64()?);
            }
            let soft_labels = match at.u8()? {
                0 => None,
                1 => {
                    let m = at.count(body.len() / 4)?;
                    let mut soft = Vec::with_capacity(m);
                    for _ in 0..m {
                        soft.push(f32::from_bits(at.u32()?));
                    }
                    Some(soft)
                }
                other => return Err(invalid(format!("mixed labels marked {other}"))),
            };
            let skips = at.skips()?;
            let data = at.u64()?;
            Reply::Batch {
                tag,
                header: BatchHeader {
                    index,
                    position,
                    labels,
                    soft_labels,
                    ids,
                },
                skips,
                data,
            }
        }
        END => Reply::End {
            tag,
            skips: at.skips()?,
        },
        FAILED => {
            let failure = match at.u8()? {
                0 => {
                    let mut skips = at.skips()?;
                    if skips.len() != 1 {
                        return Err(invalid("a failed sample frame without one sample"));
                    }
                    Failure::Sample(skips.remove(0))
                }
                1 => Failure::Config(at.text()?),
                2 => Failure::Other(at.text()?),
                other => return Err(invalid(format!("a failure marked {other}"))),
            };
            Reply::Failed { tag, failure }
        }
        other => return Err(invalid(format!("frame {other} where a reply was due"))),
    };
    at.end()?;
    Ok(reply)
}

/// A frame body being written.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn text(&mut self, s: &str) {
        // Cut at a character boundary within the bound: words, not data.
        let mut end = s.len().min(MAX_TEXT);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u32(end as u32);
        self.0.extend_from_slice(&s.as_bytes()[..end]);
    }
    fn position(&mut self, p: Position) {
        self.u64(p.epoch);
        self.u64(p.batch);
        self.u64(p.sample);
    }
    fn skips(&mut self, skips: &[Skip]) {
        let skips = &skips[..skips.len().min(MAX_SKIPS)];
        self.u32(skips.len() as u32);
        for skip in skips {
            self.u64(skip.id);
            self.text(&skip.location);
            self.text(skip.kind);
            self.text(&skip.message);
        }
    }
}

/// A frame body being read: every read checked against what is left.
struct In<'a> {
    rest: &'a [u8],
}

impl<'a> In<'a> {
    fn new(body: &'a [u8]) -> In<'a> {
        In { rest: body }
    }
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(invalid("a frame shorter than its contents say"));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// A count, refused above `max`.
    fn count(&mut self, max: usize) -> io::Result<usize> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(invalid(format!("a count of {n}, over {max}")));
        }
        Ok(n)
    }
    fn text(&mut self) -> io::Result<String> {
        let n = self.count(MAX_TEXT)?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| invalid("text that is not UTF-8"))
    }
    fn position(&mut self) -> io::Result<Position> {
        Ok(Position {
            epoch: self.u64()?,
            batch: self.u64()?,
            sample: self.u64()?,
        })
    }
    fn skips(&mut self) -> io::Result<Vec<Skip>> {
        let n = self.count(MAX_SKIPS)?;
        let mut skips = Vec::with_capacity(n.min(self.rest.len() / 20));
        for _ in 0..n {
            let id = self.u64()?;
            let location = self.text()?;
            let kind = self.text()?;
            let kind = Cause::kind_named(&kind)
                .ok_or_else(|| invalid(format!("a skip of unknown kind {kind:?}")))?;
            skips.push(Skip {
                id,
                location,
                kind,
                message: self.text()?,
            });
        }
        Ok(skips)
    }
    fn end(&self) -> io::Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(invalid("a frame longer than its contents"))
        }
    }
}

/// Parses `data` as a stream of replies, for fuzzing: must never panic or allocate
/// beyond the frame bounds.
#[doc(hidden)]
pub fn parse_for_fuzzing(data: &[u8]) {
    let mut r = data;
    while let Ok(reply) = read_reply(&mut r) {
        if let Reply::Batch { data, .. } = reply {
            let n = usize::try_from(data).unwrap_or(usize::MAX).min(r.len());
            crate::coding::decode_for_fuzzing(&r[..n]);
            r = &r[n..];
        }
    }
    let _ = read_part(&mut &data[..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Checkpoint {
        Checkpoint {
            position: Position {
                epoch: 3,
                batch: 2,
                sample: 9,
            },
            identity: RunIdentity::from_fields(|_| Some(7)).unwrap(),
            skipped: Default::default(),
            rank: 1,
            history: vec![Stretch {
                world: 4,
                batches: 1,
                consumed: Some(vec![3, 4, 4, 4]),
            }],
        }
    }

    /// The `remote_wire` fuzz target's seeds: a part asked for, and replies as a
    /// preparer sends them (a batch of samples coded from their bytes, one with a run of
    /// values the tables do not give, one sent unconverted; an end; failures).
    fn fuzz_seeds() -> Vec<(&'static str, Vec<u8>)> {
        let values = crate::coding::imagenet(Some(4));
        let header = |samples: usize| BatchHeader {
            index: 0,
            position: Position {
                epoch: 1,
                batch: 1,
                sample: samples as u64,
            },
            labels: (0..samples as i64).collect(),
            soft_labels: None,
            ids: (0..samples as u64).map(|i| 10 + i).collect(),
        };
        // 12 elements a sample, the fuzz entry's sample: each a value of a table byte,
        // and one sample with two values no byte gives.
        let of_bytes = |bytes: [u8; 12]| -> Vec<u8> {
            (0..12)
                .flat_map(|i| values.table(i / 4)[usize::from(bytes[i])].to_ne_bytes())
                .collect()
        };
        let mut coded = Vec::new();
        crate::coding::encode(&values, &of_bytes([7; 12]), &mut coded);
        let mut noisy = of_bytes([200; 12]);
        noisy[8..16].copy_from_slice(&[0x3f, 0x80, 0, 0, 0x40, 0, 0, 0]);
        crate::coding::encode(&values, &noisy, &mut coded);
        let mut unconverted = Vec::new();
        crate::coding::unconverted_code(&[1; 12], &mut unconverted);
        let skip = Skip {
            id: 3,
            location: "photos/b.jpg".into(),
            kind: "corrupt",
            message: "cannot decode".into(),
        };
        let mut batch = Vec::new();
        write_batch(
            &mut batch,
            2,
            &header(2),
            std::slice::from_ref(&skip),
            &coded,
        )
        .unwrap();
        write_batch(&mut batch, 2, &header(1), &[], &unconverted).unwrap();
        write_end(&mut batch, 2, &[]).unwrap();
        let mut failed = Vec::new();
        write_failed(&mut failed, 4, &Failure::Sample(skip)).unwrap();
        write_failed(&mut failed, 5, &Failure::Other("the loader stopped".into())).unwrap();
        let mut part = Vec::new();
        let asked = Part {
            tag: 2,
            first: 4,
            count: 4,
            run: run(),
        };
        write_part(&mut part, &asked).unwrap();
        vec![
            ("batch.bin", batch),
            ("failed.bin", failed),
            ("part.bin", part),
        ]
    }

    /// The seeds in `fuzz/corpus/remote_wire` are this protocol's: when it changes, run
    /// this test with `NOSTALL_WRITE_FUZZ_SEEDS=1` to write them again (fuzzing from
    /// bytes every parser refuses at once finds nothing).
    #[test]
    fn the_fuzz_corpus_seeds_are_this_protocols_frames() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/remote_wire");
        for (name, bytes) in fuzz_seeds() {
            if std::env::var_os("NOSTALL_WRITE_FUZZ_SEEDS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(name), &bytes).unwrap();
            }
            let kept = std::fs::read(dir.join(name)).unwrap();
            assert_eq!(kept, bytes, "{name}: write the seeds again");
        }
        // What each holds reads back.
        let seeds = fuzz_seeds();
        let mut r = &seeds[0].1[..];
        for _ in 0..2 {
            let Reply::Batch { data, .. } = read_reply(&mut r).unwrap() else {
                panic!("a batch first");
            };
            let (mut code, rest) = r.split_at(data as usize);
            let values = crate::coding::imagenet(Some(4));
            while !code.is_empty() {
                let mut slot = [0; 48];
                crate::coding::decode(&values, &mut code, &mut slot).unwrap();
            }
            r = rest;
        }
        assert!(matches!(read_reply(&mut r), Ok(Reply::End { .. })));
        assert!(matches!(
            read_reply(&mut &seeds[1].1[..]),
            Ok(Reply::Failed { .. })
        ));
        assert!(read_part(&mut &seeds[2].1[..]).unwrap().is_some());
    }

    #[test]
    fn every_frame_round_trips() {
        let part = Part {
            tag: 11,
            first: 4,
            count: 4,
            run: run(),
        };
        let mut wire = Vec::new();
        write_part(&mut wire, &part).unwrap();
        assert_eq!(read_part(&mut &wire[..]).unwrap(), Some(part));
        let header = BatchHeader {
            index: 5,
            position: Position {
                epoch: 3,
                batch: 6,
                sample: 30,
            },
            labels: vec![1, -1],
            soft_labels: Some(vec![0.25, 0.75, 1.0, 0.0]),
            ids: vec![8, 9],
        };
        let skip = Skip {
            id: 4,
            location: "photos/a.jpg".into(),
            kind: "corrupt",
            message: "cannot decode: ü".into(),
        };
        let mut wire = Vec::new();
        write_batch(&mut wire, 11, &header, std::slice::from_ref(&skip), b"abcd").unwrap();
        write_end(&mut wire, 11, &[]).unwrap();
        write_failed(&mut wire, 12, &Failure::Sample(skip.clone())).unwrap();
        write_failed(&mut wire, 13, &Failure::Config("no".into())).unwrap();
        let mut r = &wire[..];
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Batch {
                tag: 11,
                header,
                skips: vec![skip.clone()],
                data: 4
            }
        );
        let mut data = [0u8; 4];
        r.read_exact(&mut data).unwrap();
        assert_eq!(&data, b"abcd");
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::End {
                tag: 11,
                skips: vec![]
            }
        );
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Failed {
                tag: 12,
                failure: Failure::Sample(skip)
            }
        );
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Failed {
                tag: 13,
                failure: Failure::Config("no".into())
            }
        );
        let mut wire = Vec::new();
        write_welcome(&mut wire, &[("seed".into(), 5)]).unwrap();
        assert_eq!(
            read_welcome(&mut &wire[..]).unwrap(),
            vec![("seed".into(), 5)]
        );
    }

    #[test]
    fn frames_that_lie_about_their_sizes_are_refused_without_allocating() {
        // A frame declaring 4 GiB, a count past its frame, a kind no one sends.
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.push(BATCH);
        assert!(read_reply(&mut &huge[..]).is_err());
        let mut body = Out::default();
        body.u64(1);
        body.u64(2);
        body.position(Position::start_of(0));
        body.u32(1 << 30);
        let mut wire = Vec::new();
        write_frame(&mut wire, BATCH, &body.0).unwrap();
        let err = read_reply(&mut &wire[..]).unwrap_err().to_string();
        assert!(err.contains("count"), "{err}");
        let mut wire = Vec::new();
        write_frame(&mut wire, 99, &[0; 8]).unwrap();
        assert!(read_reply(&mut &wire[..]).is_err());
        // Every prefix of a good stream fails cleanly.
        let mut good = Vec::new();
        write_part(
            &mut good,
            &Part {
                tag: 1,
                first: 0,
                count: 1,
                run: run(),
            },
        )
        .unwrap();
        for cut in 0..good.len() {
            parse_for_fuzzing(&good[..cut]);
            assert!(
                !matches!(read_part(&mut &good[..cut]), Ok(Some(_))),
                "cut at {cut}"
            );
        }
    }
}
