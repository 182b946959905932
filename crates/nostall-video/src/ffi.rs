//! Every call into FFmpeg, behind owners that free what they hold on every path.
//!
//! The rest of the crate sees plain Rust values (packet and frame descriptions, error
//! codes) and never a raw pointer. The FFmpeg objects are:
//!
//! - [`Demuxer`]: an `AVFormatContext` reading the caller's byte slice through a custom
//!   `AVIOContext` whose callbacks bound every read and seek by the slice.
//! - [`Decoder`]: an `AVCodecContext` (one thread) and the `AVFrame` it decodes into.
//! - [`Scalers`]: `SwsContext`s to RGB24, one per source size and pixel format.
//! - [`AudioDecoder`]: an `AVCodecContext` (one thread) for the audio stream, and its
//!   frames' samples converted to `f32`.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::Once;

use ffmpeg_sys_next as ff;

use crate::VideoError;

/// FFmpeg's "no timestamp".
pub(crate) const NO_TS: i64 = ff::AV_NOPTS_VALUE;

/// Size of the buffer FFmpeg reads the slice through (FFmpeg's own default).
const IO_BUFFER: usize = 32 * 1024;

/// The scaler settings of every RGB conversion: one path for `decode` and `decode_all`,
/// so that their frames are byte-equal. Plain bilinear takes swscale's SIMD YUV to RGB
/// path (the filter is moot: sizes do not change), as torchcodec's conversion does;
/// accurate rounding with chroma interpolated at full width, its most faithful
/// conversion, leaves that path and cost as much CPU as the decoding itself.
const SWS_FLAGS: c_int = ff::SWS_BILINEAR;

/// Turns FFmpeg's logging off, once per process: a loader decoding thousands of videos
/// must not write their warnings to the trainer's stderr (errors reach the caller as
/// [`VideoError`]s instead).
fn quiet() {
    static ONCE: Once = Once::new();
    // SAFETY: av_log_set_level only stores an integer; it is safe from any thread.
    ONCE.call_once(|| unsafe { ff::av_log_set_level(ff::AV_LOG_QUIET) });
}

