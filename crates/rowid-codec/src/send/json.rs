//! `jsonb_send` (spec/wire-format.md §9): a version byte `01` followed by JSON text, parsed
//! the way `jsonb_in` reads it: numbers become numerics (`1.0` and `1.00` are the same
//! value), `\u` escapes (four hex digits, surrogate pairs joined) become UTF-8, `\u0000` is rejected, and of duplicate object keys
//! the last wins, with keys in jsonb's order.
//!
//! The text is assumed to be UTF-8 (the database encoding the WAL path supports).

use alloc::vec::Vec;

use super::scalar::bad;
use crate::error::{Error, Result};
use crate::limits::MAX_NUMERIC_GROUPS;
use crate::scalar::NumericSign;
use crate::scalar::OwnedNumeric;
use crate::structure::{check_count, check_depth};
use crate::tag::TypeTag;
use crate::value::JsonbValue;

/// The only `jsonb_send` version.
pub const JSONB_SEND_VERSION: u8 = 1;

/// Parses a `jsonb_send` value whose jsonb sits at nesting `level`.
pub(super) fn jsonb_from_send(b: &[u8], level: u32) -> Result<JsonbValue> {
    match b.first() {
        Some(&JSONB_SEND_VERSION) => {}
        Some(_) => return Err(bad(TypeTag::Jsonb, 0, "unknown jsonb send version")),
        None => return Err(bad(TypeTag::Jsonb, 0, "empty jsonb send value")),
    }
    let mut p = Parser { b, pos: 1 };
    let v = p.value(level)?;
    p.ws();
    if p.pos != b.len() {
        return Err(Error::TrailingBytes { offset: p.pos });
    }
    Ok(v)
}

