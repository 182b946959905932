//! Image decoding, planned around the crop that will follow it.
//!
//! Most of a training pipeline's CPU goes into decoding JPEGs only to throw most pixels
//! away: RandomResizedCrop keeps on average half the image and then shrinks it. So the
//! decoder is asked for a *region* (in source pixels) and a *minimum size*: for JPEG it
//! decodes only the rows and columns around that region (TurboJPEG's partial decode) at
//! the smallest DCT scale n/8 that still leaves at least the requested size, and reports
//! where the region lies in the pixels it produced. PNG has no such shortcut and is
//! decoded whole.
//!
//! Formats are recognised by their bytes, never by the file name: a PNG named `.jpg` is a
//! PNG. Everything comes out as 8-bit RGB: grayscale, CMYK, palette, 16-bit and alpha
//! images are converted. A pixel-count limit, checked from the header before anything is
//! allocated, guards against decompression bombs.

mod png_decode;
mod turbo;

pub(crate) use png_decode::{decode_label_map, decode_segment_ids};
pub use turbo::{encode_jpeg, EncodePixels};

use crate::error::Cause;
use crate::prep::Modality;
use turbo::{Handle, JpegHeader};

/// The default decompression-bomb guard: 100 megapixels (e.g. 12 000 × 8 000).
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// An image format nostall decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG (baseline, progressive, arithmetic; gray, YCbCr, CMYK, YCCK).
    Jpeg,
    /// PNG (any bit depth and colour type).
    Png,
}

/// Recognises a format from the first bytes of a file.
pub(crate) fn sniff(data: &[u8]) -> Option<Format> {
    if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else {
        None
    }
}

/// A rectangle in (possibly fractional) pixel coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

impl Rect {
    /// The whole of a `width` × `height` image.
    pub fn full(width: u32, height: u32) -> Rect {
        Rect {
            x: 0.0,
            y: 0.0,
            w: width as f64,
            h: height as f64,
        }
    }
}

/// What a header says, enough to plan the crop before decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The format, from the bytes.
    pub format: Format,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    jpeg: Option<JpegHeader>,
}

/// Decoded RGB pixels and where the requested region lies within them.
#[derive(Debug)]
pub struct Decoded<'a> {
    /// Packed RGB, `width * height * 3` bytes.
    pub pixels: &'a [u8],
    /// Width of `pixels`.
    pub width: u32,
    /// Height of `pixels`.
    pub height: u32,
    /// The requested region, in the coordinates of `pixels`.
    pub region: Rect,
}

/// Pixel buffers above this size are given back after the sample that needed them: one
/// huge image must not keep hundreds of megabytes per thread for the rest of the run.
const RETAINED_BUFFER_BYTES: usize = 64 << 20;

/// A reusable decoder: one per thread, so steady state allocates nothing.
///
/// Nothing an image leaves in the decoder reaches the next one: each image gets a fresh
/// TurboJPEG instance (about 0.2 µs). libjpeg keeps state between the images of one
/// instance on purpose: quantisation and Huffman tables, so that a file without its own
/// tables decodes with the previous file's (an output that depends on which thread saw
/// which file before), and, after a failure inside a header, the half-read header, from
/// which the next header read goes on (one bad file failed every later one). Oversized
/// pixel buffers are released too.
pub struct Decoder {
    /// The instance of the image whose header was read last.
    turbo: Option<Handle>,
    pixels: Vec<u8>,
    scratch: Vec<u8>,
    max_pixels: u64,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("max_pixels", &self.max_pixels)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder refusing images of more than `max_pixels` pixels.
    pub fn new(max_pixels: u64) -> Result<Decoder, String> {
        // Made once here so that a decoder that cannot work fails at once.
        Ok(Decoder {
            turbo: Some(Handle::decompressor(max_pixels)?),
            pixels: Vec::new(),
            scratch: Vec::new(),
            max_pixels,
        })
    }

