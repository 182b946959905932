//! JSON members checked without being built: a JSON field's document (one JSON text,
//! nested no deeper than a consumer's recursion limit, with its chosen keys) and a vector
//! field's array of numbers, each walked once, keeping nothing of it.
//!
//! A parser that builds the document (`serde_json::Value`) allocates tens of bytes for
//! each value it holds: a 16 MiB member of `[0,0,0,…]` would take half a gibibyte before
//! the check could say yes. Walking it takes no allocation at all, so what a member may
//! cost is its bytes, already bounded by the field's `max_bytes`.
//!
//! What is accepted is what `serde_json` accepts, byte for byte (the tests here and the
//! `fields` fuzz target compare the two): RFC 8259's grammar, strings of UTF-8 without
//! control characters or lone surrogates, numbers within `f64`'s range, and at most
//! [`MAX_DEPTH`] arrays and objects one in another (`serde_json`'s recursion limit).

/// The most arrays and objects nested one in another: `serde_json`'s recursion limit
/// (128, the one a document reaches and is refused at, so 127 hold), what a consumer
/// parsing the document again can count on.
pub(super) const MAX_DEPTH: usize = 127;

/// Checks that `member` is one JSON document: UTF-8, of JSON's grammar, nested at most
/// [`MAX_DEPTH`] deep; with `keys`, an object holding each of them.
///
/// # Errors
///
/// What is wrong, in words, with the byte it was found at.
pub(super) fn check(member: &[u8], keys: &[String]) -> Result<(), String> {
    let text = std::str::from_utf8(member).map_err(|e| format!("not UTF-8 ({e})"))?;
    let mut scan = Scan { text, at: 0 };
    // Which of `keys` the top-level object has (sized by the field's settings, not the
    // member).
    let mut found = vec![false; keys.len()];
    let mut open: Vec<Open> = Vec::new();
    let mut object_at_top = false;
    'values: loop {
        // A value is expected.
        scan.blank();
        match scan.peek() {
            Some(b'[') | Some(b'{') => {
                let kind = if scan.peek() == Some(b'[') {
                    Open::Array
                } else {
                    Open::Object
                };
                if open.len() == MAX_DEPTH {
                    return Err(scan.fail(&format!(
                        "nested more than {MAX_DEPTH} deep, past the recursion limit of JSON \
                         parsers"
                    )));
                }
                object_at_top |= open.is_empty() && kind == Open::Object;
                scan.at += 1;
                open.push(kind);
                scan.blank();
                let close = if kind == Open::Array { b']' } else { b'}' };
                if scan.peek() == Some(close) {
                    scan.at += 1;
                    open.pop();
                } else if kind == Open::Object {
                    scan.key(open.len() == 1, keys, &mut found)?;
                    continue 'values;
                } else {
                    continue 'values;
                }
            }
            Some(b'"') => {
                scan.string()?;
            }
            Some(b'-' | b'0'..=b'9') => {
                scan.number()?;
            }
            Some(b't') => scan.word("true")?,
            Some(b'f') => scan.word("false")?,
            Some(b'n') => scan.word("null")?,
            _ => return Err(scan.fail("expected a value")),
        }
        // A value ended: what follows it in the arrays and objects it closes.
        loop {
            scan.blank();
            let Some(&kind) = open.last() else {
                if scan.at != text.len() {
                    return Err(scan.fail("trailing characters after the document"));
                }
                break 'values;
            };
            let close = if kind == Open::Array { b']' } else { b'}' };
            match scan.peek() {
                Some(b',') => {
                    scan.at += 1;
                    if kind == Open::Object {
                        scan.blank();
                        scan.key(open.len() == 1, keys, &mut found)?;
                    }
                    continue 'values;
                }
                Some(c) if c == close => {
                    scan.at += 1;
                    open.pop();
                }
                _ if kind == Open::Array => return Err(scan.fail("expected ',' or ']'")),
                _ => return Err(scan.fail("expected ',' or '}'")),
            }
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    if !object_at_top {
        return Err("not an object, and keys were asked of it".into());
    }
    match keys.iter().zip(&found).find(|(_, &found)| !found) {
        Some((key, _)) => Err(format!("it has no key {key:?}")),
        None => Ok(()),
    }
}

/// Reads `member` as a JSON array of numbers, giving each to `each` in order; returns how
/// many there were. Nothing is kept: a member of a million numbers costs its bytes.
///
/// # Errors
///
/// What is wrong, in words: not UTF-8, not an array, an element not a number (or one
/// past `f64`'s range), JSON's grammar broken.
pub(super) fn numbers(member: &[u8], mut each: impl FnMut(f64)) -> Result<usize, String> {
    let text = std::str::from_utf8(member).map_err(|e| format!("not UTF-8 ({e})"))?;
    let mut scan = Scan { text, at: 0 };
    scan.blank();
    if scan.peek() != Some(b'[') {
        return Err(scan.fail("expected an array of numbers"));
    }
    scan.at += 1;
    scan.blank();
    let mut count = 0usize;
    if scan.peek() == Some(b']') {
        scan.at += 1;
    } else {
        loop {
            scan.blank();
            if !matches!(scan.peek(), Some(b'-' | b'0'..=b'9')) {
                return Err(scan.fail("expected a number"));
            }
            each(scan.number()?);
            count += 1;
            scan.blank();
            match scan.peek() {
                Some(b',') => scan.at += 1,
                Some(b']') => {
                    scan.at += 1;
                    break;
                }
                _ => return Err(scan.fail("expected ',' or ']'")),
            }
        }
    }
    scan.blank();
    if scan.at != text.len() {
        return Err(scan.fail("trailing characters after the array"));
    }
    Ok(count)
}

/// An array or an object being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Array,
    Object,
}