/// FFmpeg's message for an error code.
pub(crate) fn error_text(code: c_int) -> String {
    let mut buf = [0 as std::os::raw::c_char; 128];
    // SAFETY: av_strerror writes at most buf.len() bytes, NUL-terminated, into buf.
    let ok = unsafe { ff::av_strerror(code, buf.as_mut_ptr(), buf.len()) } == 0;
    if !ok {
        return format!("error {code}");
    }
    // SAFETY: av_strerror succeeded, so buf holds a NUL-terminated string.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The position of the AVIO callbacks in the caller's slice.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

unsafe extern "C" fn read_cb(opaque: *mut c_void, buf: *mut u8, size: c_int) -> c_int {
    // SAFETY: opaque is the Box<Reader> that the Demuxer owns and keeps alive (and
    // unaliased: FFmpeg calls back only from inside the Demuxer's own calls) for as long
    // as the AVIOContext exists.
    let r = unsafe { &mut *(opaque as *mut Reader<'_>) };
    let left = &r.data[r.pos.min(r.data.len())..];
    let n = left.len().min(usize::try_from(size).unwrap_or(0));
    if n == 0 {
        return ff::AVERROR_EOF;
    }
    // SAFETY: FFmpeg hands a buffer of `size` writable bytes, and n <= size; the source
    // range lies inside the slice.
    unsafe { ptr::copy_nonoverlapping(left.as_ptr(), buf, n) };
    r.pos += n;
    n as c_int
}

unsafe extern "C" fn seek_cb(opaque: *mut c_void, offset: i64, whence: c_int) -> i64 {
    // SAFETY: as in read_cb.
    let r = unsafe { &mut *(opaque as *mut Reader<'_>) };
    let len = r.data.len() as i64;
    let target = match whence & !ff::AVSEEK_FORCE {
        ff::AVSEEK_SIZE => return len,
        libc::SEEK_SET => Some(offset),
        libc::SEEK_CUR => (r.pos as i64).checked_add(offset),
        libc::SEEK_END => len.checked_add(offset),
        _ => None,
    };
    match target {
        // Seeking past the end is allowed (as for a file); reads there return EOF.
        Some(t) if t >= 0 => {
            r.pos = usize::try_from(t).unwrap_or(usize::MAX);
            t
        }
        _ => i64::from(ff::AVERROR(libc::EINVAL)),
    }
}

/// What the demuxer says about the video stream.
pub(crate) struct StreamInfo {
    pub(crate) codec: String,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) time_base: (i32, i32),
}

/// One packet of the video stream, as the demuxer gave it (its bytes stay in the
/// [`Demuxer`] until the next read).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PacketInfo {
    pub(crate) pts: i64,
    pub(crate) dts: i64,
    pub(crate) pos: i64,
    pub(crate) duration: i64,
    pub(crate) size: usize,
    pub(crate) key: bool,
    pub(crate) corrupt: bool,
    /// To be decoded but not shown (an MP4 edit list cuts it).
    pub(crate) discard: bool,
}

/// The stream a [`Demuxer`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Media {
    Video,
    Audio,
}

/// What the demuxer says about the audio stream.
pub(crate) struct AudioInfo {
    pub(crate) codec: String,
    pub(crate) time_base: (i32, i32),
}

/// A demuxer over an in-memory file, positioned on its best video (or audio) stream.
pub(crate) struct Demuxer<'a> {
    fmt: *mut ff::AVFormatContext,
    io: *mut ff::AVIOContext,
    pkt: *mut ff::AVPacket,
    stream: c_int,
    // The AVIOContext's opaque: a leaked Box, freed in Drop after the context.
    reader: *mut Reader<'a>,
}

/// The demuxers a file may be opened with (FFmpeg's names: `mov` reads MP4, MOV and M4V;
/// `matroska` MKV and WebM). FFmpeg probes every demuxer it has, some of which spend
/// seconds on a few crafted bytes (its NSV reader, found by AFL++ on the `video` target):
/// a file in another container is refused before its demuxer reads it.
const DEMUXERS: &CStr = c"mov,matroska,avi";

impl<'a> Demuxer<'a> {
    /// Opens `data` and picks its video stream. No frame is decoded (no
    /// `avformat_find_stream_info`): the containers this crate reads declare the codec
    /// and frame size in their headers, and the demuxer's parsers run regardless.
    pub(crate) fn open(data: &'a [u8]) -> Result<Demuxer<'a>, VideoError> {
        Demuxer::open_media(data, Media::Video)
    }

    /// Opens `data` and picks the stream of `media` FFmpeg ranks best (for audio, the one
    /// related to the best video stream where several are).
    pub(crate) fn open_media(data: &'a [u8], media: Media) -> Result<Demuxer<'a>, VideoError> {
        quiet();
        let mut d = Demuxer {
            fmt: ptr::null_mut(),
            io: ptr::null_mut(),
            // SAFETY: plain allocation; null is checked below.
            pkt: unsafe { ff::av_packet_alloc() },
            stream: -1,
            reader: Box::into_raw(Box::new(Reader { data, pos: 0 })),
        };
        let oom = || VideoError::Corrupt("out of memory".into());
        if d.pkt.is_null() {
            return Err(oom());
        }
        // SAFETY: av_malloc returns a buffer of IO_BUFFER bytes or null.
        let buf = unsafe { ff::av_malloc(IO_BUFFER) } as *mut u8;
        if buf.is_null() {
            return Err(oom());
        }
        let opaque = d.reader as *mut c_void;
        // SAFETY: buf is an av_malloc'd buffer of IO_BUFFER bytes whose ownership passes
        // to the context; opaque outlives the context (both are owned by `d`, and Drop
        // frees the context first). On failure buf is still ours.
        d.io = unsafe {
            ff::avio_alloc_context(
                buf,
                IO_BUFFER as c_int,
                0,
                opaque,
                Some(read_cb),
                None,
                Some(seek_cb),
            )
        };
        if d.io.is_null() {
            // SAFETY: the context was not made, so buf is still ours to free.
            unsafe { ff::av_free(buf as *mut c_void) };
            return Err(oom());
        }
        // SAFETY: plain allocation; null is checked below.
        let mut fmt = unsafe { ff::avformat_alloc_context() };
        if fmt.is_null() {
            return Err(oom());
        }
        // SAFETY: fmt is a fresh context; we give it our AVIOContext and say it is the
        // caller's (CUSTOM_IO), so that avformat_close_input leaves it to our Drop; the
        // whitelist is an av_strdup'd string the context frees with itself (null if out
        // of memory: then no whitelist, and the open fails or reads a known format). On
        // failure avformat_open_input frees fmt and nulls the pointer.
        let ret = unsafe {
            (*fmt).pb = d.io;
            (*fmt).flags |= ff::AVFMT_FLAG_CUSTOM_IO;
            (*fmt).format_whitelist = ff::av_strdup(DEMUXERS.as_ptr());
            if (*fmt).format_whitelist.is_null() {
                ff::avformat_free_context(fmt);
                return Err(oom());
            }
            ff::avformat_open_input(&mut fmt, ptr::null(), ptr::null(), ptr::null_mut())
        };
        if ret < 0 {
            return Err(VideoError::UnknownFormat(format!(
                "not a container nostall reads (MP4/MOV, Matroska/WebM, AVI) that FFmpeg \
                 can demux ({})",
                error_text(ret)
            )));
        }
        d.fmt = fmt;
        // SAFETY: d.fmt is an open context.
        let video = unsafe {
            ff::av_find_best_stream(
                d.fmt,
                ff::AVMediaType::AVMEDIA_TYPE_VIDEO,
                -1,
                -1,
                ptr::null_mut(),
                0,
            )
        };
        if video < 0 {
            return Err(VideoError::UnknownFormat("no video stream".into()));
        }
        let stream = match media {
            Media::Video => video,
            // SAFETY: d.fmt is an open context; `video` is one of its streams.
            Media::Audio => unsafe {
                ff::av_find_best_stream(
                    d.fmt,
                    ff::AVMediaType::AVMEDIA_TYPE_AUDIO,
                    -1,
                    video,
                    ptr::null_mut(),
                    0,
                )
            },
        };
        if stream < 0 {
            return Err(VideoError::NoAudio);
        }
        d.stream = stream;
        // SAFETY: nb_streams entries of `streams` are valid streams of the open context.
        // Other streams are discarded so that the demuxer skips their packets.
        unsafe {
            for i in 0..(*d.fmt).nb_streams as usize {
                if i as c_int != stream {
                    (**(*d.fmt).streams.add(i)).discard = ff::AVDiscard::AVDISCARD_ALL;
                }
            }
        }
        Ok(d)
    }

    fn av_stream(&self) -> *mut ff::AVStream {
        // SAFETY: self.stream was returned by av_find_best_stream, so it indexes a
        // stream of the open context.
        unsafe { *(*self.fmt).streams.add(self.stream as usize) }
    }

    /// The video stream's codec, size and time base, from the container's headers.
    pub(crate) fn info(&self) -> StreamInfo {
        // SAFETY: the stream and its codecpar live as long as the context.
        unsafe {
            let st = self.av_stream();
            let par = (*st).codecpar;
            let codec = if (*par).codec_id == ff::AVCodecID::AV_CODEC_ID_NONE {
                // FFmpeg names it "none"; say what that means.
                "a codec FFmpeg does not know".to_owned()
            } else {
                let name = CStr::from_ptr(ff::avcodec_get_name((*par).codec_id));
                name.to_string_lossy().into_owned()
            };
            StreamInfo {
                codec,
                width: u32::try_from((*par).width).unwrap_or(0),
                height: u32::try_from((*par).height).unwrap_or(0),
                time_base: ((*st).time_base.num, (*st).time_base.den),
            }
        }
    }

    /// The audio stream's codec and time base, from the container's headers.
    pub(crate) fn audio_info(&self) -> AudioInfo {
        let info = self.info();
        AudioInfo {
            codec: info.codec,
            time_base: info.time_base,
        }
    }

    /// Whether this FFmpeg has a decoder for the stream's codec.
    pub(crate) fn has_decoder(&self) -> bool {
        // SAFETY: codecpar is valid for the context's life.
        unsafe { !ff::avcodec_find_decoder((*(*self.av_stream()).codecpar).codec_id).is_null() }
    }

    /// Reads the next packet of the video stream: `Ok(None)` at the end, `Err` with
    /// FFmpeg's code when the demuxer fails.
    pub(crate) fn read(&mut self) -> Result<Option<PacketInfo>, c_int> {
        loop {
            // SAFETY: pkt is an allocated packet; unref before reuse frees its data.
            let ret = unsafe {
                ff::av_packet_unref(self.pkt);
                ff::av_read_frame(self.fmt, self.pkt)
            };
            if ret == ff::AVERROR_EOF {
                return Ok(None);
            }
            if ret < 0 {
                return Err(ret);
            }
            // SAFETY: av_read_frame filled the packet.
            let p = unsafe { &*self.pkt };
            if p.stream_index != self.stream {
                continue;
            }
            return Ok(Some(PacketInfo {
                pts: p.pts,
                dts: p.dts,
                pos: p.pos,
                duration: p.duration,
                size: usize::try_from(p.size).unwrap_or(0),
                key: p.flags & ff::AV_PKT_FLAG_KEY != 0,
                corrupt: p.flags & ff::AV_PKT_FLAG_CORRUPT != 0,
                discard: p.flags & ff::AV_PKT_FLAG_DISCARD != 0,
            }));
        }
    }

    /// Seeks the video stream to the last key frame at or before `ts` (in the stream's
    /// time base), as the demuxer understands it; the caller checks where it landed.
    pub(crate) fn seek(&mut self, ts: i64) -> bool {
        // SAFETY: the context is open; the packet is unreferenced so no stale data stays.
        unsafe {
            ff::av_packet_unref(self.pkt);
            ff::av_seek_frame(self.fmt, self.stream, ts, ff::AVSEEK_FLAG_BACKWARD) >= 0
        }
    }
}

impl Drop for Demuxer<'_> {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or owned by us. avformat_close_input leaves a
        // CUSTOM_IO context alone, so it is freed afterwards, with the buffer FFmpeg may
        // have replaced, and then the Reader it pointed to.
        unsafe {
            ff::av_packet_free(&mut self.pkt);
            if !self.fmt.is_null() {
                ff::avformat_close_input(&mut self.fmt);
            }
            if !self.io.is_null() {
                ff::av_freep(&mut (*self.io).buffer as *mut *mut u8 as *mut c_void);
                ff::avio_context_free(&mut self.io);
            }
            drop(Box::from_raw(self.reader));
        }
    }
}

/// What the decoder says about a frame it output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameInfo {
    pub(crate) pts: i64,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) damaged: bool,
}

