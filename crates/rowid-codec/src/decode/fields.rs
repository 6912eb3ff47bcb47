//! The borrowing decoder: an iterator over an identity's fields that checks each one as
//! strictly as [`decode`](super::decode) and allocates nothing, for consumers that only
//! validate identities or compare them field by field.

use super::scalar::any_bytes_width;
use super::source::{FieldCtx, Reader};
use super::{
    Summary, check_len, check_payload, parse_payload, read_end, read_field_head, read_header,
};
use crate::error::{Error, Result};
use crate::primitives::unflip_i128;
use crate::scalar::Interval;
use crate::tag::{Domain, NULL_STATE, TUPLE_END, TypeTag, VALUE_STATE};
use crate::value::OwnedValue;

/// One field of an identity, borrowed from its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRef<'a> {
    /// Position of the field in the identity.
    pub index: u32,
    /// The field's type tag.
    pub tag: TypeTag,
    /// The field's payload exactly as encoded (spec §5, §6), checked; `None` for SQL NULL.
    /// Payloads of one tag compare bytewise in the order of their values (spec §1).
    pub payload: Option<&'a [u8]>,
}

impl FieldRef<'_> {
    /// Decodes the field's value (`None` for NULL); allocates only what the owned value
    /// holds.
    pub fn to_owned_value(&self) -> Result<Option<OwnedValue>> {
        let Some(payload) = self.payload else {
            return Ok(None);
        };
        let mut src = Reader::new(payload);
        let mut ctx = FieldCtx::new(self.index, self.tag, 0, true);
        parse_payload(&mut src, &mut ctx, 1)
    }
}

/// Iterates the fields of one identity without allocating (spec §8).
///
/// Every field is checked before it is yielded; after the last field the iterator checks
/// `TUPLE_END` and the end of input, and yields an error if they are wrong, so a loop that
/// runs to the end has seen every check [`validate`](super::validate) makes. After an
/// error the iterator ends.
///
/// ```
/// use rowid_codec::{decode::fields, encode_identity, Domain, TypeTag, Value};
/// let mut id = Vec::new();
/// encode_identity(&mut id, Domain::ScanKey, &[
///     (TypeTag::Int8, Some(Value::Int8(7))),
///     (TypeTag::Text, None),
/// ]).unwrap();
/// let mut it = fields(&id).unwrap();
/// assert_eq!(it.domain(), Domain::ScanKey);
/// let first = it.next().unwrap().unwrap();
/// assert_eq!((first.tag, first.payload), (TypeTag::Int8, Some(&[0x80, 0, 0, 0, 0, 0, 0, 7][..])));
/// assert_eq!(it.next().unwrap().unwrap().payload, None);
/// assert!(it.next().is_none());
/// ```
#[derive(Clone)]
pub struct Fields<'a> {
    src: Reader<'a>,
    domain: Domain,
    declared: u32,
    next: u32,
    max_child: u32,
    /// The error already yielded, if any.
    failed: Option<Error>,
}

/// How the quick path checks a value of one tag.
#[derive(Clone, Copy)]
enum Quick {
    /// Not at all: the full reader checks it.
    Full,
    /// Every payload of this width is canonical (spec §5): skipping it is checking it.
    AnyBytes(u8),
    /// An interval: 16 bytes whose comparison value must lie in range (spec §5.14).
    Interval,
}

/// Per tag byte: the type tag it names and how the quick path checks its values, in one
/// lookup.
const QUICK_TAGS: [(Option<TypeTag>, Quick); 256] = {
    let mut table = [(None, Quick::Full); 256];
    let mut byte = 0;
    while byte < table.len() {
        let tag = TypeTag::from_byte(byte as u8);
        let quick = match tag {
            Some(TypeTag::Interval) => Quick::Interval,
            Some(tag) => match any_bytes_width(tag) {
                Some(w) => Quick::AnyBytes(w as u8),
                None => Quick::Full,
            },
            None => Quick::Full,
        };
        table[byte] = (tag, quick);
        byte += 1;
    }
    table
};

/// `Fields::next` once the iterator has ended (no field has this index: `MAX_FIELDS` is
/// smaller).
const ENDED: u32 = u32::MAX;

/// Reads the header of `bytes` and returns an iterator over its fields.
#[inline]
pub fn fields(bytes: &[u8]) -> Result<Fields<'_>> {
    check_len(bytes)?;
    let mut src = Reader::new(bytes);
    let (domain, declared) = read_header(&mut src)?;
    Ok(Fields {
        src,
        domain,
        declared,
        next: 0,
        max_child: 0,
        failed: None,
    })
}

impl<'a> Fields<'a> {
    /// The identity's domain.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The declared field count.
    pub fn field_count(&self) -> u32 {
        self.declared
    }

    /// Checks the remaining fields and the end of the identity; returns what
    /// [`validate`](super::validate) returns, or the error the iterator already yielded.
    pub fn finish(mut self) -> Result<Summary> {
        for field in self.by_ref() {
            field?;
        }
        if let Some(e) = self.failed {
            return Err(e);
        }
        Ok(Summary {
            domain: self.domain,
            field_count: self.declared,
            depth: 1 + self.max_child,
        })
    }

