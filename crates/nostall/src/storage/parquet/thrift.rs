//! The Thrift compact protocol, as Parquet writes its footers and page headers: a reader
//! over bytes from a file (every length checked against what is left; a collection of
//! more elements than bytes left, or of booleans, refused), and a writer of the few
//! fields nostall writes back. What a footer's fields must be is in [`super::footer`].

/// Deeper nesting than any footer or page header has (a footer nests five structs, a page
/// header three).
const MAX_DEPTH: usize = 16;

pub(super) const BOOL_TRUE: u8 = 1;
pub(super) const BOOL_FALSE: u8 = 2;
pub(super) const I8: u8 = 3;
pub(super) const I16: u8 = 4;
pub(super) const I32: u8 = 5;
pub(super) const I64: u8 = 6;
pub(super) const DOUBLE: u8 = 7;
pub(super) const BINARY: u8 = 8;
pub(super) const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
pub(super) const STRUCT: u8 = 12;

/// A reader of the compact protocol over bytes from a file.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, at: 0 }
    }

    /// Bytes read so far.
    pub(super) fn position(&self) -> usize {
        self.at
    }

    /// The bytes read since `from` (a [`Cursor::position`]).
    pub(super) fn since(&self, from: usize) -> &'a [u8] {
        &self.bytes[from..self.at]
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.bytes.get(self.at).ok_or("cut off")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// An `i32` field's value, refused if it does not fit (the `parquet` crate would read
    /// another number from the same bytes).
    pub(super) fn i32(&mut self) -> Result<i32, String> {
        let v = self.zigzag()?;
        i32::try_from(v).map_err(|_| format!("{v} in a 32-bit field"))
    }

    fn advance(&mut self, n: u64) -> Result<(), String> {
        let end = (self.at as u64)
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len() as u64)
            .ok_or("cut off")?;
        self.at = end as usize;
        Ok(())
    }

    /// The fields of a struct, each handed to `field` with its id and type, to its stop.
    /// `field` reads or skips the value.
    pub(super) fn fields(
        &mut self,
        depth: usize,
        field: &mut dyn FnMut(&mut Self, i64, u8) -> Result<(), String>,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("nested too deep".into());
        }
        let mut id = 0i64;
        loop {
            let b = self.byte()?;
            if b == 0 {
                return Ok(());
            }
            let (delta, kind) = (b >> 4, b & 0x0f);
            id = if delta == 0 {
                self.zigzag()?
            } else {
                id.saturating_add(i64::from(delta))
            };
            // The crate reads ids as i16, cutting a longer one short: field 65 538 would
            // be its field 2, read as that field's type.
            if i16::try_from(id).is_err() {
                return Err(format!("field id {id}"));
            }
            field(self, id, kind)?;
        }
    }

    /// Skips a value of type `kind` (a struct field's: booleans carry their value in the
    /// type).
    pub(super) fn skip(&mut self, kind: u8, depth: usize) -> Result<(), String> {
        match kind {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            I8 => self.advance(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.advance(8),
            BINARY => {
                let len = self.varint()?;
                self.advance(len)
            }
            LIST | SET => {
                let (count, element) = self.list_header()?;
                self.elements(count, &[element], depth)
            }
            MAP => {
                let count = self.varint()?;
                if count == 0 {
                    return Ok(());
                }
                let b = self.byte()?;
                self.elements(count, &[b >> 4, b & 0x0f], depth)
            }
            STRUCT => self.fields(depth + 1, &mut |c, _, kind| c.skip(kind, depth + 1)),
            other => Err(format!("unknown field type {other}")),
        }
    }

    /// A list's or set's header: its count of elements, and their type.
    pub(super) fn list_header(&mut self) -> Result<(u64, u8), String> {
        let b = self.byte()?;
        match b >> 4 {
            15 => Ok((self.varint()?, b & 0x0f)),
            n => Ok((u64::from(n), b & 0x0f)),
        }
    }

    /// Checks that `count` elements of `kinds` may follow: not booleans (the crate's
    /// parser skips a boolean in a collection as no bytes where it takes one, and reads on
    /// out of step; nothing Parquet writes holds one), and no more than bytes are left
    /// (each takes at least one).
    pub(super) fn may_hold(&self, count: u64, kinds: &[u8]) -> Result<(), String> {
        if count > 0 && kinds.iter().any(|&k| k == BOOL_TRUE || k == BOOL_FALSE) {
            return Err("a collection of booleans".into());
        }
        match count > (self.bytes.len() - self.at) as u64 {
            true => Err(format!("{count} elements in a few bytes")),
            false => Ok(()),
        }
    }

    /// Skips `count` elements of a list, set or map, each of `kinds` in turn.
    fn elements(&mut self, count: u64, kinds: &[u8], depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("nested too deep".into());
        }
        self.may_hold(count, kinds)?;
        for _ in 0..count {
            for &kind in kinds {
                self.skip(kind, depth + 1)?;
            }
        }
        Ok(())
    }
}

