//! A minimal safe wrapper over the TurboJPEG 3 C API.
//!
//! The `turbojpeg` crate's safe API does not expose partial (cropped) decompression, which
//! is the point of decoding for RandomResizedCrop, so nostall calls `turbojpeg-sys` itself.
//! All `unsafe` code of the codec lives in this file. Each call passes a handle we own and
//! buffers whose sizes are checked against the dimensions TurboJPEG will write.

use std::ffi::CStr;
use std::ptr;

use turbojpeg_sys as tj;

use crate::error::Cause;

/// An owned TurboJPEG instance (decompressor or compressor).
pub(crate) struct Handle {
    ptr: tj::tjhandle,
}

// SAFETY: a TurboJPEG handle has no thread affinity; it is only not safe to use from two
// threads at once, which `&mut self` on every method rules out.
unsafe impl Send for Handle {}

/// Progressive JPEGs with more scans than this are refused: each scan is a pass over the
/// whole image, so a crafted file of thousands of tiny scans would pin a thread for
/// minutes. The limit is libjpeg-turbo's own recommendation for untrusted input; encoders
/// write at most a few dozen.
pub(crate) const MAX_SCANS: i32 = 500;

/// `data` without the stray bytes before its end marker that libjpeg's `message` counts
/// (`Corrupt JPEG data: N extraneous bytes before marker 0xd9`, common in web-scraped
/// datasets such as ImageNet, which PIL accepts); `None` for any other message.
fn without_trailing_garbage(data: &[u8], message: &str) -> Option<Vec<u8>> {
    let count = message
        .strip_prefix("Corrupt JPEG data: ")?
        .strip_suffix(" extraneous bytes before marker 0xd9")?
        .parse::<usize>()
        .ok()?;
    let body = data.strip_suffix(&[0xFF, 0xD9])?;
    let mut trimmed = body[..body.len().checked_sub(count)?].to_vec();
    trimmed.extend_from_slice(&[0xFF, 0xD9]);
    Some(trimmed)
}

/// What the JPEG header says about the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JpegHeader {
    pub width: u32,
    pub height: u32,
    /// Chrominance subsampling (a `TJSAMP_*` value; negative when unusual).
    pub subsamp: i32,
    /// Stored as CMYK or YCCK (TurboJPEG cannot convert those to RGB itself).
    pub cmyk: bool,
}

/// Pixel layouts the test and demo encoders accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodePixels {
    /// 3 bytes per pixel.
    Rgb,
    /// 1 byte per pixel, written as a grayscale JPEG.
    Gray,
    /// 4 bytes per pixel, written as a CMYK JPEG.
    Cmyk,
}

/// Scaled size as TurboJPEG computes it (`TJSCALED`): `ceil(dim * num / 8)`.
pub(crate) fn scaled(dim: u32, eighths: u32) -> u32 {
    (dim * eighths).div_ceil(8)
}

impl Handle {
    fn new(kind: tj::TJINIT) -> Result<Handle, String> {
        // SAFETY: tj3Init has no preconditions; a null result is handled.
        let ptr = unsafe { tj::tj3Init(kind as libc::c_int) };
        if ptr.is_null() {
            return Err("TurboJPEG failed to initialise".into());
        }
        Ok(Handle { ptr })
    }

