//! Decoding the frames a clip wants, and every frame for reference.

use std::os::raw::c_int;

use crate::ffi::{self, Decoder, Demuxer, FrameInfo, PacketInfo, Received, Scalers};
use crate::index::FrameIndex;
use crate::{Limits, VideoError};

/// One decoded frame: RGB24, interleaved, rows tightly packed (`width * 3` bytes a row),
/// at the video's own size. Borrowed from the decoder for the call of the sink.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Frame<'a> {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub rgb: &'a [u8],
}

/// What one [`ClipDecoder::decode`] cost, for benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeStats {
    /// Packets sent to the decoder.
    pub packets_decoded: u64,
    /// Of those, frames nobody wanted that the decoder dropped without decoding
    /// (non-reference frames).
    pub frames_skipped: u64,
    /// Seeks made (including restarts from the first packet).
    pub seeks: u32,
}

/// One thread's decoder, reused across videos: it keeps only buffers and RGB converters
/// from one call to the next (each video gets a new FFmpeg decoder, so no state of one
/// video can change the frames of another).
pub struct ClipDecoder {
    limits: Limits,
    scalers: Scalers,
    rgb: Vec<u8>,
}

/// A distinct wanted frame.
struct Target {
    frame: usize,
    /// Its decode index.
    decode: usize,
    /// Decode index of the packet to start from.
    start: usize,
    /// Times its start was moved earlier because it was not produced.
    retries: u8,
    done: bool,
}

/// How many times a frame's start moves one key frame earlier before decoding restarts
/// from the first packet.
const EARLIER_KEYS: u8 = 2;

/// Something that should not happen if the demuxer and decoder behave as the index
/// expects: a reason to restart from the first packet (or to fail if already there).
struct Anomaly(String);

/// An error, or an anomaly that a restart from the first packet may cure.
enum Stop {
    Fail(VideoError),
    Anomaly(Anomaly),
}

impl From<VideoError> for Stop {
    fn from(e: VideoError) -> Stop {
        Stop::Fail(e)
    }
}

/// The demuxer and decoder of one pass over a video, and where they are.
struct Pass<'a> {
    demux: Demuxer<'a>,
    dec: Decoder,
    /// Decode index of the next packet `read` returns.
    next: usize,
    /// A packet read while checking a seek, to be decoded first.
    peeked: Option<PacketInfo>,
    /// Whether packets were sent since the last flush.
    sent: bool,
    /// Whether this pass started at the first packet without seeking.
    from_start: bool,
    /// Decode index of the key frame the last seek was for: a demuxer may land before
    /// it, and the packets up to it are then needed to reach it.
    lead_in: usize,
}

impl<'a> Pass<'a> {
    /// Opens the video and checks that `index` describes it.
    fn open(data: &'a [u8], index: &FrameIndex, limits: &Limits) -> Result<Pass<'a>, VideoError> {
        let demux = Demuxer::open(data)?;
        let info = demux.info();
        if info.codec != index.codec()
            || (info.width, info.height) != (index.width(), index.height())
            || info.time_base != index.time_base()
        {
            return Err(VideoError::Corrupt(
                "the frame index was made from another video".into(),
            ));
        }
        let dec = Decoder::new(&demux, limits.max_pixels)?;
        Ok(Pass {
            demux,
            dec,
            next: 0,
            peeked: None,
            sent: false,
            from_start: true,
            lead_in: 0,
        })
    }

    /// The next packet of the video stream that carries a frame.
    fn read(&mut self) -> Result<Option<PacketInfo>, VideoError> {
        if let Some(p) = self.peeked.take() {
            return Ok(Some(p));
        }
        loop {
            match self.demux.read() {
                Ok(Some(p)) if p.size == 0 => continue,
                Ok(p) => return Ok(p),
                Err(code) => {
                    return Err(VideoError::Corrupt(format!(
                        "demuxing failed at packet {} (decode order) ({})",
                        self.next,
                        ffi::error_text(code)
                    )))
                }
            }
        }
    }

    /// Positions the demuxer on the key frame at decode index `start` or an earlier one,
    /// checked by reading the packet it lands on. False if no seek lands acceptably.
    fn seek(&mut self, index: &FrameIndex, start: usize, stats: &mut DecodeStats) -> bool {
        let mut k = start;
        for _ in 0..=EARLIER_KEYS {
            let e = *index.entry(k);
            let mut tried = None;
            for ts in [e.pts, e.dts] {
                if ts == ffi::NO_TS || tried == Some(ts) {
                    continue;
                }
                tried = Some(ts);
                if !self.demux.seek(ts) {
                    continue;
                }
                stats.seeks += 1;
                self.peeked = None;
                let Ok(Some(p)) = self.read() else { continue };
                // The landing packet, searched back from the one expected: a demuxer may
                // land on an earlier key frame, which is as good (only slower).
                let landed = (0..=k).rev().find(|&m| index.entry(m).matches(&p));
                if let Some(m) = landed.filter(|&m| index.entry(m).is_key) {
                    self.next = m;
                    self.lead_in = start;
                    self.peeked = Some(p);
                    self.from_start = false;
                    return true;
                }
            }
            if k == 0 {
                break;
            }
            k = index.key_before(k);
        }
        false
    }
}

impl ClipDecoder {
    /// A decoder that refuses videos over `limits`.
    pub fn new(limits: Limits) -> ClipDecoder {
        ClipDecoder {
            limits,
            scalers: Scalers::new(),
            rgb: Vec::new(),
        }
    }