/// Result of asking the decoder for a frame.
pub(crate) enum Received {
    Frame(FrameInfo),
    /// It needs more packets.
    Again,
    /// It is drained.
    End,
}

/// A decoder for one video: made anew for each, so that nothing of one video (reference
/// frames, reordering state, guessed delays) reaches the next.
pub(crate) struct Decoder {
    ctx: *mut ff::AVCodecContext,
    frame: *mut ff::AVFrame,
}

impl Decoder {
    /// A one-thread decoder for the demuxer's video stream, refusing frames over
    /// `max_pixels` inside FFmpeg before their buffers are allocated.
    pub(crate) fn new(demux: &Demuxer<'_>, max_pixels: u64) -> Result<Decoder, VideoError> {
        let info = demux.info();
        // SAFETY: codecpar is valid for the demuxer's life.
        let codec = unsafe { ff::avcodec_find_decoder((*(*demux.av_stream()).codecpar).codec_id) };
        if codec.is_null() {
            return Err(VideoError::UnsupportedCodec(info.codec));
        }
        let d = Decoder {
            // SAFETY: plain allocations, checked below.
            ctx: unsafe { ff::avcodec_alloc_context3(codec) },
            // SAFETY: as above.
            frame: unsafe { ff::av_frame_alloc() },
        };
        if d.ctx.is_null() || d.frame.is_null() {
            return Err(VideoError::Corrupt("out of memory".into()));
        }
        // SAFETY: ctx is a fresh context for `codec`; codecpar is valid. Threads are set
        // before opening, as FFmpeg requires.
        let ret = unsafe {
            let par = (*demux.av_stream()).codecpar;
            let r = ff::avcodec_parameters_to_context(d.ctx, par);
            if r >= 0 {
                (*d.ctx).thread_count = 1;
                // Without it, FFmpeg's H.264 decoder guesses the reordering delay of
                // streams that do not declare it (phones' often do not), and drops the
                // frames that arrive late while its guess grows; strict compliance makes
                // it assume the largest delay the standard allows and drop none.
                if (*par).codec_id == ff::AVCodecID::AV_CODEC_ID_H264 {
                    (*d.ctx).strict_std_compliance = ff::FF_COMPLIANCE_STRICT as c_int;
                }
                (*d.ctx).max_pixels = i64::try_from(max_pixels).unwrap_or(i64::MAX);
                ff::avcodec_open2(d.ctx, codec, ptr::null_mut())
            } else {
                r
            }
        };
        if ret < 0 {
            return Err(VideoError::UnsupportedCodec(format!(
                "{}: the decoder refused the stream ({})",
                info.codec,
                error_text(ret)
            )));
        }
        Ok(d)
    }