    /// A decompressor for untrusted data: it stops at the first warning (libjpeg reports
    /// truncation and damage as warnings, and formats only the first one), refuses more
    /// than [`MAX_SCANS`] scans, and bounds the pixels and the memory of one image by
    /// `max_pixels`.
    pub(crate) fn decompressor(max_pixels: u64) -> Result<Handle, String> {
        let mut handle = Handle::new(tj::TJINIT_TJINIT_DECOMPRESS)?;
        handle.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1)?;
        handle.set(tj::TJPARAM_TJPARAM_SCANLIMIT, MAX_SCANS)?;
        handle.set(
            tj::TJPARAM_TJPARAM_MAXPIXELS,
            i32::try_from(max_pixels).unwrap_or(i32::MAX),
        )?;
        // Progressive and multi-scan images keep every coefficient in memory: 2 bytes for
        // each of up to 4 components per pixel, plus room for the decoder's own tables.
        let mib = (max_pixels.saturating_mul(8) >> 20).saturating_add(64);
        handle.set(
            tj::TJPARAM_TJPARAM_MAXMEMORY,
            i32::try_from(mib).unwrap_or(i32::MAX),
        )?;
        Ok(handle)
    }

    fn last_error(&self) -> String {
        // SAFETY: the handle is valid; TurboJPEG returns a NUL-terminated static or
        // per-handle string that lives until the next call on this handle.
        unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.ptr)) }
            .to_string_lossy()
            .into_owned()
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: valid handle; tj3Get only reads.
        unsafe { tj::tj3Get(self.ptr, param as libc::c_int) }
    }

    fn set(&mut self, param: tj::TJPARAM, value: i32) -> Result<(), String> {
        // SAFETY: valid handle.
        if unsafe { tj::tj3Set(self.ptr, param as libc::c_int, value) } != 0 {
            return Err(self.last_error());
        }
        Ok(())
    }

    /// Reads the header only: cheap, and enough to plan a crop.
    pub(crate) fn read_header(&mut self, data: &[u8]) -> Result<JpegHeader, Cause> {
        // Given tables but no frame, TurboJPEG reports success and leaves the previous
        // image's dimensions in place: check for a frame header first.
        if !has_frame_header(data) {
            return Err(Cause::Corrupt(
                "no frame header (SOF marker) before the scan data".into(),
            ));
        }
        // SAFETY: data is a valid slice for its length; the handle is a decompressor.
        if unsafe { tj::tj3DecompressHeader(self.ptr, data.as_ptr(), data.len() as tj::size_t) }
            != 0
        {
            return Err(Cause::Corrupt(self.last_error()));
        }
        let colorspace = self.get(tj::TJPARAM_TJPARAM_COLORSPACE);
        let (width, height) = (
            self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH),
            self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT),
        );
        if width <= 0 || height <= 0 {
            return Err(Cause::Corrupt(format!(
                "header declares a {width}x{height} image"
            )));
        }
        Ok(JpegHeader {
            width: width as u32,
            height: height as u32,
            subsamp: self.get(tj::TJPARAM_TJPARAM_SUBSAMP),
            cmyk: colorspace == tj::TJCS_TJCS_CMYK as i32
                || colorspace == tj::TJCS_TJCS_YCCK as i32,
        })
    }

    /// Left edges of crop regions must be multiples of this, in scaled pixels.
    pub(crate) fn crop_alignment(header: &JpegHeader, eighths: u32) -> Option<u32> {
        // iMCU widths by TJSAMP_* value (444, 422, 420, gray, 440, 411, 441): the header's
        // `tjMCUWidth` is a static array compiled into each C caller, not a linkable symbol.
        const MCU_WIDTH: [u32; 7] = [8, 16, 16, 8, 8, 32, 8];
        let mcu = *MCU_WIDTH.get(usize::try_from(header.subsamp).ok()?)?;
        Some(scaled(mcu, eighths))
    }

    /// Decodes the image (scaled by `eighths`/8, optionally cropped to `crop` in scaled
    /// coordinates, `crop.0` aligned) into the start of `out` as RGB, returning (width,
    /// height); `out` may be longer than the image.
    ///
    /// The header is read again from `data` and must equal `header`: the buffer is sized
    /// from it, so a header of another image must not reach TurboJPEG (which would write
    /// that image's size).
    pub(crate) fn decode_rgb(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        eighths: u32,
        crop: Option<(u32, u32, u32, u32)>,
        out: &mut Vec<u8>,
        cmyk_scratch: &mut Vec<u8>,
    ) -> Result<(u32, u32), Cause> {
        if self.read_header(data)? != *header {
            return Err(Cause::Corrupt(
                "the header given does not belong to these bytes".into(),
            ));
        }
        // TurboJPEG accepts only reduced fractions (1/2, not 4/8).
        let common = gcd(eighths, 8);
        let factor = tj::tjscalingfactor {
            num: (eighths / common) as libc::c_int,
            denom: (8 / common) as libc::c_int,
        };
        // SAFETY: valid handle; the factor is one TurboJPEG supports (n/8, n = 1..=8).
        if unsafe { tj::tj3SetScalingFactor(self.ptr, factor) } != 0 {
            return Err(Cause::Corrupt(self.last_error()));
        }
        let (sw, sh) = (
            scaled(header.width, eighths),
            scaled(header.height, eighths),
        );
        let region = match crop {
            Some((x, y, w, h)) => tj::tjregion {
                x: x as i32,
                y: y as i32,
                w: w as i32,
                h: h as i32,
            },
            None => tj::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            },
        };
        // SAFETY: valid handle, header read just before (required for a cropping region).
        if unsafe { tj::tj3SetCroppingRegion(self.ptr, region) } != 0 {
            return Err(Cause::Corrupt(self.last_error()));
        }
        let (w, h) = crop.map_or((sw, sh), |(_, _, w, h)| (w, h));
        let (format, channels, target) = if header.cmyk {
            (tj::TJPF_TJPF_CMYK, 4, &mut *cmyk_scratch)
        } else {
            (tj::TJPF_TJPF_RGB, 3, &mut *out)
        };
        let len = w as usize * h as usize * channels;
        // Grow only: zeroing the whole buffer for every image would cost a pass over it.
        if target.len() < len {
            target.resize(len, 0);
        }
        let pitch = w as usize * channels;
        let target = &mut target[..len];
        // SAFETY: `target` holds pitch * h bytes for the w x h region TurboJPEG writes: w
        // and h are the cropped or scaled dimensions of the header just read from `data`,
        // for the factor and region set from them on this handle.
        if let Err(message) = unsafe { self.decompress(data, target, pitch, format) } {
            // Stray bytes before the end marker are harmless when they follow the last
            // scan's data, but libjpeg reports the same words when it skipped every byte
            // to the end marker mid-image (a missing restart marker, say). So the image is
            // decoded again without the bytes it names: a clean decode means they trailed.
            let trimmed =
                without_trailing_garbage(data, &message).ok_or(Cause::Corrupt(message))?;
            if self.read_header(&trimmed)? != *header {
                return Err(Cause::Corrupt(
                    "the header changed without its trailing bytes".into(),
                ));
            }
            // SAFETY: as above, for the header just read from `trimmed` (the same one).
            unsafe { self.decompress(&trimmed, target, pitch, format) }.map_err(Cause::Corrupt)?;
        }
        if header.cmyk {
            cmyk_to_rgb(&cmyk_scratch[..len], out);
        }
        Ok((w, h))
    }
}

