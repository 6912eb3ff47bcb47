//! Strict decoding of structural payloads (spec/wire-format.md §6.2–§6.7, §8).
//!
//! Each function reads one structural payload at nesting `level` (checked against
//! `MAX_DEPTH` first), records in `ctx.child_depth` how many levels it spans, and returns the
//! decoded tree when `ctx.keep` is set.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::{
    DecodedField, FieldCtx, OwnedValue, Source, need, need_array, parse_payload, read_numeric,
    read_text,
};
use crate::encode::nested::{array_shape_error, check_count, check_level};
use crate::error::{Error, Limit, Result};
use crate::limits::MAX_FIELDS;
use crate::primitives::unflip_i32;
use crate::structure::{
    ArrayDim, ArrayValue, ITEM_NULL, ITEM_VALUE, JsonbValue, LIST_END, MAX_ARRAY_DIMS,
    MultirangeValue, RangeBound, RangeBounds, RangeValue, RecordValue, bound, jsonb_tag, key_order,
    range_state,
};
use crate::tag::TypeTag;
use crate::value::NumericSign;

/// Reads a nested type tag.
fn read_tag(src: &mut dyn Source, ctx: &FieldCtx) -> Result<TypeTag> {
    let offset = src.offset();
    let t = need(src)?;
    TypeTag::from_byte(t).ok_or(Error::UnknownTypeTag {
        field: ctx.field,
        offset,
        found: t,
    })
}

/// Reads one nested value of type `tag` held at `level`.
fn read_item(
    src: &mut dyn Source,
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
fn read_marker(src: &mut dyn Source, ctx: &FieldCtx, allowed: &[u8]) -> Result<u8> {
    let offset = src.offset();
    let b = need(src)?;
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
fn read_list(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    mut item: impl FnMut(&mut dyn Source, &mut FieldCtx, u8, usize) -> Result<()>,
) -> Result<usize> {
    let mut count = 0usize;
    loop {
        let at = src.offset();
        let b = need(src)?;
        if b == LIST_END {
            return Ok(count);
        }
        item(src, ctx, b, at)?;
        count += 1;
        check_count(count)?;
    }
}

pub(super) fn parse_array(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    check_level(level)?;
    ctx.child_depth = 1;
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
    let ndims = usize::from(need(src)?);
    if ndims > MAX_ARRAY_DIMS {
        return Err(ctx.non_canonical("more than 6 dimensions"));
    }
    let mut dims = [ArrayDim { len: 0, lower: 0 }; MAX_ARRAY_DIMS];
    for d in &mut dims[..ndims] {
        d.len = unflip_i32(need_array(src)?);
    }
    for d in &mut dims[..ndims] {
        d.lower = unflip_i32(need_array(src)?);
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
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    subtype: TypeTag,
    level: u32,
    lower: bool,
) -> Result<RangeBound> {
    let v = read_item(src, ctx, subtype, level)?.unwrap_or(OwnedValue::Bool(false));
    let inclusive = match need(src)? {
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
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    subtype: TypeTag,
    level: u32,
) -> Result<RangeBounds> {
    let lower = match need(src)? {
        bound::LOWER_INFINITE => RangeBound::Infinite,
        bound::FINITE => read_bound_value(src, ctx, subtype, level, true)?,
        _ => return Err(ctx.non_canonical("lower bound byte is neither 00 nor 01")),
    };
    let upper = match need(src)? {
        bound::FINITE => read_bound_value(src, ctx, subtype, level, false)?,
        bound::UPPER_INFINITE => RangeBound::Infinite,
        _ => return Err(ctx.non_canonical("upper bound byte is neither 01 nor 02")),
    };
    Ok(RangeBounds { lower, upper })
}

pub(super) fn parse_range(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    check_level(level)?;
    ctx.child_depth = 1;
    let subtype = read_tag(src, ctx)?;
    let bounds = match need(src)? {
        range_state::EMPTY => None,
        range_state::BOUNDED => Some(read_bounds(src, ctx, subtype, level)?),
        _ => return Err(ctx.non_canonical("range state byte is neither 00 nor 01")),
    };
    Ok(ctx
        .keep
        .then(|| OwnedValue::Range(Box::new(RangeValue { subtype, bounds }))))
}

pub(super) fn parse_multirange(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    check_level(level)?;
    ctx.child_depth = 1;
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

pub(super) fn parse_record(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    check_level(level)?;
    ctx.child_depth = 1;
    let n = u16::from_be_bytes(need_array(src)?);
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
            fields.push(DecodedField { tag, value });
        }
    }
    Ok(ctx
        .keep
        .then_some(OwnedValue::Record(RecordValue { fields })))
}

pub(super) fn parse_jsonb(
    src: &mut dyn Source,
    ctx: &mut FieldCtx,
    level: u32,
) -> Result<Option<OwnedValue>> {
    check_level(level)?;
    let mut deepest = level;
    let first = need(src)?;
    let j = read_json(src, ctx, first, level, &mut deepest)?;
    ctx.child_depth = deepest - level + 1;
    Ok(ctx.keep.then_some(OwnedValue::Jsonb(j)))
}

/// Reads the rest of one jsonb item at `level` whose item tag `item` was just read; the
/// returned tree is empty when not keeping.
fn read_json(
    src: &mut dyn Source,
    ctx: &FieldCtx,
    item: u8,
    level: u32,
    deepest: &mut u32,
) -> Result<JsonbValue> {
    Ok(match item {
        jsonb_tag::NULL => JsonbValue::Null,
        jsonb_tag::FALSE => JsonbValue::Bool(false),
        jsonb_tag::TRUE => JsonbValue::Bool(true),
        jsonb_tag::STRING => JsonbValue::String(read_text(src, ctx)?.unwrap_or_default()),
        jsonb_tag::NUMBER => {
            let n = read_numeric(src, ctx)?;
            if !matches!(n.sign, NumericSign::Positive | NumericSign::Negative) {
                return Err(ctx.non_canonical("a jsonb number is NaN or infinite"));
            }
            JsonbValue::Number(n)
        }
        jsonb_tag::ARRAY => {
            check_level(level + 1)?;
            *deepest = (*deepest).max(level + 1);
            let mut items = Vec::new();
            let mut count = 0usize;
            loop {
                let next = need(src)?;
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
            check_level(level + 1)?;
            *deepest = (*deepest).max(level + 1);
            let mut pairs = Vec::new();
            let mut previous: Option<Vec<u8>> = None;
            let mut count = 0usize;
            loop {
                match read_marker(src, ctx, &[LIST_END, ITEM_VALUE])? {
                    LIST_END => break,
                    _ => {
                        let key_ctx = FieldCtx {
                            field: ctx.field,
                            tag: TypeTag::Jsonb,
                            offset: src.offset(),
                            keep: true,
                            child_depth: 0,
                        };
                        let key = read_text(src, &key_ctx)?.unwrap_or_default();
                        if previous
                            .as_deref()
                            .is_some_and(|p| key_order(p, &key).is_ge())
                        {
                            return Err(ctx.non_canonical(
                                "object keys are not unique and in jsonb order (length, then bytes)",
                            ));
                        }
                        let next = need(src)?;
                        let v = read_json(src, ctx, next, level + 1, deepest)?;
                        if ctx.keep {
                            pairs.push((key.clone(), v));
                        }
                        previous = Some(key);
                    }
                }
                count += 1;
                check_count(count)?;
            }
            JsonbValue::Object(pairs)
        }
        _ => return Err(ctx.non_canonical("unknown jsonb item tag")),
    })
}
