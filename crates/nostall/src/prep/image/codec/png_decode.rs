//! PNG through the `png` crate, normalised to 8-bit RGB.

use crate::error::Cause;

/// Width and height from the IHDR chunk, without starting a decoder.
pub(super) fn dimensions(data: &[u8]) -> Result<(u32, u32), Cause> {
    // Signature (8), chunk length (4), "IHDR" (4), width (4), height (4).
    if data.len() < 24 || &data[12..16] != b"IHDR" {
        return Err(Cause::Corrupt(
            "PNG file too short or IHDR chunk missing".into(),
        ));
    }
    let word = |at: usize| u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let (width, height) = (word(16), word(20));
    if width == 0 || height == 0 {
        return Err(Cause::Corrupt(format!(
            "header declares a {width}x{height} image"
        )));
    }
    Ok((width, height))
}

/// Refuses a palette the `png` crate would trust blindly: its palette expansion indexes
/// out of bounds (a panic) on a PLTE chunk that is not whole RGB entries or holds more
/// than 256 (found by fuzzing).
fn check_palette(data: &[u8]) -> Result<(), Cause> {
    let mut at = 8usize;
    while let Some(head) = data.get(at..at.saturating_add(8)) {
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if &head[4..8] == b"PLTE" && (len == 0 || !len.is_multiple_of(3) || len > 3 * 256) {
            return Err(Cause::Corrupt(format!(
                "PNG palette of {len} bytes (whole RGB entries, at most 256)"
            )));
        }
        at = at.saturating_add(12).saturating_add(len);
    }
    Ok(())
}

/// Decodes the whole image into `out` as RGB, returning (width, height).
pub(super) fn decode_rgb(
    data: &[u8],
    max_pixels: u64,
    out: &mut Vec<u8>,
) -> Result<(u32, u32), Cause> {
    let corrupt = |e: png::DecodingError| Cause::Corrupt(e.to_string());
    check_palette(data)?;
    let mut decoder = png::Decoder::new(data);
    // Expand palettes and low bit depths, strip 16-bit to 8: everything becomes 8-bit.
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    // The pixel limit is checked from the header already; this bounds what the crate may
    // allocate (RGBA at 8 bits) in case the header lies.
    decoder.set_limits(png::Limits {
        bytes: (max_pixels as usize).saturating_mul(4),
    });
    let mut reader = decoder.read_info().map_err(corrupt)?;
    let mut raw = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut raw).map_err(corrupt)?;
    let (width, height) = (frame.width, frame.height);
    let raw = &raw[..frame.buffer_size()];
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err(Cause::Corrupt("palette was not expanded".into())),
    };
    out.clear();
    out.reserve(width as usize * height as usize * 3);
    // Rows may be padded: walk them by line size.
    let line = frame.line_size;
    for row in raw.chunks(line).take(height as usize) {
        for px in row[..width as usize * channels].chunks_exact(channels) {
            // Alpha is dropped, as PIL's convert("RGB") does.
            match channels {
                1 | 2 => out.extend([px[0]; 3]),
                _ => out.extend(&px[..3]),
            }
        }
    }
    Ok((width, height))
}