    /// The common field, checked inline: a NULL, or a value of a family whose every payload
    /// of its width is canonical, with all its bytes present. Anything else (other families,
    /// and every malformed input, whose error the full reader names) is `None`, untouched.
    #[inline(always)]
    fn quick_field(&mut self, index: u32) -> Option<FieldRef<'a>> {
        let [t, state] = self.src.peek::<2>()?;
        // `TUPLE_END` is no type tag, so a missing field takes the full reader too.
        let (tag, quick) = QUICK_TAGS[usize::from(t)];
        let tag = tag?;
        let payload = match (state, quick) {
            (NULL_STATE, _) => None,
            (VALUE_STATE, Quick::AnyBytes(width)) => Some(self.src.ahead(2, usize::from(width))?),
            (VALUE_STATE, Quick::Interval) => {
                let p = self.src.ahead(2, 16)?;
                let cmp = unflip_i128(p.try_into().ok()?);
                if !(Interval::MIN_CMP..=Interval::MAX_CMP).contains(&cmp) {
                    return None;
                }
                Some(p)
            }
            _ => return None,
        };
        self.src.advance(2 + payload.map_or(0, <[u8]>::len));
        Some(FieldRef {
            index,
            tag,
            payload,
        })
    }

    /// Reads and checks field `index`, whatever it holds.
    #[inline(never)]
    fn field(&mut self, index: u32) -> Result<FieldRef<'a>> {
        let (tag, present) = read_field_head(&mut self.src, self.declared, index)?;
        let payload = if present {
            let start = self.src.offset();
            let child_depth = check_payload(&mut self.src, index, tag, 1)?;
            self.max_child = self.max_child.max(child_depth);
            Some(self.src.since(start))
        } else {
            None
        };
        Ok(FieldRef {
            index,
            tag,
            payload,
        })
    }

    /// Checks `TUPLE_END` and the end of input (the one-byte rest is the common case).
    #[inline(always)]
    fn end(&mut self) -> Option<Result<FieldRef<'a>>> {
        self.next = ENDED;
        if self.src.rest() == [TUPLE_END] {
            self.src.advance(1);
            return None;
        }
        self.end_slow()
    }

    #[cold]
    #[inline(never)]
    fn end_slow(&mut self) -> Option<Result<FieldRef<'a>>> {
        match read_end(&mut self.src) {
            Ok(()) => None,
            Err(e) => self.fail(e),
        }
    }

    /// Reads field `index` with the full reader; ends the iterator on error.
    #[inline(never)]
    fn slow_next(&mut self, index: u32) -> Option<Result<FieldRef<'a>>> {
        match self.field(index) {
            Ok(f) => {
                self.next += 1;
                Some(Ok(f))
            }
            Err(e) => self.fail(e),
        }
    }

    #[cold]
    fn fail<T>(&mut self, e: Error) -> Option<Result<T>> {
        self.next = ENDED;
        self.failed = Some(e);
        Some(Err(e))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<FieldRef<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.next < self.declared {
            let index = self.next;
            if let Some(f) = self.quick_field(index) {
                self.next += 1;
                return Some(Ok(f));
            }
            return self.slow_next(index);
        }
        if self.next == ENDED {
            return None;
        }
        self.end()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.declared.saturating_sub(self.next) as usize;
        (0, Some(left + 1))
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::fields;
    use crate::decode::validate;
    use crate::error::Result;
    use crate::primitives::flip_i128;
    use crate::scalar::Interval;

    /// Runs the iterator to its end and returns what it ended with.
    fn walk(bytes: &[u8]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::new();
        for f in fields(bytes)? {
            out.push(f?.payload.map(<[u8]>::to_vec));
        }
        Ok(out)
    }

    /// One-field `SCAN_KEY` identity: tag, state, payload, then `rest` in place of `TUPLE_END`.
    fn one(tag: u8, state: u8, payload: &[u8], rest: &[u8]) -> Vec<u8> {
        let mut id = alloc::vec![0x02, 0x01, 0, 0, 0, 1, tag, state];
        id.extend_from_slice(payload);
        id.extend_from_slice(rest);
        id
    }

    #[test]
    fn quick_path_checks_what_the_full_reader_checks() {
        let interval = |cmp: i128| flip_i128(cmp).to_vec();
        let cases = [
            // interval range edges: in, in, out, out
            one(0x13, 1, &interval(Interval::MIN_CMP), &[0xFF]),
            one(0x13, 1, &interval(Interval::MAX_CMP), &[0xFF]),
            one(0x13, 1, &interval(Interval::MIN_CMP - 1), &[0xFF]),
            one(0x13, 1, &interval(Interval::MAX_CMP + 1), &[0xFF]),
            // fixed width: whole, truncated payload, bad state, NULL, trailing byte, no end
            one(0x04, 1, &[0x80, 0, 0, 0, 0, 0, 0, 7], &[0xFF]),
            one(0x04, 1, &[0x80, 0, 0, 0, 0, 0, 0], &[]),
            one(0x0D, 2, &[0; 16], &[0xFF]),
            one(0x0D, 0, &[], &[0xFF]),
            one(0x0D, 1, &[0; 16], &[0xFF, 0x00]),
            one(0x0D, 1, &[0; 16], &[]),
            // unknown tag, and TUPLE_END where the field should be
            one(0xEE, 1, &[], &[0xFF]),
            alloc::vec![0x02, 0x01, 0, 0, 0, 1, 0xFF],
        ];
        for (i, id) in cases.iter().enumerate() {
            let walked = walk(id);
            let verdict = validate(id);
            assert_eq!(walked.as_ref().err(), verdict.as_ref().err(), "case {i}");
            if let Ok(payloads) = walked {
                assert_eq!(payloads.len(), 1, "case {i}");
            }
            assert_eq!(
                fields(id).and_then(super::Fields::finish),
                verdict,
                "case {i}"
            );
        }
        assert!(walk(&cases[0]).is_ok() && walk(&cases[1]).is_ok());
        assert!(walk(&cases[2]).is_err() && walk(&cases[3]).is_err());
    }
}
