//! A vector field's member as `float32`s: a NumPy `.npy` array or a JSON array of numbers
//! (what webdataset's decoders and a CLIP embedding dump give), its element count checked
//! against the field's length.
//!
//! A `.npy` file is a magic string, a version, a header's length and a header (a Python
//! dict literal: `{'descr': '<f4', 'fortran_order': False, 'shape': (512,), }`), then the
//! elements. The header is read for its type and shape only, bounded, and the data's
//! length must be exactly what they say; then the elements are written, if they are the
//! field's count. A JSON array is read once, its numbers written as they come (none past
//! the field's length), keeping nothing: the member's bytes are all it costs.
//!
//! Before either, the member's size is checked against the most that `length` numbers
//! take in either form ([`most_bytes`]): a member of gigabytes is refused for its size,
//! not read to find out that it holds too many numbers.

use super::json;

/// The longest `.npy` header read (NumPy writes a few dozen bytes).
const MAX_HEADER: usize = 64 << 10;

/// A `.npy` file's bytes before its header: the magic string, the version, the header's
/// length (a `u32` from version 2).
const NPY_PREAMBLE: usize = 12;

/// The most bytes one number of a vector takes: 8 in a `.npy` array (`float64`); in JSON,
/// 17 significant digits with a sign, a point and an exponent (24 characters), its comma,
/// and the indentation of a pretty-printed array, with room to spare.
const MOST_PER_NUMBER: usize = 64;

/// The most bytes a member of a vector of `length` numbers may take: a `.npy` array's
/// preamble, its longest header and its elements, or a JSON array of as many numbers
/// (and [`MAX_HEADER`] of whitespace).
pub(super) fn most_bytes(length: usize) -> usize {
    NPY_PREAMBLE + MAX_HEADER + length.saturating_mul(MOST_PER_NUMBER)
}

/// Writes `member`'s numbers into `slot` (`length` native-endian `f32`s).
///
/// # Errors
///
/// What is wrong with the member, in words: larger than any form of `length` numbers,
/// not a `.npy` array nor a JSON array of numbers, an element type not read, a count
/// other than `length`.
pub(super) fn put(member: &[u8], length: usize, slot: &mut [u8]) -> Result<(), String> {
    debug_assert_eq!(slot.len(), length * 4);
    let most = most_bytes(length);
    if member.len() > most {
        return Err(format!(
            "a member of {} bytes, more than a .npy array or a JSON array of {length} numbers \
             takes (at most {most} bytes): a vector of another length?",
            member.len()
        ));
    }
    let mut out = slot.chunks_exact_mut(4);
    let mut write = |value: f64| {
        if let Some(out) = out.next() {
            out.copy_from_slice(&(value as f32).to_ne_bytes());
        }
    };
    let count = match member.strip_prefix(b"\x93NUMPY") {
        Some(rest) => {
            let array = npy(rest)?;
            let count = array.data.len() / array.size;
            if count == length {
                array
                    .data
                    .chunks_exact(array.size)
                    .for_each(|b| write((array.read)(b)));
            }
            count
        }
        None => json::numbers(member, write)
            .map_err(|e| format!("not a .npy array nor a JSON array of numbers ({e})"))?,
    };
    if count != length {
        return Err(format!("{count} numbers, the field holds {length}"));
    }
    Ok(())
}

/// The elements of a `.npy` array: little-endian, of `size` bytes, decoded by `read`.
struct Npy<'a> {
    data: &'a [u8],
    size: usize,
    read: fn(&[u8]) -> f64,
}

fn npy(rest: &[u8]) -> Result<Npy<'_>, String> {
    let short = || "a .npy array cut short".to_string();
    let (&major, rest) = rest.split_first().ok_or_else(short)?;
    let rest = rest.get(1..).ok_or_else(short)?;
    let (len, rest) = match major {
        1 => {
            let b = rest.get(..2).ok_or_else(short)?;
            (u16::from_le_bytes([b[0], b[1]]) as usize, &rest[2..])
        }
        2 | 3 => {
            let b = rest.get(..4).ok_or_else(short)?;
            (
                u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
                &rest[4..],
            )
        }
        v => return Err(format!(".npy version {v} is not read (1 to 3 are)")),
    };
    if len > MAX_HEADER {
        return Err(format!(
            "a .npy header of {len} bytes (at most {MAX_HEADER})"
        ));
    }
    let header = rest.get(..len).ok_or_else(short)?;
    let data = &rest[len..];
    let header = std::str::from_utf8(header).map_err(|_| "a .npy header not text".to_string())?;
    let descr = quoted_after(header, "'descr'").ok_or("a .npy header without 'descr'")?;
    if header.contains("'fortran_order': True") {
        // One dimension or many, the elements are the same set; their order differs, and a
        // vector's order matters: refused rather than read transposed.
        let shape = shape(header)?;
        if shape.iter().filter(|&&d| d > 1).count() > 1 {
            return Err("a .npy array in Fortran order (write it C-contiguous)".into());
        }
    }
    let (size, read): (usize, fn(&[u8]) -> f64) = match descr {
        "<f4" => (4, |b| f32::from_le_bytes(b.try_into().expect("4")) as f64),
        "<f8" => (8, |b| f64::from_le_bytes(b.try_into().expect("8"))),
        "<f2" => (2, |b| half(u16::from_le_bytes(b.try_into().expect("2")))),
        "<i8" => (8, |b| i64::from_le_bytes(b.try_into().expect("8")) as f64),
        "<i4" => (4, |b| i32::from_le_bytes(b.try_into().expect("4")) as f64),
        "<i2" => (2, |b| i16::from_le_bytes(b.try_into().expect("2")) as f64),
        "|i1" => (1, |b| b[0] as i8 as f64),
        "|u1" => (1, |b| b[0] as f64),
        other => {
            return Err(format!(
                "a .npy array of {other:?}: float16/32/64, int8/16/32/64 and uint8 \
                 (little-endian) are read"
            ))
        }
    };
    let elements = shape(header)?
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or("a .npy shape past any size")?;
    if elements.checked_mul(size) != Some(data.len()) {
        return Err(format!(
            "a .npy array of {elements} elements of {size} bytes holding {} bytes",
            data.len()
        ));
    }
    Ok(Npy { data, size, read })
}