    /// Whether the decoder may drop frames that no other frame references.
    pub(crate) fn skip_nonref(&mut self, skip: bool) {
        let level = if skip {
            ff::AVDiscard::AVDISCARD_NONREF
        } else {
            ff::AVDiscard::AVDISCARD_DEFAULT
        };
        // SAFETY: ctx is open; with one thread the field is read per packet.
        unsafe { (*self.ctx).skip_frame = level };
    }

    /// Sends the demuxer's current packet, with `pts` as its presentation time (the
    /// index's, so that frames come back labelled with it). `Ok(false)`: the decoder
    /// holds frames to be received first, then the packet is to be sent again.
    pub(crate) fn send(&mut self, demux: &mut Demuxer<'_>, pts: i64) -> Result<bool, c_int> {
        // SAFETY: the demuxer's packet holds the last packet read; ctx is open.
        unsafe {
            (*demux.pkt).pts = pts;
            send_packet(self.ctx, demux.pkt)
        }
    }

    /// Tells the decoder that no packet follows, so that it outputs what it holds.
    pub(crate) fn send_end(&mut self) -> Result<(), c_int> {
        // SAFETY: ctx is open.
        unsafe { send_end(self.ctx) }
    }

    /// Takes the next decoded frame, if one is ready.
    pub(crate) fn receive(&mut self) -> Result<Received, c_int> {
        // SAFETY: ctx is open and frame allocated.
        match unsafe { receive_frame(self.ctx, self.frame) }? {
            Got::Again => return Ok(Received::Again),
            Got::End => return Ok(Received::End),
            Got::Frame => {}
        }
        // SAFETY: receive_frame succeeded, so the frame holds a picture.
        let f = unsafe { &*self.frame };
        Ok(Received::Frame(FrameInfo {
            pts: f.pts,
            width: u32::try_from(f.width).unwrap_or(0),
            height: u32::try_from(f.height).unwrap_or(0),
            damaged: f.decode_error_flags != 0 || f.flags & ff::AV_FRAME_FLAG_CORRUPT != 0,
        }))
    }

