//! The strict decoder (spec/wire-format.md §8): identity bytes back to canonical typed fields.
//!
//! Every accepted input is the one canonical encoding of its fields: re-encoding a decoded
//! identity reproduces the input byte for byte. [`validate`] runs the same checks without
//! building values, which is how [`ChildIdentity::new`] vets a child identity before the
//! encoder may write it.
//!
//! This file holds the identity framing and the recursive core (the payload dispatch, child
//! identities and the structural readers, whose elements are payloads again); the byte
//! sources are in `source`, the leaf readers of the scalar families in `scalar`. The decoder
//! reads only the shared vocabulary, never the encoder.

mod fields;
mod scalar;
mod source;

pub use self::fields::{FieldRef, Fields, fields};

use alloc::boxed::Box;
use alloc::vec::Vec;

use self::scalar::{any_bytes_value, any_bytes_width, read_numeric, read_scalar, read_text};
use self::source::{FieldCtx, Reader};
use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_DEPTH, MAX_FIELDS, MAX_IDENTITY_LEN};
use crate::primitives::unflip_i32;
use crate::scalar::{ChildIdentity, NumericSign, OwnedChildIdentity};
use crate::structure::{
    ArrayDim, ITEM_NULL, ITEM_VALUE, LIST_END, MAX_ARRAY_DIMS, array_shape_error, bound,
    check_count, check_depth, jsonb_tag, key_order, range_state,
};
use crate::tag::{Domain, NULL_STATE, TUPLE_END, TypeTag, VALUE_STATE, VERSION_V2};
use crate::value::{
    ArrayValue, DecodedIdentity, JsonbValue, MultirangeValue, OwnedField, OwnedValue, RangeBound,
    RangeBounds, RangeValue, RecordValue,
};

/// What [`validate`] learns about a valid identity without decoding its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The identity's domain.
    pub domain: Domain,
    /// Number of fields.
    pub field_count: u32,
    /// Nesting depth: 1, plus the deepest structure or child identity inside it.
    pub depth: u32,
}

/// Decodes one complete identity, rejecting every non-canonical or malformed input
/// (spec §8). Never panics.
pub fn decode(bytes: &[u8]) -> Result<DecodedIdentity> {
    check_len(bytes)?;
    let mut src = Reader::new(bytes);
    let (domain, declared) = read_header(&mut src)?;
    // Sized from the header, but never more than a small input could justify.
    let mut fields = Vec::with_capacity(declared.min(16) as usize);
    for field in 0..declared {
        let (tag, present) = read_field_head(&mut src, declared, field)?;
        let mut value = None;
        if present {
            // The families whose every payload is canonical are read in place.
            let quick = any_bytes_width(tag)
                .and_then(|w| src.ahead(0, w))
                .and_then(|bytes| Some((bytes.len(), any_bytes_value(tag, bytes)?)));
            value = match quick {
                Some((width, v)) => {
                    src.advance(width);
                    Some(v)
                }
                None => {
                    let mut ctx = FieldCtx::new(field, tag, src.offset(), true);
                    parse_payload(&mut src, &mut ctx, 1)?
                }
            };
        }
        fields.push(OwnedField { tag, value });
    }
    read_end(&mut src)?;
    Ok(DecodedIdentity { domain, fields })
}

/// Checks that `bytes` is one complete, canonical identity without building the decoded
/// values (spec §8). It allocates only to unescape a child identity that holds an escaped
/// zero; [`fields()`] yields the same checks field by field.
pub fn validate(bytes: &[u8]) -> Result<Summary> {
    check_len(bytes)?;
    let mut src = Reader::new(bytes);
    parse_identity(&mut src, 1)
}

impl<'a> ChildIdentity<'a> {
    /// Accepts `bytes` as a child identity when the strict decoder accepts them as a complete
    /// identity (spec §6.1); remembers their depth for the encoder's `MAX_DEPTH` check.
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        let summary = validate(bytes)?;
        Ok(ChildIdentity {
            bytes,
            depth: summary.depth,
        })
    }
}

