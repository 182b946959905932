//! A NumPy `.npy` array's elements, read for a vector field's member and for each array
//! of an `.npz` archive: its header read for its type and shape only, bounded, and its
//! data's length held to exactly what they say.
//!
//! A `.npy` file is a magic string, a version, a header's length and a header (a Python
//! dict literal: `{'descr': '<f4', 'fortran_order': False, 'shape': (512,), }`), then the
//! elements, little-endian as NumPy writes them on every machine it runs on.

/// The magic string a `.npy` file starts with.
pub(super) const MAGIC: &[u8] = b"\x93NUMPY";

/// The longest `.npy` header read (NumPy writes a few dozen bytes).
const MAX_HEADER: usize = 64 << 10;

/// A `.npy` file's bytes before its header: the magic string, the version, the header's
/// length (a `u32` from version 2).
const PREAMBLE: usize = 12;

/// The most bytes one element takes (`float64`, `int64`).
const MOST_PER_ELEMENT: usize = 8;

/// The most bytes a `.npy` file of `elements` elements of any type read takes.
pub(super) fn most_bytes(elements: usize) -> usize {
    PREAMBLE + MAX_HEADER + elements.saturating_mul(MOST_PER_ELEMENT)
}

/// The elements of a `.npy` array: little-endian, of `size` bytes, decoded by `read`.
pub(super) struct Npy<'a> {
    data: &'a [u8],
    size: usize,
    read: fn(&[u8]) -> f64,
}

impl Npy<'_> {
    /// How many elements it holds.
    pub(super) fn count(&self) -> usize {
        self.data.len() / self.size
    }

    /// Each element's value, in order (C order: Fortran order was refused).
    pub(super) fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.data.chunks_exact(self.size).map(self.read)
    }
}

/// The array of a `.npy` file: `file` from its first byte, magic string included.
///
/// # Errors
///
/// What is wrong with it, in words: not a `.npy` file, cut short, a header past
/// [`MAX_HEADER`] or without a type or shape, an element type not read, Fortran order of
/// more than one dimension, data of another length than its type and shape say.
pub(super) fn read(file: &[u8]) -> Result<Npy<'_>, String> {
    let rest = file
        .strip_prefix(MAGIC)
        .ok_or("not a .npy array (no \\x93NUMPY magic string)")?;
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
        // NumPy writes each `bool` as one byte, 0 or 1; any other byte is true to it too.
        "|b1" => (1, |b| f64::from(u8::from(b[0] != 0))),
        other => {
            return Err(format!(
                "a .npy array of {other:?}: float16/32/64, int8/16/32/64, uint8 and bool \
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

    #[test]
    fn bools_are_ones_and_zeros_and_each_type_its_value() {
        let values = |file: &[u8]| read(file).unwrap().values().collect::<Vec<_>>();
        assert_eq!(
            values(&npy_file("|b1", "(3,)", &[1, 0, 1])),
            [1.0, 0.0, 1.0]
        );
        assert_eq!(values(&npy_file("|i1", "(2,)", &[0xff, 7])), [-1.0, 7.0]);
        assert_eq!(values(&npy_file("|u1", "(2,)", &[0xff, 7])), [255.0, 7.0]);
        let i2: Vec<u8> = [-300i16, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(values(&npy_file("<i2", "(2,)", &i2)), [-300.0, 5.0]);
        assert_eq!(
            read(&npy_file("<i4", "(2, 3)", &[0; 24])).unwrap().count(),
            6
        );
        // "True " for "False": the header keeps its length.
        let mut fortran = npy_file("<f4", "(2, 2)", &[0; 16]);
        let at = fortran.windows(5).position(|w| w == b"False").unwrap();
        fortran[at..at + 5].copy_from_slice(b"True ");
        assert!(read(&fortran).err().unwrap().contains("Fortran order"));
        assert!(read(b"PK\x03\x04").err().unwrap().contains("not a .npy"));
    }
}