    /// Forgets everything decoded, as after a seek.
    pub(crate) fn flush(&mut self) {
        // SAFETY: ctx is open.
        unsafe { ff::avcodec_flush_buffers(self.ctx) };
    }

    /// Converts the last received frame to RGB24 into `out` (resized to
    /// width * height * 3, rows tightly packed). The caller has checked the frame's size
    /// against its limits.
    pub(crate) fn to_rgb(&self, scalers: &mut Scalers, out: &mut Vec<u8>) -> Result<(), String> {
        // SAFETY: the frame holds the picture receive() returned.
        let f = unsafe { &*self.frame };
        let (w, h) = (f.width, f.height);
        let fmt = f.format;
        let sws = scalers.get(w, h, fmt)?;
        let row = w as usize * 3;
        let len = row * h as usize;
        // Slack after the last row: swscale's vector paths may write a few bytes past a
        // row's end (the next row's start is overwritten later, in order).
        out.clear();
        out.resize(len + 64, 0);
        let dst = [
            out.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        ];
        let stride = [row as c_int, 0, 0, 0];
        // SAFETY: sws was made for exactly this width, height and format; the source
        // planes are the frame's; dst holds h rows of `row` bytes plus slack.
        let lines = unsafe {
            ff::sws_scale(
                sws,
                f.data.as_ptr() as *const *const u8,
                f.linesize.as_ptr(),
                0,
                h,
                dst.as_ptr(),
                stride.as_ptr(),
            )
        };
        out.truncate(len);
        if lines != h {
            return Err(format!(
                "the conversion to RGB failed ({})",
                error_text(lines)
            ));
        }
        Ok(())
    }
}

/// Sends `pkt` to the decoder `ctx`. `Ok(false)`: the decoder holds frames to be
/// received first, then the packet is to be sent again.
///
/// # Safety
///
/// `ctx` is an open decoder and `pkt` a packet read for it.
unsafe fn send_packet(
    ctx: *mut ff::AVCodecContext,
    pkt: *const ff::AVPacket,
) -> Result<bool, c_int> {
    // SAFETY: as the caller promises.
    match unsafe { ff::avcodec_send_packet(ctx, pkt) } {
        r if r == ff::AVERROR(libc::EAGAIN) => Ok(false),
        r if r < 0 => Err(r),
        _ => Ok(true),
    }
}

