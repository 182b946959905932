//! A footer (and an offset index) walked as the `parquet` crate will read it, before it
//! does.
//!
//! The crate's parser reads each field it knows by the type the format gives it, whatever
//! type the bytes declare, and sizes collections from the counts it reads: a field of
//! another type makes it read on out of step (in a crafted footer, a list of 2^31
//! booleans it skips as no bytes: seconds of work, or hours nested), and a schema element
//! declaring 2^31 children makes it allocate for them. So this walk follows the format's
//! own description of each struct ([`Shape`]): a known field of another type is damage,
//! an unknown one is skipped by its type as the crate skips it, a collection may not
//! declare more elements than bytes are left, and a schema element may not declare more
//! children than the schema has elements. The crate is then handed the struct written
//! again with only the fields the format knows, so that it skips nothing.

use super::thrift::{
    Cursor, BINARY, BOOL_FALSE, BOOL_TRUE, DOUBLE, I16, I32, I64, I8, LIST, STRUCT,
};

/// Deeper nesting than any footer has (a footer nests seven structs at most).
const MAX_DEPTH: usize = 16;

/// What a field holds, as Parquet's format defines it.
#[derive(Clone, Copy)]
enum Field {
    /// A value of this compact type (`I32`, `BINARY`, ...).
    Value(u8),
    Bool,
    Struct(Shape),
    List(&'static Field),
}

/// A struct's fields by id (`None`: a field the crate skips).
type Shape = fn(i64) -> Option<Field>;

use Field::{Bool, List, Struct, Value};

const INT: Field = Value(I32);
const LONG: Field = Value(I64);
const BYTES: Field = Value(BINARY);
const EMPTY: Field = Struct(|_| None);

fn file_metadata(id: i64) -> Option<Field> {
    Some(match id {
        1 => INT,
        2 => List(&Struct(schema_element)),
        3 => LONG,
        4 => List(&Struct(row_group)),
        5 => List(&Struct(key_value)),
        6 | 9 => BYTES,
        7 => List(&Struct(column_order)),
        8 => Struct(encryption_algorithm),
        _ => return None,
    })
}

fn schema_element(id: i64) -> Option<Field> {
    Some(match id {
        1 | 2 | 3 | 5 | 6 | 7 | 8 | 9 => INT,
        4 => BYTES,
        10 => Struct(logical_type),
        _ => return None,
    })
}

fn logical_type(id: i64) -> Option<Field> {
    Some(match id {
        1..=4 | 6 | 11..=15 => EMPTY,
        5 => Struct(|id| matches!(id, 1 | 2).then_some(INT)),
        7 | 8 => Struct(|id| match id {
            1 => Some(Bool),
            2 => Some(Struct(|id| (1..=3).contains(&id).then_some(EMPTY))),
            _ => None,
        }),
        10 => Struct(|id| match id {
            1 => Some(Value(I8)),
            2 => Some(Bool),
            _ => None,
        }),
        16 => Struct(|id| (id == 1).then_some(Value(I8))),
        17 => Struct(|id| (id == 1).then_some(BYTES)),
        18 => Struct(|id| match id {
            1 => Some(BYTES),
            2 => Some(INT),
            _ => None,
        }),
        _ => return None,
    })
}

fn row_group(id: i64) -> Option<Field> {
    Some(match id {
        1 => List(&Struct(column_chunk)),
        2 | 3 | 5 | 6 => LONG,
        4 => List(&Struct(|id| match id {
            1 => Some(INT),
            2 | 3 => Some(Bool),
            _ => None,
        })),
        7 => Value(I16),
        _ => return None,
    })
}

fn column_chunk(id: i64) -> Option<Field> {
    Some(match id {
        1 | 9 => BYTES,
        2 | 4 | 6 => LONG,
        3 => Struct(column_metadata),
        5 | 7 => INT,
        8 => Struct(|id| match id {
            1 => Some(EMPTY),
            2 => Some(Struct(|id| match id {
                1 => Some(List(&BYTES)),
                2 => Some(BYTES),
                _ => None,
            })),
            _ => None,
        }),
        _ => return None,
    })
}

fn column_metadata(id: i64) -> Option<Field> {
    Some(match id {
        1 | 4 | 15 => INT,
        2 => List(&INT),
        3 => List(&BYTES),
        5 | 6 | 7 | 9 | 10 | 11 | 14 => LONG,
        8 => List(&Struct(key_value)),
        12 => Struct(statistics),
        13 => List(&Struct(|id| (1..=3).contains(&id).then_some(INT))),
        16 => Struct(|id| match id {
            1 => Some(LONG),
            2 | 3 => Some(List(&LONG)),
            _ => None,
        }),
        17 => Struct(|id| match id {
            1 => Some(Struct(|id| (1..=8).contains(&id).then_some(Value(DOUBLE)))),
            2 => Some(List(&INT)),
            _ => None,
        }),
        _ => return None,
    })
}

fn statistics(id: i64) -> Option<Field> {
    Some(match id {
        1 | 2 | 5 | 6 => BYTES,
        3 | 4 => LONG,
        7 | 8 => Bool,
        _ => return None,
    })
}

fn key_value(id: i64) -> Option<Field> {
    matches!(id, 1 | 2).then_some(BYTES)
}

fn column_order(id: i64) -> Option<Field> {
    (id == 1).then_some(EMPTY)
}

fn encryption_algorithm(id: i64) -> Option<Field> {
    matches!(id, 1 | 2).then_some(Struct(|id| match id {
        1 | 2 => Some(BYTES),
        3 => Some(Bool),
        _ => None,
    }))
}

fn offset_index(id: i64) -> Option<Field> {
    Some(match id {
        1 => List(&Struct(|id| match id {
            1 | 3 => Some(LONG),
            2 => Some(INT),
            _ => None,
        })),
        2 => List(&LONG),
        _ => return None,
    })
}

/// Walks a file's footer (a `FileMetaData` filling `bytes`) as the crate will read it,
/// and gives it back with only the fields the format knows, for the crate to parse.
pub(super) fn check_footer(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let footer = check(bytes, file_metadata)?;
    check_children(&footer)?;
    Ok(footer)
}

/// Walks an offset index (an `OffsetIndex` filling `bytes`) as the crate will read it,
/// and gives it back with only the fields the format knows.
pub(super) fn check_offset_index(bytes: &[u8]) -> Result<Vec<u8>, String> {
    check(bytes, offset_index)
}

/// Walks `bytes` as `shape`, and writes it again with only the fields the format knows
/// (which the crate then reads without skipping anything).
fn check(bytes: &[u8], shape: Shape) -> Result<Vec<u8>, String> {
    let mut cursor = Cursor::new(bytes);
    let mut out = Vec::with_capacity(bytes.len());
    walk(&mut cursor, Struct(shape), STRUCT, 0, &mut out)?;
    match cursor.position() == bytes.len() {
        true => Ok(out),
        false => Err(format!(
            "{} bytes after its end",
            bytes.len() - cursor.position()
        )),
    }
}

/// Writes `v` as an unsigned varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The compact type a field of `field` is written as.
fn kind_of(field: Field) -> u8 {
    match field {
        Value(kind) => kind,
        Bool => BOOL_TRUE,
        Struct(_) => STRUCT,
        List(_) => LIST,
    }
}

/// Walks a value the bytes declare of type `kind`, where the format has `field`, and
/// writes it to `out` (a struct's fields the format does not know left out).
fn walk(
    c: &mut Cursor<'_>,
    field: Field,
    kind: u8,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("nested too deep".into());
    }
    let expected = kind_of(field);
    let is_bool = |k| k == BOOL_TRUE || k == BOOL_FALSE;
    if kind != expected && !(is_bool(kind) && is_bool(expected)) {
        return Err(format!(
            "a field of type {kind} where Parquet has {expected}"
        ));
    }
    match field {
        Struct(shape) => {
            let mut last = 0i64;
            c.fields(depth + 1, &mut |c, id, kind| match shape(id) {
                Some(field) => {
                    match id - last {
                        delta @ 1..=15 => out.push(((delta as u8) << 4) | kind),
                        _ => {
                            out.push(kind);
                            varint(out, ((id << 1) ^ (id >> 63)) as u64);
                        }
                    }
                    last = id;
                    walk(c, field, kind, depth + 1, out).map_err(|e| format!("field {id}: {e}"))
                }
                None => c.skip(kind, depth + 1),
            })?;
            out.push(0);
            Ok(())
        }
        List(element) => {
            let (count, kind) = c.list_header()?;
            c.may_hold(count, &[kind])?;
            match count {
                0..=14 => out.push(((count as u8) << 4) | kind),
                _ => {
                    out.push(0xf0 | kind);
                    varint(out, count);
                }
            }
            for _ in 0..count {
                walk(c, *element, kind, depth + 1, out)?;
            }
            Ok(())
        }
        Value(_) | Bool => {
            let from = c.position();
            c.skip(kind, depth)?;
            out.extend_from_slice(c.since(from));
            Ok(())
        }
    }
}

