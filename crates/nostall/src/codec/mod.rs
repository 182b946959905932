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

pub use turbo::{encode_jpeg, EncodePixels};

use crate::error::Cause;
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
pub fn sniff(data: &[u8]) -> Option<Format> {
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

/// A reusable decoder: one per thread, so steady state allocates nothing.
pub struct Decoder {
    turbo: Handle,
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
        Ok(Decoder {
            turbo: Handle::decompressor(false)?,
            pixels: Vec::new(),
            scratch: Vec::new(),
            max_pixels,
        })
    }

    /// Reads the header: format, dimensions, and the pixel-limit check.
    pub fn header(&mut self, data: &[u8]) -> Result<Header, Cause> {
        if data.is_empty() {
            return Err(Cause::Empty);
        }
        let header = match sniff(data).ok_or(Cause::UnknownFormat)? {
            Format::Jpeg => {
                let jpeg = self.turbo.read_header(data)?;
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
        let (w, h) = self.turbo.decode_rgb(
            data,
            jpeg,
            eighths,
            crop,
            &mut self.pixels,
            &mut self.scratch,
        )?;
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
fn clamp(r: Rect, width: u32, height: u32) -> Rect {
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

    #[test]
    fn bad_data_is_a_cause_not_a_panic() {
        let mut dec = Decoder::new(1_000).unwrap();
        assert_eq!(dec.header(&[]), Err(Cause::Empty));
        assert_eq!(dec.header(b"GIF89a...."), Err(Cause::UnknownFormat));
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