/// Tells the decoder `ctx` that no packet follows, so that it outputs what it holds.
///
/// # Safety
///
/// `ctx` is an open decoder.
unsafe fn send_end(ctx: *mut ff::AVCodecContext) -> Result<(), c_int> {
    // SAFETY: ctx is open; a null packet is FFmpeg's end-of-stream signal.
    let ret = unsafe { ff::avcodec_send_packet(ctx, ptr::null()) };
    if ret < 0 && ret != ff::AVERROR_EOF {
        Err(ret)
    } else {
        Ok(())
    }
}

/// What a decoder gave when asked for a frame.
enum Got {
    /// A frame, in the frame asked with.
    Frame,
    /// None yet: it needs more packets.
    Again,
    /// None more: the stream ended.
    End,
}

/// Takes the decoder `ctx`'s next frame into `frame`, if one is ready.
///
/// # Safety
///
/// `ctx` is an open decoder and `frame` an allocated frame (unreferenced first).
unsafe fn receive_frame(
    ctx: *mut ff::AVCodecContext,
    frame: *mut ff::AVFrame,
) -> Result<Got, c_int> {
    // SAFETY: as the caller promises.
    match unsafe { ff::avcodec_receive_frame(ctx, frame) } {
        r if r == ff::AVERROR(libc::EAGAIN) => Ok(Got::Again),
        ff::AVERROR_EOF => Ok(Got::End),
        r if r < 0 => Err(r),
        _ => Ok(Got::Frame),
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: both are null or owned by us; the free functions accept null.
        unsafe {
            ff::av_frame_free(&mut self.frame);
            ff::avcodec_free_context(&mut self.ctx);
        }
    }
}

/// What the audio decoder says about a frame it output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AudioFrameInfo {
    /// Its presentation time in the stream's time base (FFmpeg's best effort), or
    /// [`NO_TS`].
    pub(crate) pts: i64,
    pub(crate) samples: usize,
    pub(crate) rate: u32,
    pub(crate) channels: usize,
    pub(crate) damaged: bool,
}

/// Result of asking the audio decoder for a frame.
pub(crate) enum AudioReceived {
    Frame(AudioFrameInfo),
    /// It needs more packets.
    Again,
    /// It is drained.
    End,
}

/// A decoder for the demuxer's audio stream, made anew for each file.
pub(crate) struct AudioDecoder {
    ctx: *mut ff::AVCodecContext,
    frame: *mut ff::AVFrame,
}

impl AudioDecoder {
    /// A one-thread decoder for the demuxer's (audio) stream.
    pub(crate) fn new(demux: &Demuxer<'_>) -> Result<AudioDecoder, VideoError> {
        let info = demux.audio_info();
        // SAFETY: codecpar is valid for the demuxer's life.
        let codec = unsafe { ff::avcodec_find_decoder((*(*demux.av_stream()).codecpar).codec_id) };
        if codec.is_null() {
            return Err(VideoError::UnsupportedCodec(info.codec));
        }
        let d = AudioDecoder {
            // SAFETY: plain allocations, checked below.
            ctx: unsafe { ff::avcodec_alloc_context3(codec) },
            // SAFETY: as above.
            frame: unsafe { ff::av_frame_alloc() },
        };
        if d.ctx.is_null() || d.frame.is_null() {
            return Err(VideoError::Corrupt("out of memory".into()));
        }
        // SAFETY: ctx is a fresh context for `codec`; codecpar is valid. The packet time
        // base is given so that the decoder trims priming samples and shifts the times of
        // the frames it trims in the stream's time base.
        let ret = unsafe {
            let st = demux.av_stream();
            let r = ff::avcodec_parameters_to_context(d.ctx, (*st).codecpar);
            if r >= 0 {
                (*d.ctx).thread_count = 1;
                (*d.ctx).pkt_timebase = (*st).time_base;
                ff::avcodec_open2(d.ctx, codec, ptr::null_mut())
            } else {
                r
            }
        };
        if ret < 0 {
            return Err(VideoError::UnsupportedCodec(format!(
                "{}: the decoder refused the audio stream ({})",
                info.codec,
                error_text(ret)
            )));
        }
        Ok(d)
    }

    /// Sends the demuxer's current packet. `Ok(false)`: the decoder holds frames to be
    /// received first, then the packet is to be sent again.
    pub(crate) fn send(&mut self, demux: &mut Demuxer<'_>) -> Result<bool, c_int> {
        // SAFETY: the demuxer's packet holds the last packet read; ctx is open.
        unsafe { send_packet(self.ctx, demux.pkt) }
    }