    /// Decodes the frames `wanted` (presentation indices into `index`, in any order,
    /// repeats allowed) of the video in `data`, and hands each to `sink` once per entry
    /// of `wanted`, with that entry's position in `wanted`. Frames come in decode
    /// progress order, not in the order of `wanted`.
    ///
    /// Fails with [`VideoError::TooLarge`] before decoding if the index's frame size is
    /// over this decoder's limits, and with [`VideoError::Corrupt`] naming the frame if
    /// decoding fails, a frame is damaged or differs in size from the header, or a wanted
    /// frame is never produced (also when `index` was not made from `data`).
    ///
    /// # Panics
    /// If an entry of `wanted` is not below `index.len()`.
    pub fn decode(
        &mut self,
        data: &[u8],
        index: &FrameIndex,
        wanted: &[u32],
        sink: &mut dyn FnMut(usize, Frame<'_>),
    ) -> Result<DecodeStats, VideoError> {
        self.limits.check_size(index.width(), index.height())?;
        let mut slots: Vec<(usize, usize)> = wanted
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                assert!((f as usize) < index.len(), "frame {f} is not in the index");
                (f as usize, i)
            })
            .collect();
        slots.sort_unstable();
        let mut targets: Vec<Target> = Vec::new();
        for &(frame, _) in &slots {
            if targets.last().is_some_and(|t| t.frame == frame) {
                continue;
            }
            targets.push(Target {
                frame,
                decode: index.decode_index(frame),
                start: index.start_for(frame),
                retries: 0,
                done: false,
            });
        }
        let mut stats = DecodeStats::default();
        if targets.is_empty() {
            return Ok(stats);
        }
        let mut job = Job {
            index,
            targets: &mut targets,
            slots: &slots,
            sink,
            scalers: &mut self.scalers,
            rgb: &mut self.rgb,
            skip_sent: 0,
            unwanted_out: 0,
        };
        let mut pass = Pass::open(data, index, &self.limits)?;
        let mut restarted = false;
        loop {
            match job.run(&mut pass, data, &self.limits, &mut stats) {
                Ok(()) => break,
                Err(Stop::Fail(e)) => return Err(e),
                // Decoding from the first packet is the last resort: it relies on
                // nothing but the decoder itself.
                Err(Stop::Anomaly(a)) if pass.from_start || restarted => {
                    return Err(VideoError::Corrupt(a.0))
                }
                Err(Stop::Anomaly(_)) => {
                    restarted = true;
                    for t in job.targets.iter_mut() {
                        t.start = 0;
                        t.retries = EARLIER_KEYS;
                    }
                    pass = Pass::open(data, index, &self.limits)?;
                    stats.seeks += 1;
                }
            }
        }
        stats.frames_skipped = job.skip_sent.saturating_sub(job.unwanted_out);
        Ok(stats)
    }
}

/// The state of one `decode` call besides the FFmpeg objects.
struct Job<'j> {
    index: &'j FrameIndex,
    targets: &'j mut Vec<Target>,
    /// (frame, position in `wanted`), sorted.
    slots: &'j [(usize, usize)],
    sink: &'j mut dyn FnMut(usize, Frame<'_>),
    scalers: &'j mut Scalers,
    rgb: &'j mut Vec<u8>,
    /// Packets sent with non-reference frames discarded.
    skip_sent: u64,
    /// Frames output that nobody wanted (decoded although sent in skip mode: references).
    unwanted_out: u64,
}

