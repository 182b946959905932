//! A row's lists of a struct column, as one member: what a Parquet dataset hands a field
//! that reads a column of Hugging Face's `Sequence` of a dict (a detection dataset's
//! `objects`: `{bbox: [[x, y, w, h], ...], category: [...]}`), the lists the field asks
//! for ([`super::SubColumns`]) in its order.
//!
//! The member is binary, so that nothing is parsed as text per sample; it is also bytes
//! nobody checked (a WebDataset shard may hold a member that begins alike), so
//! [`decode_lists_member`] checks every count against the bytes left before it
//! allocates, and the nesting against [`MAX_DEPTH`].
//!
//! Layout, little-endian: [`LISTS_MAGIC`]; the number of lists (`u32`); then each list:
//! its name (a byte of length, then UTF-8) and its value. A value is a tag byte and what
//! follows it: null; an integer (`i64`); a number (`f64`); a list (a count, `u32`, then
//! its values); or too many values (a count, `u32`: the row held more values than the
//! field takes, so they were not read).

/// The first bytes of a lists member.
pub(crate) const LISTS_MAGIC: &[u8; 8] = b"NSLIST01";

/// The deepest nesting a member may hold: a list of lists of numbers (a row's boxes) is
/// two.
const MAX_DEPTH: usize = 2;

const NULL: u8 = 0;
const INT: u8 = 1;
const FLOAT: u8 = 2;
const LIST: u8 = 3;
const TOO_MANY: u8 = 4;

/// One value of a row's list, as the file holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// A null (a missing list, or a missing value in one).
    Null,
    /// A value of an integer column.
    Int(i64),
    /// A value of a floating-point column.
    Float(f64),
    /// A list.
    List(Vec<Item>),
    /// A row's list of more values than the field takes (this many), not read.
    TooMany(u64),
}

/// Appends the member of `lists` (each a name and the row's value) to `out`.
#[cfg(any(feature = "parquet", test))]
pub(crate) fn encode_lists_member(lists: &[(&str, &Item)], out: &mut Vec<u8>) {
    out.extend_from_slice(LISTS_MAGIC);
    out.extend_from_slice(&(lists.len() as u32).to_le_bytes());
    for (name, item) in lists {
        // Names are a struct's field names, bounded by the footer; a longer one is cut.
        let name = &name.as_bytes()[..name.len().min(255)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        encode(item, out);
    }
}

#[cfg(any(feature = "parquet", test))]
fn encode(item: &Item, out: &mut Vec<u8>) {
    match item {
        Item::Null => out.push(NULL),
        Item::Int(v) => {
            out.push(INT);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Item::Float(v) => {
            out.push(FLOAT);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Item::List(items) => {
            out.push(LIST);
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for item in items {
                encode(item, out);
            }
        }
        Item::TooMany(count) => {
            out.push(TOO_MANY);
            out.extend_from_slice(&(*count).min(u64::from(u32::MAX)).to_le_bytes()[..4]);
        }
    }
}

/// The lists of a member [`encode_lists_member`] wrote: each list's name and value.
///
/// # Errors
///
/// A member that is not one (cut short, bytes after its end, an unknown tag, nested
/// deeper than a list of lists), in words.
pub(crate) fn decode_lists_member(member: &[u8]) -> Result<Vec<(String, Item)>, String> {
    let mut at = Cursor {
        bytes: member
            .strip_prefix(LISTS_MAGIC)
            .ok_or("not a lists member")?,
    };
    let count = at.word()? as usize;
    // Each list takes at least its name's length and a tag.
    if count > at.bytes.len() / 2 {
        return Err(format!("{count} lists in {} bytes", at.bytes.len()));
    }
    let mut lists = Vec::with_capacity(count);
    for _ in 0..count {
        let len = at.take(1)?[0] as usize;
        let name = String::from_utf8_lossy(at.take(len)?).into_owned();
        lists.push((name, at.item(0)?));
    }
    match at.bytes.is_empty() {
        true => Ok(lists),
        false => Err(format!(
            "{} bytes after the lists member's end",
            at.bytes.len()
        )),
    }
}

/// The member's bytes not read yet.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.bytes.len() {
            return Err("the lists member is truncated".into());
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn word(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn eight(&mut self) -> Result<[u8; 8], String> {
        Ok(self.take(8)?.try_into().expect("8 bytes"))
    }

    fn item(&mut self, depth: usize) -> Result<Item, String> {
        Ok(match self.take(1)?[0] {
            NULL => Item::Null,
            INT => Item::Int(i64::from_le_bytes(self.eight()?)),
            FLOAT => Item::Float(f64::from_le_bytes(self.eight()?)),
            LIST if depth >= MAX_DEPTH => {
                return Err(format!(
                    "lists nested deeper than {MAX_DEPTH} in the lists member"
                ))
            }
            LIST => {
                let count = self.word()? as usize;
                // Each value takes at least its tag.
                if count > self.bytes.len() {
                    return Err(format!(
                        "a list of {count} values in {} bytes",
                        self.bytes.len()
                    ));
                }
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.item(depth + 1)?);
                }
                Item::List(items)
            }
            TOO_MANY => Item::TooMany(u64::from(self.word()?)),
            tag => return Err(format!("an unknown tag {tag} in the lists member")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_damage_is_refused() {
        let boxes = Item::List(vec![
            Item::List(vec![Item::Float(1.5), Item::Null, Item::Float(3.0)]),
            Item::Null,
        ]);
        let labels = Item::List(vec![Item::Int(-3), Item::Int(7)]);
        let mut member = Vec::new();
        encode_lists_member(
            &[
                ("bbox", &boxes),
                ("category", &labels),
                ("x", &Item::TooMany(9)),
            ],
            &mut member,
        );
        let read = decode_lists_member(&member).unwrap();
        assert_eq!(
            read,
            [
                ("bbox".to_string(), boxes),
                ("category".to_string(), labels),
                ("x".to_string(), Item::TooMany(9))
            ]
        );
        // Every cut is an error, never a panic; so are bytes after the end.
        for cut in 0..member.len() {
            assert!(decode_lists_member(&member[..cut]).is_err(), "{cut}");
        }
        let mut longer = member.clone();
        longer.push(0);
        assert!(decode_lists_member(&longer).unwrap_err().contains("after"));
        // A count of 2^32-1 values in a few bytes; nesting three deep; an unknown tag.
        let mut huge = LISTS_MAGIC.to_vec();
        huge.extend([1, 0, 0, 0, 1, b'a', LIST, 0xff, 0xff, 0xff, 0xff, NULL]);
        assert!(decode_lists_member(&huge)
            .unwrap_err()
            .contains("values in"));
        let mut deep = LISTS_MAGIC.to_vec();
        deep.extend([1, 0, 0, 0, 1, b'a', LIST, 1, 0, 0, 0, LIST, 1, 0, 0, 0]);
        deep.extend([LIST, 0, 0, 0, 0]);
        assert!(decode_lists_member(&deep).unwrap_err().contains("deeper"));
        let mut unknown = LISTS_MAGIC.to_vec();
        unknown.extend([1, 0, 0, 0, 1, b'a', 9]);
        assert!(decode_lists_member(&unknown).unwrap_err().contains("tag 9"));
    }
}