/// A JSON text and where it is being read.
struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn fail(&self, what: &str) -> String {
        format!("{what} at byte {}", self.at)
    }

    /// Skips JSON's whitespace.
    fn blank(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// Reads `word` (`true`, `false`, `null`).
    fn word(&mut self, word: &str) -> Result<(), String> {
        if !self.text[self.at..].starts_with(word) {
            return Err(self.fail(&format!("expected {word}")));
        }
        self.at += word.len();
        Ok(())
    }

    /// Reads an object's key and its colon; at the top level (`top`), marks which of
    /// `keys` it is in `found`.
    fn key(&mut self, top: bool, keys: &[String], found: &mut [bool]) -> Result<(), String> {
        if self.peek() != Some(b'"') {
            return Err(self.fail("expected a key in quotes"));
        }
        let raw = self.string()?;
        if top {
            for (key, found) in keys.iter().zip(found.iter_mut()) {
                *found |= Unescaped(raw.chars()).eq(key.chars());
            }
        }
        self.blank();
        if self.peek() != Some(b':') {
            return Err(self.fail("expected ':'"));
        }
        self.at += 1;
        Ok(())
    }

    /// Reads a string (at its opening quote); returns its text between the quotes,
    /// escapes as written.
    fn string(&mut self) -> Result<&str, String> {
        self.at += 1;
        let start = self.at;
        loop {
            match self.peek() {
                None => return Err(self.fail("a string without its closing quote")),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.at += 1;
                    self.escape()?;
                }
                Some(0..=0x1f) => return Err(self.fail("a control character in a string")),
                // The text is UTF-8: a byte of a longer character is never one of the above.
                Some(_) => self.at += 1,
            }
        }
        let raw = &self.text[start..self.at];
        self.at += 1;
        Ok(raw)
    }

    /// Reads an escape after its backslash: a UTF-16 surrogate must be the first of a
    /// pair, as a string holds characters, not halves of them.
    fn escape(&mut self) -> Result<(), String> {
        match self.peek() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.at += 1;
                Ok(())
            }
            Some(b'u') => {
                self.at += 1;
                match self.hex()? {
                    0xdc00..=0xdfff => Err(self.fail("a lone surrogate in a \\u escape")),
                    0xd800..=0xdbff => {
                        if !self.text[self.at..].starts_with("\\u") {
                            return Err(self.fail("a lone surrogate in a \\u escape"));
                        }
                        self.at += 2;
                        match self.hex()? {
                            0xdc00..=0xdfff => Ok(()),
                            _ => Err(self.fail("a lone surrogate in a \\u escape")),
                        }
                    }
                    _ => Ok(()),
                }
            }
            _ => Err(self.fail("an invalid escape")),
        }
    }

    /// Reads the four hexadecimal digits of a `\u` escape.
    fn hex(&mut self) -> Result<u16, String> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.fail("a \\u escape without four hexadecimal digits"))?;
        self.at += 4;
        Ok(u16::from_str_radix(digits, 16).expect("four hexadecimal digits"))
    }

    /// Reads a number (at its first character) and its value: JSON's grammar, and a value
    /// within `f64`'s range (as `serde_json` refuses one past it).
    fn number(&mut self) -> Result<f64, String> {
        let start = self.at;
        let digits = |scan: &mut Self| {
            let from = scan.at;
            while matches!(scan.peek(), Some(b'0'..=b'9')) {
                scan.at += 1;
            }
            scan.at > from
        };
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.at += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(self.fail("a number with a leading zero"));
                }
            }
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.fail("a number without digits")),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !digits(self) {
                return Err(self.fail("a number without digits after its point"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return Err(self.fail("a number without digits in its exponent"));
            }
        }
        // JSON's numbers are a subset of what Rust reads; the value is correctly rounded.
        let value: f64 = self.text[start..self.at]
            .parse()
            .map_err(|_| self.fail("a number Rust cannot read"))?;
        if !value.is_finite() {
            return Err(self.fail("a number out of range"));
        }
        Ok(value)
    }
}

/// The characters of a string checked by [`Scan::string`], its escapes undone.
struct Unescaped<'a>(std::str::Chars<'a>);

