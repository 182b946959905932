//! A page's bytes decompressed by nostall, to exactly the size its header declares.
//!
//! The `parquet` crate's codecs trust the stream more than the header: its gzip and LZ4
//! frame decoders read to the stream's end whatever the page declared (a page of 64 KiB
//! could inflate to a gigabyte). Here every codec writes into a buffer of the declared
//! size and no more, and a stream that ends short of it, or would go past it, is damage.
//! The size itself was bounded before any of this is allocated ([`super::pages`]).

use std::io::Read;

use parquet::basic::Compression;

/// Appends `input`, decompressed with `codec`, to `out`: exactly `size` bytes, or an
/// error (and `out` as it was).
pub(super) fn inflate_into(
    codec: Compression,
    input: &[u8],
    size: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let start = out.len();
    let mut attempt = |decode: &dyn Fn(&mut Vec<u8>) -> Result<(), String>| {
        out.reserve_exact(size + 1);
        let done = decode(out).and_then(|()| match out.len() - start {
            n if n == size => Ok(()),
            n => Err(format!(
                "it decompresses to {n} bytes where its header declares {size}"
            )),
        });
        if done.is_err() {
            out.truncate(start);
        }
        done
    };
    match codec {
        Compression::UNCOMPRESSED => attempt(&|out| {
            out.extend_from_slice(input);
            Ok(())
        }),
        Compression::SNAPPY => attempt(&|out| snappy(input, size, out)),
        Compression::GZIP(_) => {
            attempt(&|out| read_at_most(flate2::read::MultiGzDecoder::new(input), size, out))
        }
        Compression::LZ4_RAW => attempt(&|out| lz4_block(input, size, out)),
        Compression::LZ4 => attempt(&|out| lz4_hadoop(input, size, out))
            // As the `parquet` crate does, for files of older writers: an LZ4 frame, then
            // a bare LZ4 block.
            .or_else(|_| {
                attempt(&|out| read_at_most(lz4_flex::frame::FrameDecoder::new(input), size, out))
            })
            .or_else(|_| attempt(&|out| lz4_block(input, size, out)))
            .map_err(|_| "not LZ4 data in any framing Parquet writers use".to_string()),
        Compression::ZSTD(_) => attempt(&|out| {
            let decoder =
                zstd::stream::read::Decoder::with_buffer(input).map_err(|e| e.to_string())?;
            read_at_most(decoder, size, out)
        }),
        other => Err(format!(
            "compressed with {other}, which nostall does not read"
        )),
    }
}

/// `input`, decompressed with `codec` to exactly `size` bytes.
#[cfg(test)]
fn inflate(codec: Compression, input: &[u8], size: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    inflate_into(codec, input, size, &mut out).map(|()| out)
}

/// Appends what `reader` reads to `out`, refusing more than `size` bytes (`out` has room
/// for one more, which tells a stream going past `size` without growing it).
fn read_at_most(reader: impl Read, size: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    reader
        .take(size as u64 + 1)
        .read_to_end(out)
        .map_err(|e| e.to_string())?;
    match out.len() - start > size {
        true => Err(format!(
            "it decompresses to more than its header's {size} bytes"
        )),
        false => Ok(()),
    }
}

/// `size` zeroed bytes appended to `out`, to decode into.
fn room(out: &mut Vec<u8>, size: usize) -> &mut [u8] {
    let start = out.len();
    out.resize(start + size, 0);
    &mut out[start..]
}

fn snappy(input: &[u8], size: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let declared = snap::raw::decompress_len(input).map_err(|e| e.to_string())?;
    if declared != size {
        return Err(format!(
            "its Snappy stream declares {declared} bytes where its header declares {size}"
        ));
    }
    snap::raw::Decoder::new()
        .decompress(input, room(out, size))
        .map(drop)
        .map_err(|e| e.to_string())
}

fn lz4_block(input: &[u8], size: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    let n = lz4_flex::block::decompress_into(input, room(out, size)).map_err(|e| e.to_string())?;
    out.truncate(start + n);
    Ok(())
}

/// Hadoop's LZ4 framing: blocks, each behind its decompressed and compressed sizes (two
/// big-endian `u32`), filling `size` bytes between them.
fn lz4_hadoop(mut input: &[u8], size: usize, out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    let buffer = room(out, size);
    let mut filled = 0;
    while !input.is_empty() {
        let (Some(raw), Some(packed)) = (input.get(0..4), input.get(4..8)) else {
            return Err("a block prefix cut off".into());
        };
        let raw = u32::from_be_bytes(raw.try_into().expect("4 bytes")) as usize;
        let packed = u32::from_be_bytes(packed.try_into().expect("4 bytes")) as usize;
        let block = input.get(8..8 + packed).ok_or("a block cut off")?;
        let room = buffer
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
    out.truncate(start + filled);
    Ok(())
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