fn check_len(bytes: &[u8]) -> Result<()> {
    if bytes.len() > MAX_IDENTITY_LEN {
        return Err(Error::LimitExceeded {
            limit: Limit::IdentityLength,
            value: bytes.len(),
        });
    }
    Ok(())
}

/// Checks one identity held at `depth` without building its values.
fn parse_identity(src: &mut Reader<'_>, depth: u32) -> Result<Summary> {
    let (domain, declared) = read_header(src)?;
    let mut max_child = 0u32;
    for field in 0..declared {
        let (tag, present) = read_field_head(src, declared, field)?;
        if present {
            max_child = max_child.max(check_payload(src, field, tag, depth)?);
        }
    }
    read_end(src)?;
    Ok(Summary {
        domain,
        field_count: declared,
        depth: 1 + max_child,
    })
}

/// Reads `VERSION | DOMAIN | FIELD_COUNT` (spec §3).
#[inline]
fn read_header(src: &mut Reader<'_>) -> Result<(Domain, u32)> {
    // The whole header in one read when the input holds it; a shorter input is read byte
    // by byte, so it reports the first thing wrong with the bytes it has.
    let header = src.peek::<6>();
    let version = match header {
        Some(h) => h[0],
        None => src.byte()?,
    };
    if version != VERSION_V2 {
        return Err(Error::UnknownVersion { found: version });
    }
    let d = match header {
        Some(h) => h[1],
        None => src.byte()?,
    };
    let domain = Domain::from_byte(d).ok_or(Error::UnknownDomain { found: d })?;
    let count = match header {
        Some([_, _, c0, c1, c2, c3]) => [c0, c1, c2, c3],
        None => src.array()?,
    };
    let declared = u32::from_be_bytes(count);
    if declared > MAX_FIELDS {
        return Err(Error::LimitExceeded {
            limit: Limit::FieldCount,
            value: declared as usize,
        });
    }
    if header.is_some() {
        src.skip(6)?;
    }
    Ok((domain, declared))
}

/// Reads the tag and state of field `field` of `declared` (spec §4); true when a payload
/// follows.
#[inline]
fn read_field_head(src: &mut Reader<'_>, declared: u32, field: u32) -> Result<(TypeTag, bool)> {
    let offset = src.offset();
    let t = src.byte()?;
    if t == TUPLE_END {
        return Err(Error::FieldCountMismatch {
            declared,
            actual: field,
        });
    }
    let tag = TypeTag::from_byte(t).ok_or(Error::UnknownTypeTag {
        field,
        offset,
        found: t,
    })?;
    let state_offset = src.offset();
    match src.byte()? {
        NULL_STATE => Ok((tag, false)),
        VALUE_STATE => Ok((tag, true)),
        found => Err(Error::InvalidNullState {
            field,
            offset: state_offset,
            found,
        }),
    }
}

/// Checks one payload of type `tag` without building its value; returns the levels it spans
/// below its holder. A family whose every payload of its width is canonical is skipped.
#[inline]
fn check_payload(src: &mut Reader<'_>, field: u32, tag: TypeTag, depth: u32) -> Result<u32> {
    if let Some(width) = any_bytes_width(tag) {
        src.skip(width)?;
        return Ok(0);
    }
    let mut ctx = FieldCtx::new(field, tag, src.offset(), false);
    // The escaped scalar families are checked here, without the payload dispatch.
    match tag {
        TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar | TypeTag::Enum => {
            read_text(src, &ctx)?;
            return Ok(0);
        }
        TypeTag::Bytea => {
            src.escaped(field, 0)?;
            return Ok(0);
        }
        _ => {}
    }
    parse_payload(src, &mut ctx, depth)?;
    Ok(ctx.child_depth)
}

/// Reads `TUPLE_END`, which must be the last byte.
fn read_end(src: &mut Reader<'_>) -> Result<()> {
    let end_offset = src.offset();
    if src.byte()? != TUPLE_END {
        return Err(Error::MissingTupleEnd { offset: end_offset });
    }
    if !src.at_end() {
        return Err(Error::TrailingBytes {
            offset: src.offset(),
        });
    }
    Ok(())
}