/// Decodes a one-channel PNG (grey or palette, 1 to 8 bits a pixel) as its values, one
/// byte a pixel, palette indices not expanded: a segmentation's label map, as PIL's
/// `np.array(Image.open(path))` reads VOC's palette PNGs and ADE20K's grey ones. Returns
/// (width, height) and the values, row-major.
///
/// # Errors
///
/// [`Cause::Corrupt`] for a damaged file, more pixels than `max_pixels`, or another
/// colour type or depth (in words: what to save it as).
pub(crate) fn decode_label_map(data: &[u8], max_pixels: u64) -> Result<(u32, u32, Vec<u8>), Cause> {
    let corrupt = |e: png::DecodingError| Cause::Corrupt(e.to_string());
    let (width, height) = dimensions(data)?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(Cause::Corrupt(format!(
            "a label map of {width}x{height}, more than {max_pixels} pixels"
        )));
    }
    check_palette(data)?;
    let mut decoder = png::Decoder::new(data);
    decoder.set_transformations(png::Transformations::IDENTITY);
    decoder.set_limits(png::Limits {
        bytes: (max_pixels as usize).saturating_mul(2),
    });
    let mut reader = decoder.read_info().map_err(corrupt)?;
    let info = reader.info();
    let (color, depth) = (info.color_type, info.bit_depth as u8);
    if !matches!(color, png::ColorType::Grayscale | png::ColorType::Indexed) || depth > 8 {
        return Err(Cause::Corrupt(format!(
            "a label map is one channel of at most 8 bits (grey or palette), and this PNG \
             is {color:?} at {depth} bits: save it as mode \"L\" or \"P\""
        )));
    }
    let mut raw = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut raw).map_err(corrupt)?;
    if (frame.width, frame.height) != (width, height) {
        return Err(Cause::Corrupt(
            "the PNG's frame is not its header's size".into(),
        ));
    }
    let (w, depth) = (width as usize, usize::from(depth));
    let mut out = Vec::with_capacity(w * height as usize);
    for row in raw.chunks(frame.line_size).take(height as usize) {
        if depth == 8 {
            out.extend_from_slice(&row[..w]);
            continue;
        }
        // Pixels packed from each byte's high bits, as PNG packs them.
        let mask = (1u8 << depth) - 1;
        out.extend((0..w).map(|x| {
            let bit = x * depth;
            (row[bit / 8] >> (8 - depth - bit % 8)) & mask
        }));
    }
    Ok((width, height, out))
}

/// Decodes a COCO panoptic PNG (RGB at 8 bits, each pixel's segment id
/// `R + 256 G + 65536 B`) into a label map, one byte a pixel: `label` of each pixel's id
/// (asked once a run of equal ids, as segments cover whole regions). Returns (width,
/// height) and the labels, row-major.
///
/// # Errors
///
/// [`Cause::Corrupt`] for a damaged file, more pixels than `max_pixels`, or another
/// colour type or depth than RGB at 8 bits (in words).
pub(crate) fn decode_segment_ids(
    data: &[u8],
    max_pixels: u64,
    mut label: impl FnMut(u32) -> u8,
) -> Result<(u32, u32, Vec<u8>), Cause> {
    let corrupt = |e: png::DecodingError| Cause::Corrupt(e.to_string());
    let (width, height) = dimensions(data)?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(Cause::Corrupt(format!(
            "a PNG of segment ids of {width}x{height}, more than {max_pixels} pixels"
        )));
    }
    check_palette(data)?;
    let mut decoder = png::Decoder::new(data);
    decoder.set_transformations(png::Transformations::IDENTITY);
    decoder.set_limits(png::Limits {
        bytes: (max_pixels as usize).saturating_mul(4),
    });
    let mut reader = decoder.read_info().map_err(corrupt)?;
    let info = reader.info();
    let (color, depth) = (info.color_type, info.bit_depth as u8);
    if color != png::ColorType::Rgb || depth != 8 {
        return Err(Cause::Corrupt(format!(
            "a panoptic PNG holds segment ids as RGB at 8 bits, and this PNG is {color:?} at \
             {depth} bits: save it as mode \"RGB\""
        )));
    }
    let mut raw = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut raw).map_err(corrupt)?;
    if (frame.width, frame.height) != (width, height) {
        return Err(Cause::Corrupt(
            "the PNG's frame is not its header's size".into(),
        ));
    }
    let w = width as usize;
    let mut out = Vec::with_capacity(w * height as usize);
    let mut last = None;
    for row in raw.chunks(frame.line_size).take(height as usize) {
        for px in row[..3 * w].chunks_exact(3) {
            let id = u32::from(px[0]) | (u32::from(px[1]) << 8) | (u32::from(px[2]) << 16);
            let value = match last {
                Some((seen, value)) if seen == id => value,
                _ => {
                    let value = label(id);
                    last = Some((id, value));
                    value
                }
            };
            out.push(value);
        }
    }
    Ok((width, height, out))
}
