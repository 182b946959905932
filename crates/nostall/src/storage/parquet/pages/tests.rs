use parquet::basic::{Compression, Type as PhysicalType};

use super::*;

const PLAIN: i32 = 0;

pub(in crate::storage::parquet) fn zigzag(v: i64) -> Vec<u8> {
    let mut v = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A v1 data page's header as writers make one: type, sizes, a CRC, a data page header
/// with statistics (skipped by the reader).
pub(in crate::storage::parquet) fn data_header(
    uncompressed: i64,
    compressed: i64,
    values: i64,
    encoding: i64,
) -> Vec<u8> {
    let mut h = vec![0x15];
    h.extend(zigzag(0)); // 1: type DATA_PAGE
    h.push(0x15);
    h.extend(zigzag(uncompressed));
    h.push(0x15);
    h.extend(zigzag(compressed));
    h.push(0x15); // 4: crc
    h.extend(zigzag(12345));
    h.push(0x1c); // 5: data_page_header
    h.push(0x15);
    h.extend(zigzag(values));
    h.push(0x15);
    h.extend(zigzag(encoding));
    h.push(0x15);
    h.extend(zigzag(RLE.into()));
    h.push(0x15);
    h.extend(zigzag(RLE.into()));
    h.push(0x1c); // 5: statistics, a struct with a binary and a list
    h.push(0x18);
    h.push(2);
    h.extend([7, 7]);
    h.push(0x19);
    h.push(0x25);
    h.extend(zigzag(1));
    h.extend(zigzag(2));
    h.push(0);
    h.push(0); // end of data_page_header
    h.push(0); // end of the page header
    h
}

pub(in crate::storage::parquet) fn dictionary_header(size: i64, values: i64) -> Vec<u8> {
    let mut h = vec![0x15];
    h.extend(zigzag(DICTIONARY_PAGE.into()));
    h.push(0x15);
    h.extend(zigzag(size));
    h.push(0x15);
    h.extend(zigzag(size));
    h.push(0x4c); // 7: dictionary_page_header
    h.push(0x15);
    h.extend(zigzag(values));
    h.push(0x15);
    h.extend(zigzag(PLAIN.into()));
    h.push(0x11); // is_sorted, true
    h.push(0);
    h.push(0);
    h
}

fn binary() -> Column {
    Column {
        codec: Compression::UNCOMPRESSED,
        physical: PhysicalType::BYTE_ARRAY,
        max_def: 0,
        type_length: -1,
        per_row: 1,
    }
}

/// Plain binary values, each behind its length.
fn plain(values: &[&[u8]]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| {
            (v.len() as u32)
                .to_le_bytes()
                .into_iter()
                .chain(v.iter().copied())
        })
        .collect()
}

#[test]
fn pages_are_rewritten_with_only_what_was_checked() {
    let first = plain(&[b"ab", b"c"]);
    let second = plain(&[b"defg"]);
    let mut chunk = data_header(first.len() as i64, first.len() as i64, 2, PLAIN.into());
    chunk.extend(&first);
    chunk.extend(data_header(
        second.len() as i64,
        second.len() as i64,
        1,
        PLAIN.into(),
    ));
    chunk.extend(&second);
    let pages = normalise(&chunk, binary(), 3, 100).unwrap();
    assert!(!pages.has_dictionary);
    assert_eq!(pages.first_data_page, 0);
    // Read back: two pages, no CRC, no statistics, the same payloads.
    let mut at = 0;
    for (payload, values) in [(&first, 2), (&second, 1)] {
        let header = PageHeader::read(&pages.bytes[at..]).unwrap();
        assert_eq!(
            header.kind,
            Kind::Data(DataPage {
                values,
                encoding: PLAIN,
                levels: Levels::V1 { def: RLE, rep: RLE },
            })
        );
        assert_eq!(header.uncompressed, payload.len() as u64);
        assert!(header.len < 20, "statistics dropped");
        at += header.len;
        assert_eq!(&pages.bytes[at..at + payload.len()], &payload[..]);
        at += payload.len();
    }
    assert_eq!(at, pages.bytes.len());
    assert!(normalise(&chunk, binary(), 100, 6)
        .unwrap_err()
        .contains("more than 6"));
}

#[test]
fn a_size_field_repeated_with_another_type_is_damage() {
    // Field 2 as an i32, then again as an i64 declaring 2 GB: the crate reads the last.
    let payload = plain(&[b"ab"]);
    let mut header = data_header(payload.len() as i64, payload.len() as i64, 1, 0);
    header.pop();
    header.push(0x06); // delta 0, type i64
    header.extend(zigzag(2));
    header.extend(zigzag(2_000_000_000));
    header.push(0);
    let mut chunk = header;
    chunk.extend(&payload);
    let err = normalise(&chunk, binary(), 1, 1 << 40).unwrap_err();
    assert!(err.contains("field 2 has type 6"), "{err}");
    // The same field twice with its own type.
    let mut twice = vec![0x15, 0x00, 0x15, 0x02, 0x05];
    twice.extend(zigzag(2));
    twice.extend(zigzag(4));
    twice.push(0);
    assert!(PageHeader::read(&twice)
        .unwrap_err()
        .contains("field 2 twice"));
    // A type and a header of another type.
    let mut other = dictionary_header(4, 1);
    other[1] = zigzag(DATA_PAGE.into())[0];
    assert!(PageHeader::read(&other)
        .unwrap_err()
        .contains("another's header"));
}

