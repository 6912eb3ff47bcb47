//! The borrowing decoder: an iterator over an identity's fields that checks each one as
//! strictly as [`decode`](super::decode) and allocates nothing, for consumers that only
//! validate identities or compare them field by field.

use super::source::{FieldCtx, Reader};
use super::{
    Summary, check_len, check_payload, parse_payload, read_end, read_field_head, read_header,
};
use crate::error::{Error, Result};
use crate::tag::{Domain, TypeTag};
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

/// `Fields::next` once the iterator has ended (no field has this index: `MAX_FIELDS` is
/// smaller).
const ENDED: u32 = u32::MAX;

/// Reads the header of `bytes` and returns an iterator over its fields.
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

    /// Reads and checks field `index`.
    #[inline]
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

    fn fail<T>(&mut self, e: Error) -> Option<Result<T>> {
        self.next = ENDED;
        self.failed = Some(e);
        Some(Err(e))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<FieldRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next < self.declared {
            let index = self.next;
            return match self.field(index) {
                Ok(f) => {
                    self.next += 1;
                    Some(Ok(f))
                }
                Err(e) => self.fail(e),
            };
        }
        if self.next == ENDED {
            return None;
        }
        self.next = ENDED;
        match read_end(&mut self.src) {
            Ok(()) => None,
            Err(e) => self.fail(e),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.declared.saturating_sub(self.next) as usize;
        (0, Some(left + 1))
    }
}