impl Job<'_> {
    /// Decodes until every target is delivered.
    fn run<'a>(
        &mut self,
        pass: &mut Pass<'a>,
        data: &'a [u8],
        limits: &Limits,
        stats: &mut DecodeStats,
    ) -> Result<(), Stop> {
        let index = self.index;
        // Each move goes to a new start or moves a start earlier (a bounded number of
        // times): more moves than that would mean a demuxer that keeps landing wrong.
        let mut moves_left = 4 * self.targets.len() + 8;
        loop {
            let n = pass.next;
            let mut pending = self.targets.iter().filter(|t| !t.done).peekable();
            if pending.peek().is_none() {
                return Ok(());
            }
            // Some wanted frame needs the packet at n: decode on.
            if n < pass.lead_in || pending.any(|t| t.start <= n && n <= t.decode) {
                self.step(pass, stats)?;
                continue;
            }
            // Nothing needs the packets from here until the next start: collect what the
            // decoder still holds, then move.
            if pass.sent {
                pass.dec.send_end().map_err(|c| decode_error(None, c))?;
                self.receive(pass)?;
                pass.dec.flush();
                pass.sent = false;
            }
            for t in self.targets.iter_mut().filter(|t| !t.done && t.decode < n) {
                // Sent but never output: its key frame was not enough (a leading
                // picture the index did not reveal, a decoder that waits for a recovery
                // point). Start one key frame earlier, then from the first packet.
                if t.start == 0 {
                    return Err(Stop::Fail(VideoError::Corrupt(format!(
                        "frame {} was never produced by the decoder",
                        t.frame
                    ))));
                }
                t.retries += 1;
                t.start = if t.retries > EARLIER_KEYS {
                    0
                } else {
                    index.key_before(t.start)
                };
            }
            // Draining may have delivered the last ones.
            let Some(start) = self
                .targets
                .iter()
                .filter(|t| !t.done)
                .map(|t| t.start)
                .min()
            else {
                return Ok(());
            };
            if start == n {
                continue;
            }
            if moves_left == 0 {
                return Err(Stop::Anomaly(Anomaly(format!(
                    "no seek reaches the key frame at packet {start}"
                ))));
            }
            moves_left -= 1;
            if start == 0 {
                *pass = Pass::open(data, index, limits)?;
                stats.seeks += 1;
            } else if !pass.seek(index, start, stats) {
                return Err(Stop::Anomaly(Anomaly(format!(
                    "seeking to the key frame at packet {start} failed"
                ))));
            }
        }
    }

    /// Reads the packet at `pass.next`, sends it and takes the frames that come out.
    fn step(&mut self, pass: &mut Pass<'_>, stats: &mut DecodeStats) -> Result<(), Stop> {
        let index = self.index;
        let n = pass.next;
        let Some(p) = pass.read()? else {
            if n < index.packets() {
                return Err(Stop::Anomaly(Anomaly(format!(
                    "the video ended at packet {n}, the index has {}",
                    index.packets()
                ))));
            }
            return Err(Stop::Fail(VideoError::Corrupt(
                "the video ended early".into(),
            )));
        };
        if n >= index.packets() || !index.entry(n).matches(&p) {
            return Err(Stop::Anomaly(Anomaly(format!(
                "packet {n} (decode order) is not the one the frame index lists"
            ))));
        }
        let frame = index.rank(n);
        let wanted = frame.is_some_and(|k| self.is_pending(k));
        pass.dec.skip_nonref(!wanted);
        if !wanted {
            self.skip_sent += 1;
        }
        let key = index.entry(n).key;
        while !pass
            .dec
            .send(&mut pass.demux, key)
            .map_err(|c| decode_error(frame, c))?
        {
            self.receive(pass)?;
        }
        stats.packets_decoded += 1;
        pass.sent = true;
        pass.next = n + 1;
        self.receive(pass)
    }

    fn is_pending(&self, frame: usize) -> bool {
        self.targets
            .binary_search_by_key(&frame, |t| t.frame)
            .is_ok_and(|i| !self.targets[i].done)
    }

    /// Takes every frame the decoder has ready and hands the wanted ones to the sink.
    fn receive(&mut self, pass: &mut Pass<'_>) -> Result<(), Stop> {
        let index = self.index;
        loop {
            let f = match pass.dec.receive() {
                Ok(Received::Frame(f)) => f,
                Ok(Received::Again | Received::End) => return Ok(()),
                Err(c) => return Err(Stop::Fail(decode_error(None, c))),
            };
            let Some(frame) = index.frame_of_key(f.pts) else {
                return Err(Stop::Anomaly(Anomaly(format!(
                    "the decoder output a frame at time {} that the index does not list",
                    f.pts
                ))));
            };
            check_frame(index, frame, &f)?;
            let Ok(i) = self.targets.binary_search_by_key(&frame, |t| t.frame) else {
                self.unwanted_out += 1;
                continue;
            };
            if self.targets[i].done {
                self.unwanted_out += 1;
                continue;
            }
            pass.dec
                .to_rgb(self.scalers, self.rgb)
                .map_err(|m| VideoError::Corrupt(format!("frame {frame}: {m}")))?;
            let first = self.slots.partition_point(|s| s.0 < frame);
            for &(_, pos) in self.slots[first..].iter().take_while(|s| s.0 == frame) {
                (self.sink)(
                    pos,
                    Frame {
                        width: f.width,
                        height: f.height,
                        rgb: self.rgb,
                    },
                );
            }
            self.targets[i].done = true;
        }
    }
}