/// The text in quotes after `key` and its colon.
fn quoted_after<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let rest = header[header.find(key)? + key.len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('\'')?;
    Some(&rest[..rest.find('\'')?])
}

/// The dimensions of the header's `'shape': (a, b, )`.
fn shape(header: &str) -> Result<Vec<usize>, String> {
    let at = header
        .find("'shape'")
        .ok_or("a .npy header without 'shape'")?;
    let rest = &header[at + "'shape'".len()..];
    let open = rest.find('(').ok_or("a .npy shape not a tuple")?;
    let close = rest[open..].find(')').ok_or("a .npy shape not a tuple")? + open;
    rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().map_err(|_| format!("a .npy dimension {d:?}")))
        .collect()
}

/// An IEEE half-precision number's value.
fn half(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exponent = ((bits >> 10) & 0x1f) as i32;
    let fraction = (bits & 0x3ff) as f64;
    match exponent {
        0 => sign * fraction * 2f64.powi(-24),
        0x1f if fraction == 0.0 => sign * f64::INFINITY,
        0x1f => f64::NAN,
        e => sign * (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A `.npy` file as NumPy 1.x writes one.
    pub(in crate::fields) fn npy_file(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn floats(slot: &[u8]) -> Vec<f32> {
        slot.chunks_exact(4)
            .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn npy_arrays_and_json_arrays_become_float32() {
        let mut slot = vec![0u8; 12];
        let data: Vec<u8> = [1.5f32, -2.0, 3.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        put(&npy_file("<f4", "(3,)", &data), 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [1.5, -2.0, 3.25]);
        let data: Vec<u8> = [7i64, -8, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
        put(&npy_file("<i8", "(1, 3)", &data), 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [7.0, -8.0, 9.0]);
        let data: Vec<u8> = [0x3c00u16, 0xc000, 0x3800]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        put(&npy_file("<f2", "(3,)", &data), 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [1.0, -2.0, 0.5]);
        put(b"[0.5, 1e2, -3]", 3, &mut slot).unwrap();
        assert_eq!(floats(&slot), [0.5, 100.0, -3.0]);
    }

    #[test]
    fn hostile_members_are_reasons_not_panics() {
        let mut slot = vec![0u8; 8];
        let two: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"[1, 2, 3]".to_vec(), "3 numbers, the field holds 2"),
            (b"{\"a\": 1}".to_vec(), "not a .npy array"),
            (
                format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
                "not a .npy",
            ),
            (npy_file("<f4", "(3,)", &two), "holding 8 bytes"),
            (npy_file("<f4", "(2,)", &two[..7]), "holding 7 bytes"),
            (npy_file("<f8", "(2,)", &[0; 12]), "holding 12 bytes"),
            (
                format!("[{}1]", "1,".repeat(most_bytes(2))).into_bytes(),
                "more than a .npy array or a JSON array of 2 numbers takes",
            ),
            (
                npy_file("<f4", "(2,)", &vec![0; most_bytes(2)]),
                "more than a .npy array",
            ),
            (b"[1e999, 2]".to_vec(), "out of range"),
            (b"[1, 2".to_vec(), "expected ',' or ']'"),
            (npy_file(">f4", "(2,)", &two), "are read"),
            (
                npy_file("<f4", "(99999999999999999, 99999999999)", &two),
                "past any size",
            ),
            (npy_file("<f4", "(x,)", &two), "dimension"),
            (b"\x93NUMPY\x01".to_vec(), "cut short"),
            (b"\x93NUMPY\x09\x00\x00\x00".to_vec(), "version 9"),
            (
                [b"\x93NUMPY\x02\x00".as_slice(), &u32::MAX.to_le_bytes()].concat(),
                "header of",
            ),
        ];
        for (member, expect) in cases {
            let why = put(&member, 2, &mut slot).unwrap_err();
            assert!(why.contains(expect), "{expect}: {why}");
        }
        // Numbers past the field's length are counted, not written past its slot.
        let why = put(b"[1, 2, 3, 4, 5]", 2, &mut slot).unwrap_err();
        assert_eq!(why, "5 numbers, the field holds 2");
        // A member of exactly the most bytes is read.
        let padded = format!("[1, 2{}]", " ".repeat(most_bytes(2) - 6));
        assert_eq!(padded.len(), most_bytes(2));
        put(padded.as_bytes(), 2, &mut slot).unwrap();
        assert_eq!(floats(&slot), [1.0, 2.0]);
        // Every cut of a good array is an error, never a panic.
        let good = npy_file("<f4", "(2,)", &two);
        for cut in 0..good.len() {
            assert!(put(&good[..cut], 2, &mut slot).is_err(), "cut at {cut}");
        }
    }
}