/// Reads one payload of type `ctx.tag` held at nesting `depth`; returns the value when
/// `ctx.keep`.
fn parse_payload(
    src: &mut Reader<'_>,
    ctx: &mut FieldCtx,
    depth: u32,
) -> Result<Option<OwnedValue>> {
    if ctx.tag.is_scalar() {
        return read_scalar(src, ctx);
    }
    if ctx.tag == TypeTag::ChildIdentity {
        return parse_child(src, ctx, depth);
    }
    // A structure is one level below its holder and spans at least that level.
    let level = depth + 1;
    match ctx.tag {
        TypeTag::Array => parse_array(src, ctx, level),
        TypeTag::Range => parse_range(src, ctx, level),
        TypeTag::Multirange => parse_multirange(src, ctx, level),
        TypeTag::Jsonb => parse_jsonb(src, ctx, level),
        _ => parse_record(src, ctx, level),
    }
}

/// A child identity (spec §6.1): a complete identity, escaped into the parent's payload.
fn parse_child(src: &mut Reader<'_>, ctx: &mut FieldCtx, depth: u32) -> Result<Option<OwnedValue>> {
    if depth >= MAX_DEPTH {
        return Err(Error::LimitExceeded {
            limit: Limit::Depth,
            value: depth as usize + 1,
        });
    }
    // The child's bytes are the unescaped run; it must be exactly one identity.
    let bytes = src.escaped(ctx.field, 0)?.bytes();
    let mut child = Reader::new(&bytes);
    let summary = parse_identity(&mut child, depth + 1)?;
    ctx.child_depth = summary.depth;
    Ok(ctx.keep.then(|| {
        OwnedValue::Identity(OwnedChildIdentity::from(ChildIdentity {
            bytes: &bytes,
            depth: summary.depth,
        }))
    }))
}

// ---------------------------------------------------------------------------------------
// Structural payloads (spec §6.2–§6.7). Each reader reads one payload at nesting `level`
// (already checked against `MAX_DEPTH` by `parse_payload`), records in `ctx.child_depth`
// how many levels it spans when that is more than one, and returns the decoded tree when
// `ctx.keep` is set.
// ---------------------------------------------------------------------------------------

/// Reads a nested type tag.
fn read_tag(src: &mut Reader<'_>, ctx: &FieldCtx) -> Result<TypeTag> {
    let offset = src.offset();
    let t = src.byte()?;
    TypeTag::from_byte(t).ok_or(Error::UnknownTypeTag {
        field: ctx.field,
        offset,
        found: t,
    })
}

/// Reads one nested value of type `tag` held at `level`.
fn read_item(
    src: &mut Reader<'_>,
    ctx: &mut FieldCtx,
    tag: TypeTag,
    level: u32,
) -> Result<Option<OwnedValue>> {
    let mut sub = FieldCtx {
        field: ctx.field,
        tag,
        offset: src.offset(),
        keep: ctx.keep,
        child_depth: 0,
    };
    let v = parse_payload(src, &mut sub, level)?;
    ctx.child_depth = ctx.child_depth.max(1 + sub.child_depth);
    Ok(v)
}

/// Reads a framing byte that must be one of `allowed`.
fn read_marker(src: &mut Reader<'_>, ctx: &FieldCtx, allowed: &[u8]) -> Result<u8> {
    let offset = src.offset();
    let b = src.byte()?;
    if allowed.contains(&b) {
        Ok(b)
    } else {
        Err(Error::InvalidNullState {
            field: ctx.field,
            offset,
            found: b,
        })
    }
}

/// Reads list items until `LIST_END`, counting them against `MAX_ELEMENTS`; `item` reads one
/// item given its leading byte and that byte's offset. Returns the item count.
fn read_list<'r>(
    src: &mut Reader<'r>,
    ctx: &mut FieldCtx,
    mut item: impl FnMut(&mut Reader<'r>, &mut FieldCtx, u8, usize) -> Result<()>,
) -> Result<usize> {
    let mut count = 0usize;
    loop {
        let at = src.offset();
        let b = src.byte()?;
        if b == LIST_END {
            return Ok(count);
        }
        item(src, ctx, b, at)?;
        count += 1;
        check_count(count)?;
    }
}