impl Iterator for Unescaped<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let c = self.0.next()?;
        if c != '\\' {
            return Some(c);
        }
        let hex = |chars: &mut std::str::Chars<'_>| {
            chars
                .take(4)
                .fold(0, |n, c| n * 16 + c.to_digit(16).unwrap_or(0))
        };
        Some(match self.0.next()? {
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                let first = hex(&mut self.0);
                let code = if (0xd800..0xdc00).contains(&first) {
                    // Checked: a `\u` escape of its second half follows.
                    self.0.nth(1);
                    let second = hex(&mut self.0);
                    0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                } else {
                    first
                };
                char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
            }
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::fuzz::serde_says;

    /// Documents and near-documents where a hand-written JSON reader goes wrong.
    fn cases() -> Vec<Vec<u8>> {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes();
        let objects = |n: usize| {
            let mut s = "{\"a\":".repeat(n);
            s.push('1');
            s.push_str(&"}".repeat(n));
            s.into_bytes()
        };
        let mut cases: Vec<Vec<u8>> = [
            "",
            " ",
            "null",
            "true",
            "false",
            "nul",
            "truex",
            "0",
            "-0",
            "01",
            "-",
            "1.",
            ".5",
            "1e",
            "1e+",
            "1E-2",
            "1.5e300",
            "1e309",
            "-1e309",
            "1e-400",
            "0e99999999999",
            "123456789012345678901234567890",
            "18446744073709551616",
            "-9223372036854775809",
            "\"\"",
            "\"a\\u00e9\"",
            "\"\\ud83d\\ude00\"",
            "\"\\ud83d\"",
            "\"\\ude00\"",
            "\"\\ud83d\\u0041\"",
            "\"\\ud83dx\"",
            "\"\\u12\"",
            "\"\\uZZZZ\"",
            "\"\\x\"",
            "\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
            "\"tab\there\"",
            "\"del\u{7f}\"",
            "\"é\"",
            "\"unterminated",
            "[",
            "]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,,2]",
            "[]",
            " [ ] ",
            "{}",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":1 \"b\":2}",
            "{1:2}",
            "{\"a\":1}x",
            "[1]]",
            "{\"a\":[1,{\"b\":null}]}",
            "\u{feff}{}",
            "[1]\n",
            "[\"a\"\u{0}]",
            "[1e5,-2.5E-3,0.0]",
            "{\"w\":1,\"w\":2}",
            "{\"\\u0077\":1}",
            "[NaN]",
            "[Infinity]",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        cases.push(b"\"\xff\"".to_vec());
        cases.push(b"[1]\xff".to_vec());
        cases.push(b"\xef\xbb\xbf{}".to_vec());
        for n in [1, 126, 127, 128, 129, 10_000] {
            cases.push(nested(n));
            cases.push(objects(n));
        }
        cases
    }

    #[test]
    fn it_accepts_exactly_what_serde_json_accepts() {
        let keys = [vec![], vec!["w".to_string()], vec!["a".into(), "w".into()]];
        for case in cases() {
            for keys in &keys {
                assert_eq!(
                    check(&case, keys).is_ok(),
                    serde_says(&case, keys),
                    "{:?} with keys {keys:?}: {:?}",
                    String::from_utf8_lossy(&case),
                    check(&case, keys)
                );
            }
        }
    }

    #[test]
    fn arrays_of_numbers_read_as_serde_json_reads_them() {
        for case in cases().into_iter().chain([
            b"[1, 2.5, -3e2]".to_vec(),
            b"[[1]]".to_vec(),
            b"[\"1\"]".to_vec(),
            b"[1, null]".to_vec(),
            b" [ 18446744073709551615 , -9223372036854775808 ] ".to_vec(),
        ]) {
            let mut ours = Vec::new();
            let got = numbers(&case, |v| ours.push(v));
            let theirs = serde_json::from_slice::<Vec<f64>>(&case);
            assert_eq!(
                got.is_ok(),
                theirs.is_ok(),
                "{:?}: {got:?}",
                String::from_utf8_lossy(&case)
            );
            if let (Ok(count), Ok(theirs)) = (got, theirs) {
                assert_eq!((count, &ours), (theirs.len(), &theirs));
            }
        }
    }

    #[test]
    fn what_is_wrong_is_said_with_where() {
        let deep = "[".repeat(200) + &"]".repeat(200);
        let why = check(deep.as_bytes(), &[]).unwrap_err();
        assert!(
            why.contains("recursion") && why.contains("byte 127"),
            "{why}"
        );
        assert_eq!(
            check(b"[1]", &["w".into()]).unwrap_err(),
            "not an object, and keys were asked of it"
        );
        assert_eq!(
            check(br#"{"h": 1}"#, &["w".into()]).unwrap_err(),
            "it has no key \"w\""
        );
        // A nested object's key is not the document's.
        assert!(check(br#"{"a": {"w": 1}}"#, &["w".into()]).is_err());
        assert!(check(b"{\"\\u0077\": 1}", &["w".into()]).is_ok());
        assert!(check(b"{\"\\ud83d\\ude00\": 1}", &["\u{1f600}".into()]).is_ok());
        assert!(check(b"[1, 2", &[]).unwrap_err().contains("byte 5"));
        assert!(numbers(b"{}", |_| {}).unwrap_err().contains("array"));
    }
}
