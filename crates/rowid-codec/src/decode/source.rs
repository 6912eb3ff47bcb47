//! Where the decoder reads bytes from: a cursor over one identity's bytes (the input slice
//! of a top-level identity, or the unescaped bytes of a child identity, spec §6.1), and the
//! escaped runs of spec §2.1, found with `memchr` and borrowed where nothing was escaped.

use alloc::borrow::Cow;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::primitives::{ESCAPE, ESCAPED_ZERO, TERMINATOR};
use crate::tag::TypeTag;

/// A cursor over one identity's bytes; offsets in errors are relative to them.
#[derive(Clone)]
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Bytes consumed so far.
    #[inline]
    pub(super) fn offset(&self) -> usize {
        self.pos
    }

    /// True when every byte has been consumed.
    #[inline]
    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// The bytes from `start` to the cursor.
    #[inline]
    pub(super) fn since(&self, start: usize) -> &'a [u8] {
        self.bytes.get(start..self.pos).unwrap_or_default()
    }

    /// The next byte; the input may not end here.
    #[inline]
    pub(super) fn byte(&mut self) -> Result<u8> {
        match self.bytes.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(Error::Truncated { offset: self.pos }),
        }
    }

    /// The `len` bytes that start `skip` bytes past the cursor, without consuming them, if
    /// the input holds them.
    #[inline]
    pub(super) fn ahead(&self, skip: usize, len: usize) -> Option<&'a [u8]> {
        let start = self.pos.checked_add(skip)?;
        self.bytes.get(start..start.checked_add(len)?)
    }

    /// The bytes not consumed yet.
    #[inline]
    pub(super) fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    /// Consumes `n` bytes that [`ahead`](Self::ahead) or [`rest`](Self::rest) showed are
    /// there.
    #[inline]
    pub(super) fn advance(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.bytes.len());
    }

    /// The next `N` bytes without consuming them, if the input holds them.
    #[inline]
    pub(super) fn peek<const N: usize>(&self) -> Option<[u8; N]> {
        let end = self.pos.checked_add(N)?;
        self.bytes.get(self.pos..end)?.try_into().ok()
    }

    /// Skips `n` bytes; the input may not end before them.
    #[inline]
    pub(super) fn skip(&mut self, n: usize) -> Result<()> {
        let end = self.pos.saturating_add(n);
        if end > self.bytes.len() {
            return Err(Error::Truncated {
                offset: self.bytes.len(),
            });
        }
        self.pos = end;
        Ok(())
    }

    /// The next `N` bytes.
    #[inline]
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let end = self.pos.saturating_add(N);
        match self
            .bytes
            .get(self.pos..end)
            .and_then(|b| b.try_into().ok())
        {
            Some(a) => {
                self.pos = end;
                Ok(a)
            }
            None => Err(Error::Truncated {
                offset: self.bytes.len(),
            }),
        }
    }

    /// Reads an escaped, terminated run (spec §2.1) whose raw bytes are complemented with
    /// `xor` (`0xFF` for a negative numeric's digits). Each escape is found with `memchr`;
    /// the run is checked completely before anything is returned.
    pub(super) fn escaped(&mut self, field: u32, xor: u8) -> Result<Escaped<'a>> {
        let start = self.pos;
        let escape = ESCAPE ^ xor;
        let mut escapes = 0usize;
        let mut at = start;
        loop {
            let rest = self.bytes.get(at..).unwrap_or_default();
            let Some(i) = memchr::memchr(escape, rest) else {
                return Err(Error::Truncated {
                    offset: self.bytes.len(),
                });
            };
            let esc = at + i;
            let Some(&second) = self.bytes.get(esc + 1) else {
                return Err(Error::Truncated {
                    offset: self.bytes.len(),
                });
            };
            match second ^ xor {
                TERMINATOR => {
                    self.pos = esc + 2;
                    return Ok(Escaped {
                        raw: self.bytes.get(start..esc).unwrap_or_default(),
                        escapes,
                        xor,
                    });
                }
                ESCAPED_ZERO => {
                    escapes += 1;
                    at = esc + 2;
                }
                _ => return Err(Error::InvalidEscape { field, offset: esc }),
            }
        }
    }
}

/// An escaped run, checked: its raw bytes (the terminator excluded), how many escaped zeros
/// they hold, and the complement applied to them.
#[derive(Clone, Copy)]
pub(super) struct Escaped<'a> {
    raw: &'a [u8],
    escapes: usize,
    xor: u8,
}