#[test]
fn a_dictionary_declaring_more_values_than_its_bytes_hold_is_refused() {
    let dict = plain(&[b"ab", b"cd"]);
    let mut chunk = dictionary_header(dict.len() as i64, i32::MAX.into());
    chunk.extend(&dict);
    let err = normalise(&chunk, binary(), 1, 1 << 30).unwrap_err();
    assert!(err.contains("2147483647 values in 12 bytes"), "{err}");
    // As many as it holds: read.
    let mut chunk = dictionary_header(dict.len() as i64, 2);
    chunk.extend(&dict);
    let page = [1u8, 0b0000_0011, 0]; // bit width 1, an RLE run of 1 zero
    chunk.extend(data_header(3, 3, 1, 8));
    chunk.extend(page);
    let pages = normalise(&chunk, binary(), 1, 1 << 30).unwrap();
    assert!(pages.has_dictionary);
    assert!(pages.first_data_page > 0);
    // A second dictionary, or one after the data.
    let mut twice = chunk.clone();
    twice.extend(dictionary_header(dict.len() as i64, 2));
    twice.extend(&dict);
    assert!(normalise(&twice, binary(), 2, 1 << 30)
        .unwrap_err()
        .contains("dictionary page after"));
}

/// A DELTA_BINARY_PACKED header: block of 128 in 4 miniblocks, `total` values, first 0.
fn delta(total: u64) -> Vec<u8> {
    let mut out = vec![0x80, 0x01, 0x04];
    let mut v = total;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out.push(0); // first value
    out
}

#[test]
fn a_delta_encoding_declaring_more_values_than_the_page_is_refused() {
    // 2^33 lengths in a page of one value.
    let mut payload = delta(1 << 33);
    payload.extend([0u8; 8]);
    let mut chunk = data_header(payload.len() as i64, payload.len() as i64, 1, 6);
    chunk.extend(&payload);
    let err = normalise(&chunk, binary(), 1, 1 << 30).unwrap_err();
    assert!(err.contains("8589934592 values in a page of 1"), "{err}");
    // DELTA_BYTE_ARRAY: honest prefixes, lying suffixes.
    let mut payload = delta(1);
    payload.extend(delta(1 << 40));
    let mut chunk = data_header(payload.len() as i64, payload.len() as i64, 1, 7);
    chunk.extend(&payload);
    let err = normalise(&chunk, binary(), 1, 1 << 30).unwrap_err();
    assert!(err.contains("values in a page of 1"), "{err}");
    // Honest: one length (one value needs no block), then its bytes.
    let mut payload = delta(1);
    payload.extend(b"x");
    let mut chunk = data_header(payload.len() as i64, payload.len() as i64, 1, 6);
    chunk.extend(&payload);
    normalise(&chunk, binary(), 1, 1 << 30).unwrap();
}

#[test]
fn more_values_than_rows_are_refused() {
    let payload = plain(&[b"a", b"b"]);
    let mut chunk = data_header(payload.len() as i64, payload.len() as i64, 2, 0);
    chunk.extend(&payload);
    assert!(normalise(&chunk, binary(), 1, 100)
        .unwrap_err()
        .contains("more values"));
    let mut huge = data_header(
        payload.len() as i64,
        payload.len() as i64,
        i32::MAX.into(),
        0,
    );
    huge.extend(&payload);
    assert!(normalise(&huge, binary(), 3, 100).is_err());
}

#[test]
fn damaged_headers_are_errors_not_panics() {
    let payload = [1u8, 2, 3, 4];
    let mut chunk = data_header(4, 4, 1, 0);
    chunk.extend(&payload[..3]); // one byte short
    assert!(normalise(&chunk, binary(), 1, 100)
        .unwrap_err()
        .contains("past the chunk"));
    let mut huge = data_header(i32::MAX.into(), 4, 1, 0);
    huge.extend(payload);
    assert!(normalise(&huge, binary(), 1, 1 << 40)
        .unwrap_err()
        .contains("256 times"));
    let mut over = data_header(20_000_000, 4, 1, 0);
    over.extend(payload);
    assert!(normalise(&over, binary(), 1, 1 << 20)
        .unwrap_err()
        .contains("more than"));
    let mut negative = data_header(-5, 4, 1, 0);
    negative.extend(payload);
    assert!(normalise(&negative, binary(), 1, 100)
        .unwrap_err()
        .contains("size -5"));
    let mut wide = data_header(4, 4, 1, 0);
    wide[2..3].copy_from_slice(&[0x80]); // the size's varint now runs on
    assert!(normalise(&wide, binary(), 1, 100).is_err());
    let good = data_header(4, 4, 1, 0);
    for cut in 1..good.len() {
        assert!(PageHeader::read(&good[..cut]).is_err());
    }
    assert!(normalise(&[0x19, 0xf5, 0xff, 0xff, 0xff, 0x0f], binary(), 1, 100).is_err());
    assert!(normalise(&[0x1c; 64], binary(), 1, 100).is_err());
}

#[test]
fn a_page_that_does_not_inflate_to_its_size_is_damage() {
    let text = plain(&[&[7u8; 300][..]]);
    let packed = snap::raw::Encoder::new().compress_vec(&text).unwrap();
    let column = Column {
        codec: Compression::SNAPPY,
        ..binary()
    };
    let mut chunk = data_header(text.len() as i64, packed.len() as i64, 1, 0);
    chunk.extend(&packed);
    let pages = normalise(&chunk, column, 1, 1 << 20).unwrap();
    assert!(pages.bytes.ends_with(&text));
    let mut lying = data_header(text.len() as i64 - 1, packed.len() as i64, 1, 0);
    lying.extend(&packed);
    assert!(normalise(&lying, column, 1, 1 << 20).is_err());
}