/// Checks that no schema element declares more children than the schema has elements.
fn check_children(bytes: &[u8]) -> Result<(), String> {
    let mut cursor = Cursor::new(bytes);
    cursor.fields(0, &mut |c, id, kind| match id {
        2 => {
            let (count, _) = c.list_header()?;
            for _ in 0..count {
                c.fields(1, &mut |c, id, kind| match id {
                    5 => {
                        let children = c.i32()?;
                        match u64::try_from(children).is_ok_and(|n| n <= count) {
                            true => Ok(()),
                            false => Err(format!(
                                "a schema element of {children} children in a schema of \
                                 {count} elements"
                            )),
                        }
                    }
                    _ => c.skip(kind, 1),
                })?;
            }
            Ok(())
        }
        _ => c.skip(kind, 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_larger_than_the_footer_or_of_booleans_are_refused() {
        // Field 5 (key-value pairs): a list of one struct holding a key, then the end.
        let footer = [0x59, 0x1c, 0x18, 0x01, b'k', 0x00, 0x00];
        assert_eq!(check_footer(&footer).as_deref(), Ok(&footer[..]));
        assert!(check_footer(&footer[..5]).is_err());
        // A list of 2^31 structs; of booleans (as an unknown field's).
        assert!(check_footer(&[0x59, 0xfc, 0xff, 0xff, 0xff, 0x07, 0x00]).is_err());
        let booleans = [0xf9, 0x31, 1, 1, 1, 0x00];
        assert!(check_footer(&booleans).unwrap_err().contains("booleans"));
        assert!(check_footer(&[0x1c; 64]).is_err());
    }

    #[test]
    fn a_known_field_of_another_type_is_refused() {
        // Field 2, the schema, declared an i32: the crate would read a list there.
        let err = check_footer(&[0x25, 0x04, 0x00]).unwrap_err();
        assert!(
            err.contains("field 2: a field of type 5 where Parquet has 9"),
            "{err}"
        );
        // An unknown field of any type is left out, so the crate has nothing to skip.
        assert_eq!(
            check_footer(&[0xf5, 0x04, 0x00]).as_deref(),
            Ok(&[0x00][..])
        );
        // Bytes after the end.
        assert!(check_footer(&[0x00, 0x00])
            .unwrap_err()
            .contains("after its end"));
    }

    #[test]
    fn a_schema_element_declaring_more_children_than_the_schema_has_is_refused() {
        // FileMetaData { 2: [ {4: "m", 5: children}, {4: "a"} ] }, the children as a
        // zigzag byte (2: one child).
        let footer = |children: u8| {
            vec![
                0x29, 0x2c, // field 2, a list of 2 structs
                0x48, 0x01, b'm', 0x15, children, 0x00, // name "m", num_children
                0x48, 0x01, b'a', 0x00, // name "a"
                0x00,
            ]
        };
        assert_eq!(check_footer(&footer(2)).as_deref(), Ok(&footer(2)[..]));
        assert!(check_footer(&footer(6)).unwrap_err().contains("3 children"));
        // 2^31-1 children, as the fuzzer found (the crate asked for 13 GB).
        let mut huge = footer(2);
        huge.splice(6..7, [0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert!(check_footer(&huge).unwrap_err().contains("children"));
    }
}