    /// Tells the decoder that no packet follows, so that it outputs what it holds.
    pub(crate) fn send_end(&mut self) -> Result<(), c_int> {
        // SAFETY: ctx is open.
        unsafe { send_end(self.ctx) }
    }

    /// Takes the next decoded frame, if one is ready.
    pub(crate) fn receive(&mut self) -> Result<AudioReceived, c_int> {
        // SAFETY: ctx is open and frame allocated.
        match unsafe { receive_frame(self.ctx, self.frame) }? {
            Got::Again => return Ok(AudioReceived::Again),
            Got::End => return Ok(AudioReceived::End),
            Got::Frame => {}
        }
        // SAFETY: receive_frame succeeded, so the frame holds samples.
        let f = unsafe { &*self.frame };
        Ok(AudioReceived::Frame(AudioFrameInfo {
            pts: f.best_effort_timestamp,
            samples: usize::try_from(f.nb_samples).unwrap_or(0),
            rate: u32::try_from(f.sample_rate).unwrap_or(0),
            channels: usize::try_from(f.ch_layout.nb_channels).unwrap_or(0),
            damaged: f.decode_error_flags != 0 || f.flags & ff::AV_FRAME_FLAG_CORRUPT != 0,
        }))
    }

    /// Appends samples `range` of the last received frame, as `f32` in [-1, 1] for
    /// integer formats, to `planes` (one per channel; a single plane receives the mean of
    /// the channels). The caller has checked the frame's channels against `planes`.
    pub(crate) fn append(
        &self,
        range: std::ops::Range<usize>,
        planes: &mut [Vec<f32>],
    ) -> Result<(), String> {
        // SAFETY: the frame holds the samples receive() returned.
        let f = unsafe { &*self.frame };
        let channels = usize::try_from(f.ch_layout.nb_channels).unwrap_or(0);
        let samples = usize::try_from(f.nb_samples).unwrap_or(0);
        if range.end > samples || channels == 0 || f.extended_data.is_null() {
            return Err("a decoded audio frame is not what its header says".into());
        }
        use ff::AVSampleFormat as S;
        let formats = [
            (S::AV_SAMPLE_FMT_U8, 1),
            (S::AV_SAMPLE_FMT_S16, 2),
            (S::AV_SAMPLE_FMT_S32, 4),
            (S::AV_SAMPLE_FMT_FLT, 4),
            (S::AV_SAMPLE_FMT_DBL, 8),
            (S::AV_SAMPLE_FMT_S64, 8),
            (S::AV_SAMPLE_FMT_U8P, 1),
            (S::AV_SAMPLE_FMT_S16P, 2),
            (S::AV_SAMPLE_FMT_S32P, 4),
            (S::AV_SAMPLE_FMT_FLTP, 4),
            (S::AV_SAMPLE_FMT_DBLP, 8),
            (S::AV_SAMPLE_FMT_S64P, 8),
        ];
        let Some(&(format, width)) = formats.iter().find(|(s, _)| *s as c_int == f.format) else {
            return Err(format!("audio sample format {} is not read", f.format));
        };
        let planar = matches!(
            format,
            S::AV_SAMPLE_FMT_U8P
                | S::AV_SAMPLE_FMT_S16P
                | S::AV_SAMPLE_FMT_S32P
                | S::AV_SAMPLE_FMT_FLTP
                | S::AV_SAMPLE_FMT_DBLP
                | S::AV_SAMPLE_FMT_S64P
        );
        let value = |bytes: &[u8]| -> f32 {
            match format {
                S::AV_SAMPLE_FMT_U8 | S::AV_SAMPLE_FMT_U8P => (f32::from(bytes[0]) - 128.0) / 128.0,
                S::AV_SAMPLE_FMT_S16 | S::AV_SAMPLE_FMT_S16P => {
                    f32::from(i16::from_ne_bytes([bytes[0], bytes[1]])) / 32768.0
                }
                S::AV_SAMPLE_FMT_S32 | S::AV_SAMPLE_FMT_S32P => {
                    (f64::from(i32::from_ne_bytes(bytes.try_into().expect("4 bytes")))
                        / 2_147_483_648.0) as f32
                }
                S::AV_SAMPLE_FMT_FLT | S::AV_SAMPLE_FMT_FLTP => {
                    f32::from_ne_bytes(bytes.try_into().expect("4 bytes"))
                }
                S::AV_SAMPLE_FMT_DBL | S::AV_SAMPLE_FMT_DBLP => {
                    f64::from_ne_bytes(bytes.try_into().expect("8 bytes")) as f32
                }
                _ => {
                    (i64::from_ne_bytes(bytes.try_into().expect("8 bytes")) as f64
                        / 9_223_372_036_854_775_808.0) as f32
                }
            }
        };
        // The bytes of channel c's samples `range`: plane c, or the one interleaved plane.
        let channel = |c: usize| -> Vec<f32> {
            let (plane, step, at) = if planar {
                (c, width, 0)
            } else {
                (0, width * channels, c * width)
            };
            // SAFETY: FFmpeg gives a planar frame `channels` planes (extended_data) and a
            // packed one a single plane, each holding nb_samples samples of `width` bytes
            // per channel in it; range.end <= nb_samples was checked above.
            let bytes = unsafe {
                let base = *f.extended_data.add(plane);
                std::slice::from_raw_parts(base, samples * step)
            };
            range
                .clone()
                .map(|i| value(&bytes[i * step + at..i * step + at + width]))
                .collect()
        };
        if let [mono] = planes {
            let mut sum = channel(0);
            for c in 1..channels {
                for (s, v) in sum.iter_mut().zip(channel(c)) {
                    *s += v;
                }
            }
            if channels > 1 {
                let scale = 1.0 / channels as f32;
                sum.iter_mut().for_each(|s| *s *= scale);
            }
            mono.extend_from_slice(&sum);
        } else {
            for (c, plane) in planes.iter_mut().enumerate().take(channels) {
                plane.extend(channel(c));
            }
        }
        Ok(())
    }
}