fn parse_array(src: &mut Reader<'_>, ctx: &mut FieldCtx, level: u32) -> Result<Option<OwnedValue>> {
    let element = read_tag(src, ctx)?;
    let mut elements = Vec::new();
    let count = read_list(src, ctx, |src, ctx, b, at| {
        let v = match b {
            ITEM_NULL => None,
            ITEM_VALUE => read_item(src, ctx, element, level)?,
            found => {
                return Err(Error::InvalidNullState {
                    field: ctx.field,
                    offset: at,
                    found,
                });
            }
        };
        if ctx.keep {
            elements.push(v);
        }
        Ok(())
    })?;
    let ndims = usize::from(src.byte()?);
    if ndims > MAX_ARRAY_DIMS {
        return Err(ctx.non_canonical("more than 6 dimensions"));
    }
    let mut dims = [ArrayDim { len: 0, lower: 0 }; MAX_ARRAY_DIMS];
    for d in &mut dims[..ndims] {
        d.len = unflip_i32(src.array()?);
    }
    for d in &mut dims[..ndims] {
        d.lower = unflip_i32(src.array()?);
    }
    if let Some(reason) = array_shape_error(&dims[..ndims], count) {
        return Err(ctx.non_canonical(reason));
    }
    Ok(ctx.keep.then(|| {
        OwnedValue::Array(ArrayValue {
            element,
            dims: dims[..ndims].to_vec(),
            elements,
        })
    }))
}

fn read_bound_value(
    src: &mut Reader<'_>,
    ctx: &mut FieldCtx,
    subtype: TypeTag,
    level: u32,
    lower: bool,
) -> Result<RangeBound> {
    let v = read_item(src, ctx, subtype, level)?.unwrap_or(OwnedValue::Bool(false));
    let inclusive = match src.byte()? {
        bound::LOWER_INCLUSIVE_OR_UPPER_EXCLUSIVE => lower,
        bound::LOWER_EXCLUSIVE_OR_UPPER_INCLUSIVE => !lower,
        _ => return Err(ctx.non_canonical("range bound inclusivity byte is neither 00 nor 01")),
    };
    Ok(if inclusive {
        RangeBound::Inclusive(v)
    } else {
        RangeBound::Exclusive(v)
    })
}

/// Reads `LOWER UPPER` after the `01` state byte.
fn read_bounds(
    src: &mut Reader<'_>,
    ctx: &mut FieldCtx,
    subtype: TypeTag,
    level: u32,
) -> Result<RangeBounds> {
    let lower = match src.byte()? {
        bound::LOWER_INFINITE => RangeBound::Infinite,
        bound::FINITE => read_bound_value(src, ctx, subtype, level, true)?,
        _ => return Err(ctx.non_canonical("lower bound byte is neither 00 nor 01")),
    };
    let upper = match src.byte()? {
        bound::FINITE => read_bound_value(src, ctx, subtype, level, false)?,
        bound::UPPER_INFINITE => RangeBound::Infinite,
        _ => return Err(ctx.non_canonical("upper bound byte is neither 01 nor 02")),
    };
    Ok(RangeBounds { lower, upper })
}

fn parse_range(src: &mut Reader<'_>, ctx: &mut FieldCtx, level: u32) -> Result<Option<OwnedValue>> {
    let subtype = read_tag(src, ctx)?;
    let bounds = match src.byte()? {
        range_state::EMPTY => None,
        range_state::BOUNDED => Some(read_bounds(src, ctx, subtype, level)?),
        _ => return Err(ctx.non_canonical("range state byte is neither 00 nor 01")),
    };
    Ok(ctx
        .keep
        .then(|| OwnedValue::Range(Box::new(RangeValue { subtype, bounds }))))
}

fn parse_multirange(
    src: &mut Reader<'_>,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    let subtype = read_tag(src, ctx)?;
    let mut ranges = Vec::new();
    read_list(src, ctx, |src, ctx, b, _| {
        if b != range_state::BOUNDED {
            return Err(ctx.non_canonical("multirange item byte is neither 00 nor 01"));
        }
        let r = read_bounds(src, ctx, subtype, level)?;
        if ctx.keep {
            ranges.push(r);
        }
        Ok(())
    })?;
    Ok(ctx
        .keep
        .then_some(OwnedValue::Multirange(MultirangeValue { subtype, ranges })))
}