impl<'a> Escaped<'a> {
    /// Number of unescaped bytes.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.raw.len() - self.escapes
    }

    /// The last unescaped byte. Every escape byte in a checked run begins a pair (a
    /// pair's second byte is never the escape byte), so the run ends in an escaped zero
    /// exactly when its last two raw bytes are one.
    #[inline]
    pub(super) fn last(&self) -> Option<u8> {
        match *self.raw {
            [.., a, b] if a ^ self.xor == ESCAPE && b ^ self.xor == ESCAPED_ZERO => Some(0),
            [.., b] => Some(b ^ self.xor),
            [] => None,
        }
    }

    /// The bytes as they are, when nothing was escaped and no complement applies (the
    /// run is then its own unescaped form).
    #[inline]
    pub(super) fn plain(&self) -> Option<&'a [u8]> {
        (self.escapes == 0 && self.xor == 0).then_some(self.raw)
    }

    /// The unescaped bytes one at a time, complement undone, without copying the run.
    pub(super) fn iter(&self) -> impl Iterator<Item = u8> + 'a {
        let (raw, xor) = (self.raw, self.xor);
        let mut i = 0;
        core::iter::from_fn(move || {
            let b = *raw.get(i)? ^ xor;
            // In a checked run an escape byte always begins an escaped zero.
            i += if b == ESCAPE { 2 } else { 1 };
            Some(b)
        })
    }

    /// The unescaped bytes with the complement undone: borrowed when nothing was escaped and
    /// no complement applies, otherwise copied in runs between escapes.
    pub(super) fn bytes(&self) -> Cow<'a, [u8]> {
        if self.escapes == 0 && self.xor == 0 {
            return Cow::Borrowed(self.raw);
        }
        let escape = ESCAPE ^ self.xor;
        let mut out = Vec::with_capacity(self.len());
        let mut rest = self.raw;
        while let Some(i) = memchr::memchr(escape, rest) {
            out.extend(rest[..i].iter().map(|b| b ^ self.xor));
            out.push(0);
            rest = rest.get(i + 2..).unwrap_or_default();
        }
        out.extend(rest.iter().map(|b| b ^ self.xor));
        Cow::Owned(out)
    }
}

/// What a payload reader knows about the field it reads: for error messages, and whether the
/// value is kept (decode) or only checked (validate).
pub(super) struct FieldCtx {
    /// Index of the top-level field.
    pub(super) field: u32,
    /// Tag of the value being read (a nested value's own tag).
    pub(super) tag: TypeTag,
    /// Offset where the value's payload starts.
    pub(super) offset: usize,
    /// Build the decoded value (decode) or only check it (validate).
    pub(super) keep: bool,
    /// Levels the value spans below its holder, filled in by structural readers.
    pub(super) child_depth: u32,
}

impl FieldCtx {
    /// The context of a value of type `tag` in top-level field `field` whose payload starts
    /// at `offset`.
    pub(super) fn new(field: u32, tag: TypeTag, offset: usize, keep: bool) -> Self {
        FieldCtx {
            field,
            tag,
            offset,
            keep,
            child_depth: 0,
        }
    }

    /// [`Error::NonCanonical`] for this value.
    pub(super) fn non_canonical(&self, reason: &'static str) -> Error {
        Error::NonCanonical {
            field: self.field,
            offset: self.offset,
            tag: self.tag,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn unescape(input: &[u8], xor: u8) -> Result<(Vec<u8>, usize)> {
        let mut r = Reader::new(input);
        let run = r.escaped(0, xor)?;
        Ok((run.bytes().into_owned(), r.offset()))
    }

    /// The reader is the inverse of `put_escaped`: a bad escape and a missing terminator are
    /// errors at the right offsets, and reading stops just past the terminator.
    #[test]
    fn scan_rejects_bad_escape_and_truncation() {
        assert_eq!(
            unescape(&[0x61, 0x00, 0x01], 0),
            Err(Error::InvalidEscape {
                field: 0,
                offset: 1
            })
        );
        assert_eq!(
            unescape(&[0x61, 0x00], 0),
            Err(Error::Truncated { offset: 2 })
        );
        assert_eq!(unescape(&[0x61], 0), Err(Error::Truncated { offset: 1 }));
        assert_eq!(unescape(&[0x00, 0xFF, 0x00, 0x00, 9], 0), Ok((vec![0], 4)));
    }

    /// Runs are borrowed when nothing was escaped and copied otherwise; the last byte and
    /// the length count an escaped zero as one byte; the complemented form reads the same.
    #[test]
    fn runs_borrow_when_unescaped_and_count_escapes_as_bytes() {
        let mut r = Reader::new(b"abc\x00\x00");
        let run = r.escaped(0, 0).unwrap_or_else(|_| unreachable!());
        assert!(matches!(run.bytes(), Cow::Borrowed(b"abc")));
        assert_eq!(
            (run.len(), run.last(), run.plain()),
            (3, Some(b'c'), Some(&b"abc"[..]))
        );

        let mut r = Reader::new(&[1, 0x00, 0xFF, 2, 0x00, 0xFF, 0x00, 0x00]);
        let run = r.escaped(0, 0).unwrap_or_else(|_| unreachable!());
        assert_eq!(run.bytes().as_ref(), &[1, 0, 2, 0]);
        assert_eq!((run.len(), run.last(), run.plain()), (4, Some(0), None));

        // A literal 0xFF after an escaped zero is a byte, not part of an escape.
        let mut r = Reader::new(&[0x00, 0xFF, 0xFF, 0x00, 0x00]);
        let run = r.escaped(0, 0).unwrap_or_else(|_| unreachable!());
        assert_eq!(run.bytes().as_ref(), &[0, 0xFF]);
        assert_eq!(run.last(), Some(0xFF));

        // Complemented: FF is the escape, FF FF the terminator, FF 00 a zero.
        let mut r = Reader::new(&[0xFE, 0xFF, 0x00, 0xFF, 0xFF]);
        let run = r.escaped(0, 0xFF).unwrap_or_else(|_| unreachable!());
        assert_eq!(run.bytes().as_ref(), &[1, 0]);
        assert_eq!(r.offset(), 5);
    }
}
