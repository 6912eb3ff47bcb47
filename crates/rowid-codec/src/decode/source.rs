//! Where the decoder reads bytes from: the input slice of a top-level identity, or an
//! unescaping view of the parent's payload for a child identity (spec §6.1), and the few
//! primitives every reader uses.

use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::primitives::{ESCAPE, ESCAPED_ZERO, TERMINATOR};
use crate::tag::TypeTag;

/// A stream of an identity's bytes.
pub(super) trait Source {
    /// The next byte, or `None` at the end of this identity's bytes.
    fn next(&mut self) -> Result<Option<u8>>;
    /// Bytes produced so far (offsets in errors are relative to this identity).
    fn offset(&self) -> usize;
}

/// A top-level identity: the input slice.
pub(super) struct SliceSource<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> SliceSource<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        SliceSource { bytes, pos: 0 }
    }
}

impl Source for SliceSource<'_> {
    #[inline]
    fn next(&mut self) -> Result<Option<u8>> {
        let b = self.bytes.get(self.pos).copied();
        if b.is_some() {
            self.pos += 1;
        }
        Ok(b)
    }

    fn offset(&self) -> usize {
        self.pos
    }
}

/// Unescapes a child identity out of its parent's field payload; ends at the terminator.
/// With `keep`, the unescaped bytes are collected.
pub(super) struct UnescapeSource<'p> {
    parent: &'p mut dyn Source,
    field: u32,
    produced: usize,
    done: bool,
    keep: Option<Vec<u8>>,
}

impl<'p> UnescapeSource<'p> {
    pub(super) fn new(parent: &'p mut dyn Source, field: u32, keep: bool) -> Self {
        UnescapeSource {
            parent,
            field,
            produced: 0,
            done: false,
            keep: keep.then(Vec::new),
        }
    }

    /// The unescaped bytes collected (empty when not keeping).
    pub(super) fn into_bytes(self) -> Vec<u8> {
        self.keep.unwrap_or_default()
    }
}

impl Source for UnescapeSource<'_> {
    fn next(&mut self) -> Result<Option<u8>> {
        if self.done {
            return Ok(None);
        }
        let at = self.parent.offset();
        let b = need(self.parent)?;
        let b = if b != ESCAPE {
            b
        } else {
            match need(self.parent)? {
                ESCAPED_ZERO => 0,
                TERMINATOR => {
                    self.done = true;
                    return Ok(None);
                }
                _ => {
                    return Err(Error::InvalidEscape {
                        field: self.field,
                        offset: at,
                    });
                }
            }
        };
        self.produced += 1;
        if let Some(k) = self.keep.as_mut() {
            k.push(b);
        }
        Ok(Some(b))
    }

    fn offset(&self) -> usize {
        self.produced
    }
}

/// The next byte; the input may not end here.
#[inline]
pub(super) fn need(src: &mut dyn Source) -> Result<u8> {
    let offset = src.offset();
    src.next()?.ok_or(Error::Truncated { offset })
}

/// The next `N` bytes.
#[inline]
pub(super) fn need_array<const N: usize>(src: &mut dyn Source) -> Result<[u8; N]> {
    let mut out = [0u8; N];
    for b in &mut out {
        *b = need(src)?;
    }
    Ok(out)
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

/// Reads an escaped, terminated run (spec §2.1); `xor` is applied to raw bytes first, which
/// lets the numeric reader read complemented runs. Calls `each` with every unescaped byte.
pub(super) fn read_escaped(
    src: &mut dyn Source,
    ctx: &FieldCtx,
    xor: u8,
    mut each: impl FnMut(u8) -> Result<()>,
) -> Result<()> {
    loop {
        let at = src.offset();
        let b = need(src)? ^ xor;
        if b != ESCAPE {
            each(b)?;
            continue;
        }
        match need(src)? ^ xor {
            TERMINATOR => return Ok(()),
            ESCAPED_ZERO => each(0)?,
            _ => {
                return Err(Error::InvalidEscape {
                    field: ctx.field,
                    offset: at,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn unescape(input: &[u8]) -> Result<(Vec<u8>, usize)> {
        let mut src = SliceSource::new(input);
        let ctx = FieldCtx {
            field: 0,
            tag: TypeTag::Bytea,
            offset: 0,
            keep: true,
            child_depth: 0,
        };
        let mut out = Vec::new();
        read_escaped(&mut src, &ctx, 0, |b| {
            out.push(b);
            Ok(())
        })?;
        Ok((out, src.offset()))
    }

    /// The reader is the inverse of `put_escaped`: a bad escape and a missing terminator are
    /// errors at the right offsets, and reading stops just past the terminator.
    #[test]
    fn scan_rejects_bad_escape_and_truncation() {
        assert_eq!(
            unescape(&[0x61, 0x00, 0x01]),
            Err(Error::InvalidEscape {
                field: 0,
                offset: 1
            })
        );
        assert_eq!(unescape(&[0x61, 0x00]), Err(Error::Truncated { offset: 2 }));
        assert_eq!(unescape(&[0x00, 0xFF, 0x00, 0x00, 9]), Ok((vec![0], 4)));
    }
}