fn parse_record(
    src: &mut Reader<'_>,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    let n = u16::from_be_bytes(src.array()?);
    if u32::from(n) > MAX_FIELDS {
        return Err(Error::LimitExceeded {
            limit: Limit::FieldCount,
            value: usize::from(n),
        });
    }
    let mut fields = Vec::new();
    for _ in 0..n {
        let tag = read_tag(src, ctx)?;
        let value = match read_marker(src, ctx, &[ITEM_VALUE, ITEM_NULL])? {
            ITEM_NULL => None,
            _ => read_item(src, ctx, tag, level)?,
        };
        if ctx.keep {
            fields.push(OwnedField { tag, value });
        }
    }
    Ok(ctx
        .keep
        .then_some(OwnedValue::Record(RecordValue { fields })))
}

fn parse_jsonb(src: &mut Reader<'_>, ctx: &mut FieldCtx, level: u32) -> Result<Option<OwnedValue>> {
    let mut deepest = level;
    let first = src.byte()?;
    let j = read_json(src, ctx, first, level, &mut deepest)?;
    ctx.child_depth = deepest - level + 1;
    Ok(ctx.keep.then_some(OwnedValue::Jsonb(j)))
}

/// Reads the rest of one jsonb item at `level` whose item tag `item` was just read; the
/// returned tree is empty when not keeping.
fn read_json(
    src: &mut Reader<'_>,
    ctx: &FieldCtx,
    item: u8,
    level: u32,
    deepest: &mut u32,
) -> Result<JsonbValue> {
    Ok(match item {
        jsonb_tag::NULL => JsonbValue::Null,
        jsonb_tag::FALSE => JsonbValue::Bool(false),
        jsonb_tag::TRUE => JsonbValue::Bool(true),
        jsonb_tag::STRING => {
            let text = read_text(src, ctx)?;
            JsonbValue::String(if ctx.keep { text.to_vec() } else { Vec::new() })
        }
        jsonb_tag::NUMBER => {
            let n = read_numeric(src, ctx)?;
            if !matches!(n.sign, NumericSign::Positive | NumericSign::Negative) {
                return Err(ctx.non_canonical("a jsonb number is NaN or infinite"));
            }
            JsonbValue::Number(n)
        }
        jsonb_tag::ARRAY => {
            check_depth(level + 1)?;
            *deepest = (*deepest).max(level + 1);
            let mut items = Vec::new();
            let mut count = 0usize;
            loop {
                let next = src.byte()?;
                if next == LIST_END {
                    break;
                }
                let item = read_json(src, ctx, next, level + 1, deepest)?;
                if ctx.keep {
                    items.push(item);
                }
                count += 1;
                check_count(count)?;
            }
            JsonbValue::Array(items)
        }
        jsonb_tag::OBJECT => {
            check_depth(level + 1)?;
            *deepest = (*deepest).max(level + 1);
            let mut pairs = Vec::new();
            let mut previous: Option<&[u8]> = None;
            let mut count = 0usize;
            loop {
                if read_marker(src, ctx, &[LIST_END, ITEM_VALUE])? == LIST_END {
                    break;
                }
                let key_ctx = FieldCtx {
                    field: ctx.field,
                    tag: TypeTag::Jsonb,
                    offset: src.offset(),
                    keep: true,
                    child_depth: 0,
                };
                let key = read_text(src, &key_ctx)?;
                if previous.is_some_and(|p| key_order(p, key).is_ge()) {
                    return Err(ctx.non_canonical(
                        "object keys are not unique and in jsonb order (length, then bytes)",
                    ));
                }
                let next = src.byte()?;
                let v = read_json(src, ctx, next, level + 1, deepest)?;
                if ctx.keep {
                    pairs.push((key.to_vec(), v));
                }
                previous = Some(key);
                count += 1;
                check_count(count)?;
            }
            JsonbValue::Object(pairs)
        }
        _ => return Err(ctx.non_canonical("unknown jsonb item tag")),
    })
}