/// Refuses a damaged frame, or one whose size is not the header's.
fn check_frame(index: &FrameIndex, frame: usize, f: &FrameInfo) -> Result<(), VideoError> {
    if f.damaged {
        return Err(VideoError::Corrupt(format!("frame {frame} is damaged")));
    }
    if (f.width, f.height) != (index.width(), index.height()) {
        return Err(VideoError::Corrupt(format!(
            "frame {frame} is {}x{}, the header says {}x{}",
            f.width,
            f.height,
            index.width(),
            index.height()
        )));
    }
    Ok(())
}

fn decode_error(frame: Option<usize>, code: c_int) -> VideoError {
    match frame {
        Some(k) => VideoError::Corrupt(format!(
            "decoding frame {k} failed ({})",
            ffi::error_text(code)
        )),
        None => VideoError::Corrupt(format!("decoding failed ({})", ffi::error_text(code))),
    }
}

/// How many frames [`decode_all`] holds back when the decoder outputs them before an
/// earlier one: never on a well-made file (its decoder order is its presentation order),
/// but it happens where a container's times contradict the stream's order (a phone's MP4
/// with pts = dts on a stream with B-frames); frames follow the container's times, and
/// the bound is the deepest reordering H.264 and HEVC allow.
const MAX_EARLY: usize = 16;

/// Decodes every frame of the video in `data` from the first packet, without seeking or
/// skipping, and hands each to `sink` in presentation order with its index: the reference
/// that [`ClipDecoder::decode`] is exact against. Returns the number of frames.
///
/// Fails as [`FrameIndex::scan`] does, and with [`VideoError::Corrupt`] naming the frame
/// if one is damaged, differs in size from the header or is not produced.
pub fn decode_all(
    data: &[u8],
    limits: &Limits,
    sink: &mut dyn FnMut(usize, Frame<'_>),
) -> Result<usize, VideoError> {
    let index = FrameIndex::scan(data, limits)?;
    let mut pass = Pass::open(data, &index, limits)?;
    let mut scalers = Scalers::new();
    let mut rgb = Vec::new();
    let mut expected = 0usize;
    // Frames that came out before an earlier one (see `MAX_EARLY`), with their numbers.
    let mut early: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut take = |pass: &mut Pass<'_>| -> Result<(), VideoError> {
        loop {
            let f = match pass.dec.receive() {
                Ok(Received::Frame(f)) => f,
                Ok(Received::Again | Received::End) => return Ok(()),
                Err(c) => return Err(decode_error(None, c)),
            };
            let k = match index.frame_of_key(f.pts) {
                Some(k) if k >= expected && !early.iter().any(|e| e.0 == k) => k,
                _ => {
                    return Err(VideoError::Corrupt(format!(
                        "the decoder output a frame at time {} twice or not at all",
                        f.pts
                    )))
                }
            };
            check_frame(&index, k, &f)?;
            pass.dec
                .to_rgb(&mut scalers, &mut rgb)
                .map_err(|m| VideoError::Corrupt(format!("frame {k}: {m}")))?;
            if k > expected {
                if early.len() == MAX_EARLY {
                    return Err(VideoError::Corrupt(format!(
                        "frame {expected} was never produced by the decoder"
                    )));
                }
                early.push((k, rgb.clone()));
                continue;
            }
            sink(
                k,
                Frame {
                    width: f.width,
                    height: f.height,
                    rgb: &rgb,
                },
            );
            expected += 1;
            while let Some(i) = early.iter().position(|e| e.0 == expected) {
                let (_, held) = early.swap_remove(i);
                sink(
                    expected,
                    Frame {
                        width: f.width,
                        height: f.height,
                        rgb: &held,
                    },
                );
                expected += 1;
            }
        }
    };
    for n in 0..index.packets() {
        let p = pass.read()?.ok_or_else(|| {
            VideoError::Corrupt(format!("the video ended at packet {n} (decode order)"))
        })?;
        if !index.entry(n).matches(&p) {
            return Err(VideoError::Corrupt(format!(
                "packet {n} (decode order) changed between two reads"
            )));
        }
        while !pass
            .dec
            .send(&mut pass.demux, index.entry(n).key)
            .map_err(|c| decode_error(index.rank(n), c))?
        {
            take(&mut pass)?;
        }
        take(&mut pass)?;
    }
    pass.dec.send_end().map_err(|c| decode_error(None, c))?;
    take(&mut pass)?;
    if expected < index.len() {
        return Err(VideoError::Corrupt(format!(
            "frame {expected} was never produced by the decoder"
        )));
    }
    Ok(expected)
}