/// A writer of the compact protocol: structs of `i32`, boolean and struct fields, in
/// increasing field order (all that a page header needs).
#[derive(Default)]
pub(super) struct Writer {
    pub(super) bytes: Vec<u8>,
    /// The last field id written, per open struct.
    last: Vec<i16>,
}

impl Writer {
    fn field(&mut self, id: i16, kind: u8) {
        let last = self
            .last
            .last_mut()
            .expect("a field is written inside a struct");
        let delta = id - *last;
        debug_assert!((1..=15).contains(&delta), "fields in increasing order");
        self.bytes.push(((delta as u8) << 4) | kind);
        *last = id;
    }

    /// Opens the outermost struct.
    pub(super) fn begin(&mut self) {
        self.last.push(0);
    }

    /// Opens a struct as field `id`.
    pub(super) fn begin_struct(&mut self, id: i16) {
        self.field(id, STRUCT);
        self.last.push(0);
    }

    /// Closes the struct opened last.
    pub(super) fn end(&mut self) {
        self.last.pop();
        self.bytes.push(0);
    }

    pub(super) fn i32(&mut self, id: i16, value: i32) {
        self.field(id, I32);
        let mut v = ((i64::from(value) << 1) ^ (i64::from(value) >> 63)) as u64;
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }

    pub(super) fn bool(&mut self, id: i16, value: bool) {
        self.field(id, if value { BOOL_TRUE } else { BOOL_FALSE });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back() {
        let mut w = Writer::default();
        w.begin();
        w.i32(1, -3);
        w.i32(2, i32::MAX);
        w.begin_struct(5);
        w.bool(3, true);
        w.end();
        w.end();
        let mut seen = Vec::new();
        let mut cursor = Cursor::new(&w.bytes);
        cursor
            .fields(0, &mut |c, id, kind| match kind {
                I32 => {
                    seen.push((id, i64::from(c.i32()?)));
                    Ok(())
                }
                STRUCT => c.fields(1, &mut |_, id, kind| {
                    seen.push((id, i64::from(kind == BOOL_TRUE)));
                    Ok(())
                }),
                other => Err(format!("type {other}")),
            })
            .unwrap();
        assert_eq!(cursor.position(), w.bytes.len());
        assert_eq!(seen, [(1, -3), (2, i64::from(i32::MAX)), (3, 1)]);
        assert!(Cursor::new(&[0x80; 11]).i32().is_err());
        // A long-form field id past an i16 (65 538: the crate's field 2).
        let mut long = Cursor::new(&[0x05, 0x84, 0x80, 0x08, 0x02, 0x00]);
        let err = long.fields(0, &mut |c, _, kind| c.skip(kind, 1));
        assert_eq!(err, Err("field id 65538".into()));
        // 2^32 as a zigzag varint: more than an i32 holds.
        assert!(Cursor::new(&[0x80, 0x80, 0x80, 0x80, 0x20]).i32().is_err());
    }
}