impl Drop for AudioDecoder {
    fn drop(&mut self) {
        // SAFETY: both are null or owned by us; the free functions accept null.
        unsafe {
            ff::av_frame_free(&mut self.frame);
            ff::avcodec_free_context(&mut self.ctx);
        }
    }
}

/// Converters to RGB24 kept across videos, one per (width, height, pixel format): a
/// loader's videos mostly share a few sizes, and making a converter costs more than
/// converting a small frame.
pub(crate) struct Scalers {
    // Most recently used last.
    cached: Vec<((c_int, c_int, c_int), *mut ff::SwsContext)>,
}

/// How many converters are kept.
const SCALERS_KEPT: usize = 4;

impl Scalers {
    pub(crate) fn new() -> Scalers {
        Scalers { cached: Vec::new() }
    }

    fn get(&mut self, w: c_int, h: c_int, fmt: c_int) -> Result<*mut ff::SwsContext, String> {
        let key = (w, h, fmt);
        if let Some(i) = self.cached.iter().position(|(k, _)| *k == key) {
            let e = self.cached.remove(i);
            self.cached.push(e);
            return Ok(e.1);
        }
        if !(0..ff::AVPixelFormat::AV_PIX_FMT_NB as c_int).contains(&fmt) {
            return Err(format!("unknown pixel format {fmt}"));
        }
        // SAFETY: fmt lies in 0..AV_PIX_FMT_NB, and the enum's values are contiguous.
        let pix: ff::AVPixelFormat =
            unsafe { std::mem::transmute::<c_int, ff::AVPixelFormat>(fmt) };
        // SAFETY: sws_getContext validates its arguments and returns null when it cannot
        // convert; no filters or parameters are passed.
        let ctx = unsafe {
            ff::sws_getContext(
                w,
                h,
                pix,
                w,
                h,
                ff::AVPixelFormat::AV_PIX_FMT_RGB24,
                SWS_FLAGS,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null(),
            )
        };
        if ctx.is_null() {
            return Err(format!("no conversion from pixel format {fmt} to RGB"));
        }
        if self.cached.len() == SCALERS_KEPT {
            let (_, old) = self.cached.remove(0);
            // SAFETY: old was made by sws_getContext and is no longer referenced.
            unsafe { ff::sws_freeContext(old) };
        }
        self.cached.push((key, ctx));
        Ok(ctx)
    }
}

impl Drop for Scalers {
    fn drop(&mut self) {
        for (_, ctx) in self.cached.drain(..) {
            // SAFETY: made by sws_getContext, freed once.
            unsafe { ff::sws_freeContext(ctx) };
        }
    }
}

// SAFETY: a Scalers owns its SwsContexts exclusively; an SwsContext holds no
// thread-affine state, so it may be used from another thread, one at a time (`&mut`).
unsafe impl Send for Scalers {}