    /// Reads the header: format, dimensions, and the pixel-limit check.
    pub fn header(&mut self, data: &[u8]) -> Result<Header, Cause> {
        for buffer in [&mut self.pixels, &mut self.scratch] {
            if buffer.capacity() > RETAINED_BUFFER_BYTES {
                *buffer = Vec::new();
            }
        }
        self.turbo = None;
        if data.is_empty() {
            return Err(Cause::Empty);
        }
        let header = match sniff(data).ok_or(Cause::UnknownFormat(Modality::Image))? {
            Format::Jpeg => {
                let jpeg = Self::run_turbo(&mut self.turbo, self.max_pixels, |turbo| {
                    turbo.read_header(data)
                })?;
                Header {
                    format: Format::Jpeg,
                    width: jpeg.width,
                    height: jpeg.height,
                    jpeg: Some(jpeg),
                }
            }
            Format::Png => {
                let (width, height) = png_decode::dimensions(data)?;
                Header {
                    format: Format::Png,
                    width,
                    height,
                    jpeg: None,
                }
            }
        };
        let pixels = header.width as u64 * header.height as u64;
        if pixels > self.max_pixels {
            return Err(Cause::TooManyPixels {
                width: header.width as u64,
                height: header.height as u64,
                limit: self.max_pixels,
            });
        }
        Ok(header)
    }

    /// Decodes at least `region` of the image (source coordinates, from `header`) at a
    /// resolution of at least `min_size` (width, height) for that region, doing as little
    /// work as the format allows.
    pub fn decode(
        &mut self,
        data: &[u8],
        header: &Header,
        region: Rect,
        min_size: (u32, u32),
    ) -> Result<Decoded<'_>, Cause> {
        let region = clamp(region, header.width, header.height);
        let (width, height, region) = match header.jpeg {
            Some(jpeg) => self.decode_jpeg(data, &jpeg, region, min_size)?,
            None => {
                let (w, h) = png_decode::decode_rgb(data, self.max_pixels, &mut self.pixels)?;
                if (w, h) != (header.width, header.height) {
                    return Err(Cause::Corrupt(format!(
                        "the header given ({}x{}) does not belong to these bytes ({w}x{h})",
                        header.width, header.height
                    )));
                }
                (w, h, region)
            }
        };
        Ok(Decoded {
            pixels: &self.pixels,
            width,
            height,
            region,
        })
    }

    /// Decodes the whole image at full resolution (the reference a pipeline is compared with).
    pub fn decode_full(&mut self, data: &[u8]) -> Result<Decoded<'_>, Cause> {
        let header = self.header(data)?;
        let full = Rect::full(header.width, header.height);
        self.decode(data, &header, full, (header.width, header.height))
    }

    /// Runs `work` on the current image's TurboJPEG instance, made if there is none, and
    /// drops the instance if `work` fails.
    fn run_turbo<T>(
        turbo: &mut Option<Handle>,
        max_pixels: u64,
        work: impl FnOnce(&mut Handle) -> Result<T, Cause>,
    ) -> Result<T, Cause> {
        let handle = match turbo {
            Some(handle) => handle,
            None => turbo.insert(Handle::decompressor(max_pixels).map_err(|e| {
                Cause::Internal(format!("the JPEG decoder could not be initialised: {e}"))
            })?),
        };
        let result = work(handle);
        if result.is_err() {
            *turbo = None;
        }
        result
    }

    fn decode_jpeg(
        &mut self,
        data: &[u8],
        jpeg: &JpegHeader,
        region: Rect,
        (min_w, min_h): (u32, u32),
    ) -> Result<(u32, u32, Rect), Cause> {
        // The smallest n/8 that keeps the region at least as large as the output.
        let eighths = [1, 2, 4, 8u32]
            .into_iter()
            .find(|&n| {
                region.w * n as f64 / 8.0 >= min_w as f64
                    && region.h * n as f64 / 8.0 >= min_h as f64
            })
            .unwrap_or(8);
        let s = eighths as f64 / 8.0;
        let (sw, sh) = (
            turbo::scaled(jpeg.width, eighths),
            turbo::scaled(jpeg.height, eighths),
        );
        let scaled = Rect {
            x: region.x * s,
            y: region.y * s,
            w: region.w * s,
            h: region.h * s,
        };
        let mut x0 = (scaled.x.floor() as u32).min(sw - 1);
        let y0 = (scaled.y.floor() as u32).min(sh - 1);
        let x1 = ((scaled.x + scaled.w).ceil() as u32).clamp(x0 + 1, sw);
        let y1 = ((scaled.y + scaled.h).ceil() as u32).clamp(y0 + 1, sh);
        let crop = match Handle::crop_alignment(jpeg, eighths) {
            Some(align) if (x1 - x0, y1 - y0) != (sw, sh) => {
                x0 -= x0 % align;
                Some((x0, y0, x1 - x0, y1 - y0))
            }
            // Full image wanted, or a subsampling TurboJPEG cannot crop: decode it whole.
            _ => {
                x0 = 0;
                None
            }
        };
        let y0 = if crop.is_some() { y0 } else { 0 };
        let (pixels, scratch) = (&mut self.pixels, &mut self.scratch);
        let (w, h) = Self::run_turbo(&mut self.turbo, self.max_pixels, |turbo| {
            turbo.decode_rgb(data, jpeg, eighths, crop, pixels, scratch)
        })?;
        let local = Rect {
            x: scaled.x - x0 as f64,
            y: scaled.y - y0 as f64,
            w: scaled.w,
            h: scaled.h,
        };
        Ok((w, h, clamp(local, w, h)))
    }
}