impl Handle {
    /// One `tj3Decompress8` call into `target`; the error or warning message on failure.
    ///
    /// # Safety
    ///
    /// `target` must hold `pitch` bytes for each row TurboJPEG writes, and `pitch` must
    /// cover a row: the rows and width of the cropping region set on this handle, or of
    /// the whole image scaled by the factor set, for the header of `data` itself (which
    /// TurboJPEG reads again).
    unsafe fn decompress(
        &mut self,
        data: &[u8],
        target: &mut [u8],
        pitch: usize,
        format: tj::TJPF,
    ) -> Result<(), String> {
        // SAFETY: valid handle; `data` is readable for its length; the caller vouches for
        // `target` and `pitch`.
        let rc = unsafe {
            tj::tj3Decompress8(
                self.ptr,
                data.as_ptr(),
                data.len() as tj::size_t,
                target.as_mut_ptr(),
                pitch as libc::c_int,
                format as libc::c_int,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(self.last_error())
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed exactly once.
        unsafe { tj::tj3Destroy(self.ptr) }
    }
}

/// Walks the marker segments after SOI and tells whether a frame header (SOFn) comes
/// before the first scan.
fn has_frame_header(data: &[u8]) -> bool {
    let mut at = 2;
    while at + 4 <= data.len() {
        if data[at] != 0xFF {
            return false;
        }
        let marker = data[at + 1];
        match marker {
            0xFF => at += 1, // fill byte
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => return true,
            0xD9 | 0xDA => return false, // EOI or SOS before any frame
            _ => at += 2 + u16::from_be_bytes([data[at + 2], data[at + 3]]) as usize,
        }
    }
    false
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// CMYK as Adobe applications write it (inverted: 255 = no ink) to RGB, the same
/// conversion PIL applies to such files.
fn cmyk_to_rgb(cmyk: &[u8], rgb: &mut Vec<u8>) {
    rgb.clear();
    rgb.reserve(cmyk.len() / 4 * 3);
    for px in cmyk.chunks_exact(4) {
        let k = px[3] as u32;
        rgb.extend(px[..3].iter().map(|&c| ((c as u32 * k + 127) / 255) as u8));
    }
}

/// Encodes pixels as a JPEG: used to build demo data and test corpora.
pub fn encode_jpeg(
    pixels: &[u8],
    width: u32,
    height: u32,
    layout: EncodePixels,
    quality: u8,
    progressive: bool,
) -> Result<Vec<u8>, String> {
    let (format, channels, subsamp) = match layout {
        EncodePixels::Rgb => (tj::TJPF_TJPF_RGB, 3, tj::TJSAMP_TJSAMP_420),
        EncodePixels::Gray => (tj::TJPF_TJPF_GRAY, 1, tj::TJSAMP_TJSAMP_GRAY),
        EncodePixels::Cmyk => (tj::TJPF_TJPF_CMYK, 4, tj::TJSAMP_TJSAMP_444),
    };
    if pixels.len() != width as usize * height as usize * channels {
        return Err(format!(
            "{} bytes do not make a {width}x{height} image of {layout:?}",
            pixels.len()
        ));
    }
    let mut handle = Handle::new(tj::TJINIT_TJINIT_COMPRESS)?;
    handle.set(tj::TJPARAM_TJPARAM_QUALITY, quality.clamp(1, 100) as i32)?;
    handle.set(tj::TJPARAM_TJPARAM_SUBSAMP, subsamp)?;
    handle.set(tj::TJPARAM_TJPARAM_PROGRESSIVE, progressive as i32)?;
    let mut buf: *mut libc::c_uchar = ptr::null_mut();
    let mut size: tj::size_t = 0;
    // SAFETY: `pixels` holds width * height * channels bytes (checked above); TurboJPEG
    // allocates `buf`, which we copy and free with tj3Free below.
    let rc = unsafe {
        tj::tj3Compress8(
            handle.ptr,
            pixels.as_ptr(),
            width as libc::c_int,
            0,
            height as libc::c_int,
            format as libc::c_int,
            &mut buf,
            &mut size,
        )
    };
    let result = if rc != 0 || buf.is_null() {
        Err(handle.last_error())
    } else {
        // SAFETY: on success buf points to `size` initialised bytes.
        Ok(unsafe { std::slice::from_raw_parts(buf, size as usize) }.to_vec())
    };
    if !buf.is_null() {
        // SAFETY: buf was allocated by TurboJPEG and is freed once.
        unsafe { tj::tj3Free(buf as *mut libc::c_void) };
    }
    result
}
