//! A page's bytes decompressed by nostall, to exactly the size its header declares.
//!
//! The `parquet` crate's codecs trust the stream more than the header: its gzip and LZ4
//! frame decoders read to the stream's end whatever the page declared (a page of 64 KiB
//! could inflate to a gigabyte). Here every codec writes into a buffer of the declared
//! size and no more, and a stream that ends short of it, or would go past it, is damage.
//! The size itself was bounded before any of this is allocated ([`super::pages`]).

use std::io::Read;

use parquet::basic::Compression;

/// `input`, decompressed with `codec` to exactly `size` bytes.
pub(super) fn inflate(codec: Compression, input: &[u8], size: usize) -> Result<Vec<u8>, String> {
    let out = match codec {
        Compression::UNCOMPRESSED => Ok(input.to_vec()),
        Compression::SNAPPY => snappy(input, size),
        Compression::GZIP(_) => read_exactly(flate2::read::MultiGzDecoder::new(input), size),
        Compression::LZ4_RAW => lz4_block(input, size),
        Compression::LZ4 => exact(lz4_hadoop(input, size), size)
            // As the `parquet` crate does, for files of older writers: an LZ4 frame, then
            // a bare LZ4 block.
            .or_else(|_| {
                exact(
                    read_exactly(lz4_flex::frame::FrameDecoder::new(input), size),
                    size,
                )
            })
            .or_else(|_| lz4_block(input, size))
            .map_err(|_| "not LZ4 data in any framing Parquet writers use".to_string()),
        Compression::ZSTD(_) => read_exactly(
            zstd::stream::read::Decoder::with_buffer(input).map_err(|e| e.to_string())?,
            size,
        ),
        other => Err(format!(
            "compressed with {other}, which nostall does not read"
        )),
    }?;
    exact(Ok(out), size)
}

/// `out`, if it holds `size` bytes.
fn exact(out: Result<Vec<u8>, String>, size: usize) -> Result<Vec<u8>, String> {
    let out = out?;
    match out.len() == size {
        true => Ok(out),
        false => Err(format!(
            "it decompresses to {} bytes where its header declares {size}",
            out.len()
        )),
    }
}

/// Reads `reader` to its end, refusing more than `size` bytes.
fn read_exactly(reader: impl Read, size: usize) -> Result<Vec<u8>, String> {
    // Room for the one byte too many that tells a stream going past `size`, so that
    // reading it never grows the buffer.
    let mut out = Vec::with_capacity(size + 1);
    reader
        .take(size as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    match out.len() > size {
        true => Err(format!(
            "it decompresses to more than its header's {size} bytes"
        )),
        false => Ok(out),
    }
}

fn snappy(input: &[u8], size: usize) -> Result<Vec<u8>, String> {
    let declared = snap::raw::decompress_len(input).map_err(|e| e.to_string())?;
    if declared != size {
        return Err(format!(
            "its Snappy stream declares {declared} bytes where its header declares {size}"
        ));
    }
    let mut out = vec![0; size];
    let n = snap::raw::Decoder::new()
        .decompress(input, &mut out)
        .map_err(|e| e.to_string())?;
    out.truncate(n);
    Ok(out)
}

fn lz4_block(input: &[u8], size: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![0; size];
    let n = lz4_flex::block::decompress_into(input, &mut out).map_err(|e| e.to_string())?;
    out.truncate(n);
    Ok(out)
}

/// Hadoop's LZ4 framing: blocks, each behind its decompressed and compressed sizes (two
/// big-endian `u32`), filling `size` bytes between them.
fn lz4_hadoop(mut input: &[u8], size: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![0; size];
    let mut filled = 0;
    while !input.is_empty() {
        let (Some(raw), Some(packed)) = (input.get(0..4), input.get(4..8)) else {
            return Err("a block prefix cut off".into());
        };
        let raw = u32::from_be_bytes(raw.try_into().expect("4 bytes")) as usize;
        let packed = u32::from_be_bytes(packed.try_into().expect("4 bytes")) as usize;
        let block = input.get(8..8 + packed).ok_or("a block cut off")?;
        let room = out
            .get_mut(filled..)
            .and_then(|rest| rest.get_mut(..raw))
            .ok_or("blocks larger than the page")?;
        let n = lz4_flex::block::decompress_into(block, room).map_err(|e| e.to_string())?;
        if n != raw {
            return Err("a block shorter than its prefix declares".into());
        }
        filled += raw;
        input = &input[8 + packed..];
    }
    out.truncate(filled);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn each_codec_reads_exactly_the_declared_size() {
        let text: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let n = text.len();
        let snappy = snap::raw::Encoder::new().compress_vec(&text).unwrap();
        let lz4 = lz4_flex::block::compress(&text);
        let mut hadoop = (n as u32).to_be_bytes().to_vec();
        hadoop.extend((lz4.len() as u32).to_be_bytes());
        hadoop.extend(&lz4);
        let zstd = zstd::bulk::compress(&text, 3).unwrap();
        let cases = [
            (Compression::SNAPPY, snappy),
            (Compression::GZIP(Default::default()), gzip(&text)),
            (Compression::LZ4_RAW, lz4.clone()),
            (Compression::LZ4, hadoop),
            (Compression::LZ4, lz4),
            (Compression::ZSTD(Default::default()), zstd),
            (Compression::UNCOMPRESSED, text.clone()),
        ];
        for (codec, packed) in cases {
            assert_eq!(inflate(codec, &packed, n).as_ref(), Ok(&text), "{codec}");
            assert!(
                inflate(codec, &packed, n - 1).is_err(),
                "{codec}, one short"
            );
            assert!(inflate(codec, &packed, n + 1).is_err(), "{codec}, one over");
            let cut = &packed[..packed.len() / 2];
            assert!(inflate(codec, cut, n).is_err(), "{codec}, cut");
        }
    }

    #[test]
    fn a_bomb_stops_at_the_declared_size() {
        // 16 MiB of zeros in a stream of about 16 KiB, declared as 64 KiB.
        let bomb = gzip(&vec![0; 16 << 20]);
        let err = inflate(Compression::GZIP(Default::default()), &bomb, 64 << 10).unwrap_err();
        assert!(err.contains("more than"), "{err}");
        let mut frame = lz4_flex::frame::FrameEncoder::new(Vec::new());
        frame.write_all(&vec![0; 16 << 20]).unwrap();
        let frame = frame.finish().unwrap();
        assert!(inflate(Compression::LZ4, &frame, 64 << 10).is_err());
    }
}