/// Keeps a rectangle inside a `width` × `height` image, at least a pixel in size.
pub(crate) fn clamp(r: Rect, width: u32, height: u32) -> Rect {
    let (fw, fh) = (width as f64, height as f64);
    let x = r.x.clamp(0.0, fw - 1.0);
    let y = r.y.clamp(0.0, fh - 1.0);
    Rect {
        x,
        y,
        w: r.w.min(fw - x).max(1.0),
        h: r.h.min(fh - y).max(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A smooth test picture (gradients), so crops can be checked by value.
    fn gradient(w: u32, h: u32) -> Vec<u8> {
        let mut px = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                px.extend([(x * 255 / w) as u8, (y * 255 / h) as u8, 128]);
            }
        }
        px
    }

    #[test]
    fn sniffs_by_content() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(Format::Jpeg));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some(Format::Png));
        assert_eq!(sniff(b"hello"), None);
    }

    #[test]
    fn region_decode_scales_and_locates_the_region() {
        let jpeg =
            encode_jpeg(&gradient(400, 300), 400, 300, EncodePixels::Rgb, 95, false).unwrap();
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        let header = dec.header(&jpeg).unwrap();
        assert_eq!((header.width, header.height), (400, 300));
        let region = Rect {
            x: 203.0,
            y: 101.0,
            w: 160.0,
            h: 120.0,
        };
        let out = dec.decode(&jpeg, &header, region, (40, 30)).unwrap();
        // 40 of 160 pixels: a quarter scale suffices, so far fewer pixels are produced.
        assert!(
            out.width < 100 && out.height < 100,
            "{}x{}",
            out.width,
            out.height
        );
        assert!(out.region.w >= 40.0 && out.region.h >= 30.0);
        // The region's top-left pixel holds the source's value there (the gradient).
        let (x, y) = (out.region.x.round() as usize, out.region.y.round() as usize);
        let i = (y * out.width as usize + x) * 3;
        let (r, g) = (out.pixels[i] as i32, out.pixels[i + 1] as i32);
        assert!((r - 203 * 255 / 400).abs() <= 6, "red {r}");
        assert!((g - 101 * 255 / 300).abs() <= 6, "green {g}");
    }

    #[test]
    fn full_decode_keeps_size() {
        let jpeg = encode_jpeg(&gradient(64, 48), 64, 48, EncodePixels::Rgb, 90, true).unwrap();
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        let out = dec.decode_full(&jpeg).unwrap();
        assert_eq!(
            (out.width, out.height, out.pixels.len()),
            (64, 48, 64 * 48 * 3)
        );
    }

    #[test]
    fn gray_and_cmyk_come_out_rgb() {
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        let gray = encode_jpeg(&[200u8; 32 * 16], 32, 16, EncodePixels::Gray, 90, false).unwrap();
        let out = dec.decode_full(&gray).unwrap();
        assert_eq!(out.pixels.len(), 32 * 16 * 3);
        assert!(out.pixels.iter().all(|&v| v.abs_diff(200) <= 2));
        // Adobe-style CMYK: no ink on C, full on M and Y... all stored inverted.
        let cmyk: Vec<u8> = (0..32 * 16).flat_map(|_| [255u8, 0, 0, 255]).collect();
        let jpeg = encode_jpeg(&cmyk, 32, 16, EncodePixels::Cmyk, 95, false).unwrap();
        let out = dec.decode_full(&jpeg).unwrap();
        assert_eq!(out.pixels.len(), 32 * 16 * 3);
        let (r, g, b) = (out.pixels[0], out.pixels[1], out.pixels[2]);
        assert!(r > 240 && g < 15 && b < 15, "({r},{g},{b})");
    }

    /// Offsets of every start-of-scan marker.
    fn scans(jpeg: &[u8]) -> Vec<usize> {
        (0..jpeg.len() - 1)
            .filter(|&i| jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA)
            .collect()
    }

    #[test]
    fn a_header_of_another_image_is_refused() {
        let small = encode_jpeg(&gradient(32, 16), 32, 16, EncodePixels::Rgb, 90, false).unwrap();
        let large = encode_jpeg(&gradient(96, 64), 96, 64, EncodePixels::Rgb, 90, false).unwrap();
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        let header = dec.header(&small).unwrap();
        let err = dec
            .decode(&large, &header, Rect::full(32, 16), (32, 16))
            .unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
        assert!(dec.decode_full(&large).is_ok());
    }

    #[test]
    fn only_stray_bytes_before_the_end_marker_are_forgiven() {
        let clean = encode_jpeg(&gradient(96, 64), 96, 64, EncodePixels::Rgb, 90, true).unwrap();
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        let reference = dec.decode_full(&clean).unwrap().pixels.to_vec();
        // Stray bytes before the end marker (ImageNet has such files): the image is intact,
        // progressive or baseline.
        let mut trailing = clean[..clean.len() - 2].to_vec();
        trailing.extend([1, 2, 3, 0xFF, 0xD9]);
        assert_eq!(dec.decode_full(&trailing).unwrap().pixels, &reference[..]);
        let baseline =
            encode_jpeg(&gradient(96, 64), 96, 64, EncodePixels::Rgb, 90, false).unwrap();
        let reference = dec.decode_full(&baseline).unwrap().pixels.to_vec();
        let mut trailing = baseline[..baseline.len() - 2].to_vec();
        trailing.extend([7; 40]);
        trailing.extend([0xFF, 0xD9]);
        assert_eq!(dec.decode_full(&trailing).unwrap().pixels, &reference[..]);
        // The same words come when libjpeg skips the rest of the scan to the end marker (a
        // restart interval without restart markers): that image is not intact.
        let sos = baseline.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
        let mut skipped = baseline[..sos].to_vec();
        skipped.extend([0xFF, 0xDD, 0x00, 0x04, 0x00, 0x01]);
        skipped.extend(&baseline[sos..]);
        let err = dec.decode_full(&skipped).unwrap_err();
        assert!(matches!(err, Cause::Corrupt(_)), "{err:?}");
        // Stray bytes between scans, then the file cut short: libjpeg formats only the
        // first warning, so the truncation must not hide behind the stray bytes.
        let second = scans(&clean)[1];
        let mut damaged = clean[..second].to_vec();
        damaged.extend([1, 2, 3]);
        damaged.extend(&clean[second..clean.len() * 4 / 5]);
        let err = dec.decode_full(&damaged).unwrap_err();
        assert!(matches!(err, Cause::Corrupt(_)), "{err:?}");
    }

    /// A progressive grayscale image followed by `extra` AC scans that libjpeg accepts
    /// without a warning (first scans at full precision, which the image's last refinement
    /// scan leaves expected), each coding every block as an end-of-band in one bit.
    fn with_extra_scans(extra: usize) -> Vec<u8> {
        let (w, h) = (512u32, 512u32);
        let gray: Vec<u8> = gradient(w, h).chunks(3).map(|p| p[0]).collect();
        let image = encode_jpeg(&gray, w, h, EncodePixels::Gray, 90, true).unwrap();
        let mut file = image[..image.len() - 2].to_vec();
        // A Huffman table (AC, slot 3) with one symbol: 0x00 (end of band) coded as '0'.
        file.extend([0xFF, 0xC4, 0, 20, 0x13, 1]);
        file.extend([0; 15]);
        file.push(0x00);
        let blocks = (w / 8 * h / 8) as usize;
        for _ in 0..extra {
            // SOS: one component (id 1), tables DC 0 / AC 3, Ss 1, Se 63, Ah 0, Al 0.
            file.extend([0xFF, 0xDA, 0, 8, 1, 1, 0x03, 1, 63, 0x00]);
            file.extend(std::iter::repeat_n(0u8, blocks / 8));
        }
        file.extend([0xFF, 0xD9]);
        file
    }

    #[test]
    fn thousands_of_scans_are_refused() {
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        // The construction is valid: with a few extra scans the image decodes.
        assert!(dec.decode_full(&with_extra_scans(3)).is_ok());
        let err = dec.decode_full(&with_extra_scans(10_000)).unwrap_err();
        assert!(err.to_string().contains("scans"), "{err}");
    }

    #[test]
    fn huge_buffers_are_not_kept() {
        let (w, h) = (6000u32, 4000u32);
        let big = encode_jpeg(
            &vec![90; (w * h) as usize],
            w,
            h,
            EncodePixels::Gray,
            50,
            false,
        )
        .unwrap();
        let small = encode_jpeg(&gradient(32, 16), 32, 16, EncodePixels::Rgb, 90, false).unwrap();
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        dec.decode_full(&big).unwrap();
        assert!(dec.pixels.capacity() >= (w * h * 3) as usize);
        dec.decode_full(&small).unwrap();
        assert!(dec.pixels.capacity() < RETAINED_BUFFER_BYTES);
    }

    #[test]
    fn bad_data_is_a_cause_not_a_panic() {
        let mut dec = Decoder::new(1_000).unwrap();
        assert_eq!(dec.header(&[]), Err(Cause::Empty));
        assert_eq!(
            dec.header(b"GIF89a...."),
            Err(Cause::UnknownFormat(Modality::Image))
        );
        let jpeg = encode_jpeg(&gradient(64, 48), 64, 48, EncodePixels::Rgb, 90, false).unwrap();
        assert!(matches!(
            dec.header(&jpeg),
            Err(Cause::TooManyPixels {
                width: 64,
                height: 48,
                limit: 1_000
            })
        ));
        let mut dec = Decoder::new(DEFAULT_MAX_PIXELS).unwrap();
        let big = encode_jpeg(&gradient(256, 192), 256, 192, EncodePixels::Rgb, 90, false).unwrap();
        let truncated = &big[..big.len() * 3 / 4];
        let header = dec.header(truncated).unwrap();
        let err = dec
            .decode(truncated, &header, Rect::full(256, 192), (256, 192))
            .unwrap_err();
        assert!(matches!(err, Cause::Corrupt(_)), "{err:?}");
        let head = dec.header(&jpeg[..4]);
        assert!(matches!(head, Err(Cause::Corrupt(_))), "{head:?}");
    }
}