/// Parses JSON text into a jsonb value (the text form `jsonb_in` accepts), e.g. for tools
/// that hold jsonb as text. Nesting deeper than `MAX_DEPTH` is rejected.
pub fn jsonb_from_text(text: &[u8]) -> Result<JsonbValue> {
    let mut p = Parser { b: text, pos: 0 };
    let v = p.value(2)?;
    p.ws();
    if p.pos != text.len() {
        return Err(Error::TrailingBytes { offset: p.pos });
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, reason: &'static str) -> Error {
        bad(TypeTag::Jsonb, self.pos, reason)
    }

    fn ws(&mut self) {
        while matches!(self.b.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8, reason: &'static str) -> Result<()> {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(reason))
        }
    }

    fn literal(&mut self, word: &[u8], v: JsonbValue) -> Result<JsonbValue> {
        if self.b[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// One value; containers hold their items at `level + 1`.
    fn value(&mut self, level: u32) -> Result<JsonbValue> {
        self.ws();
        match self.peek() {
            Some(b'n') => self.literal(b"null", JsonbValue::Null),
            Some(b't') => self.literal(b"true", JsonbValue::Bool(true)),
            Some(b'f') => self.literal(b"false", JsonbValue::Bool(false)),
            Some(b'"') => Ok(JsonbValue::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => Ok(JsonbValue::Number(self.number()?)),
            Some(b'[') => {
                check_depth(level + 1)?;
                self.pos += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(JsonbValue::Array(items));
                }
                loop {
                    items.push(self.value(level + 1)?);
                    check_count(items.len())?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(JsonbValue::Array(items));
                        }
                        _ => return Err(self.err("expected ',' or ']'")),
                    }
                }
            }
            Some(b'{') => {
                check_depth(level + 1)?;
                self.pos += 1;
                let mut pairs = Vec::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                    return Ok(JsonbValue::object(pairs));
                }
                loop {
                    self.ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected an object key"));
                    }
                    let key = self.string()?;
                    self.expect(b':', "expected ':'")?;
                    let v = self.value(level + 1)?;
                    pairs.push((key, v));
                    check_count(pairs.len())?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(JsonbValue::object(pairs));
                        }
                        _ => return Err(self.err("expected ',' or '}'")),
                    }
                }
            }
            _ => Err(self.err("expected a JSON value")),
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let s = self
            .b
            .get(self.pos..self.pos + 4)
            .ok_or(self.err("truncated \\u escape"))?;
        let mut v = 0u32;
        for &c in s {
            let d = (c as char)
                .to_digit(16)
                .ok_or(self.err("invalid \\u escape"))?;
            v = v * 16 + d;
        }
        self.pos += 4;
        Ok(v)
    }

    /// A string literal at `"`; returns its UTF-8 bytes.
    fn string(&mut self) -> Result<Vec<u8>> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let c = self.peek().ok_or(self.err("unterminated string"))?;
            self.pos += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let e = self.peek().ok_or(self.err("unterminated escape"))?;
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0C),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) {
                                if !self.b[self.pos..].starts_with(b"\\u") {
                                    return Err(self.err("unpaired high surrogate"));
                                }
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("invalid low surrogate"));
                                }
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            } else if (0xDC00..0xE000).contains(&cp) {
                                return Err(self.err("unpaired low surrogate"));
                            }
                            if cp == 0 {
                                return Err(self.err("\\u0000 cannot be stored in jsonb"));
                            }
                            let ch = char::from_u32(cp).ok_or(self.err("invalid code point"))?;
                            let mut tmp = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                0x00..=0x1F => return Err(self.err("control character in a string")),
                _ => out.push(c),
            }
        }
    }

    /// A JSON number, as a numeric.
    fn number(&mut self) -> Result<OwnedNumeric> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let mut digits: Vec<u8> = Vec::new();
        let int_start = self.pos;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            digits.push(c - b'0');
            self.pos += 1;
        }
        let int_len = self.pos - int_start;
        if int_len == 0 || (int_len > 1 && self.b[int_start] == b'0') {
            return Err(self.err("invalid number"));
        }
        let mut exp10: i64 = 0;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let start = self.pos;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                digits.push(c - b'0');
                exp10 -= 1;
                self.pos += 1;
            }
            if self.pos == start {
                return Err(self.err("invalid number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            let neg_exp = match self.peek() {
                Some(b'-') => {
                    self.pos += 1;
                    true
                }
                Some(b'+') => {
                    self.pos += 1;
                    false
                }
                _ => false,
            };
            let start = self.pos;
            let mut e: i64 = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                e = (e * 10 + i64::from(c - b'0')).min(1_000_000_000);
                self.pos += 1;
            }
            if self.pos == start {
                return Err(self.err("invalid number"));
            }
            exp10 += if neg_exp { -e } else { e };
        }
        decimal_to_numeric(negative, &digits, exp10).ok_or(self.err("number outside numeric range"))
    }
}

/// `±digits × 10^exp10` as base-10000 groups; `None` when the weight leaves int16 or the
/// groups exceed `MAX_NUMERIC_GROUPS`.
pub fn decimal_to_numeric(negative: bool, digits: &[u8], exp10: i64) -> Option<OwnedNumeric> {
    let first = digits.iter().position(|&d| d != 0);
    let last = digits.iter().rposition(|&d| d != 0);
    let (Some(first), Some(last)) = (first, last) else {
        return Some(OwnedNumeric {
            sign: NumericSign::Positive,
            weight: 0,
            digits: Vec::new(),
        });
    };
    let n = digits.len() as i64;
    // Decimal place (power of ten) of digit i.
    let place = |i: usize| exp10 + (n - 1 - i as i64);
    let top = place(first).div_euclid(4);
    let bottom = place(last).div_euclid(4);
    let groups = usize::try_from(top - bottom + 1).ok()?;
    if groups > MAX_NUMERIC_GROUPS {
        return None;
    }
    let weight = i16::try_from(top).ok()?;
    let mut out = alloc::vec![0u16; groups];
    for (i, &d) in digits.iter().enumerate().take(last + 1).skip(first) {
        let p = place(i);
        let g = (top - p.div_euclid(4)) as usize;
        out[g] += u16::from(d) * 10u16.pow(p.rem_euclid(4) as u32);
    }
    Some(OwnedNumeric {
        sign: if negative {
            NumericSign::Negative
        } else {
            NumericSign::Positive
        },
        weight,
        digits: out,
    })
}
