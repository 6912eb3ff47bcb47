//! Structural payloads (spec/wire-format.md §6.2–§6.7).
//!
//! Every function takes `level`, the nesting level of the structure being written (a
//! top-level field's structure has level 2), and checks it against `MAX_DEPTH` before
//! writing anything. Element payloads are written by the parent module's `put_payload`, so
//! an element of any family, structural or not, is framed the same way.

use alloc::vec::Vec;

use super::{invalid, put_numeric, put_payload, put_text};
use crate::decode::OwnedValue;
use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_DEPTH, MAX_ELEMENTS, MAX_FIELDS};
use crate::primitives::flip_i32;
use crate::structure::{
    ArrayDim, ArrayValue, ITEM_NULL, ITEM_VALUE, JsonbValue, LIST_END, MAX_ARRAY_DIMS,
    MultirangeValue, RangeBound, RangeBounds, RangeValue, RecordValue, bound, jsonb_tag, key_order,
    range_state,
};
use crate::tag::TypeTag;
use crate::value::NumericSign;

pub(crate) fn check_level(level: u32) -> Result<()> {
    if level > MAX_DEPTH {
        return Err(Error::LimitExceeded {
            limit: Limit::Depth,
            value: level as usize,
        });
    }
    Ok(())
}

pub(crate) fn check_count(n: usize) -> Result<()> {
    if n > MAX_ELEMENTS {
        return Err(Error::LimitExceeded {
            limit: Limit::Elements,
            value: n,
        });
    }
    Ok(())
}

/// Writes one element or bound value of declared type `tag`.
fn put_item(buf: &mut Vec<u8>, field: u32, tag: TypeTag, v: &OwnedValue, level: u32) -> Result<()> {
    let value = v.as_value();
    if value.tag() != tag {
        return Err(invalid(
            field,
            tag,
            "a nested value does not match its declared type",
        ));
    }
    put_payload(buf, field, &value, level)
}

/// Checks an array's shape the way PostgreSQL constructs arrays: no dimensions iff no
/// elements, at most `MAXDIM`, every length at least 1, the upper bound within int32, and
/// the product of the lengths equal to the element count.
pub(crate) fn array_shape_error(dims: &[ArrayDim], count: usize) -> Option<&'static str> {
    if dims.len() > MAX_ARRAY_DIMS {
        return Some("more than 6 dimensions");
    }
    if dims.is_empty() != (count == 0) {
        return Some("an empty array has no dimensions and a non-empty one has some");
    }
    let mut product: usize = 1;
    for d in dims {
        if d.len < 1 {
            return Some("a dimension length is below 1");
        }
        if d.lower.checked_add(d.len - 1).is_none() {
            return Some("an upper bound exceeds int32");
        }
        product = product.saturating_mul(d.len as usize);
    }
    if !dims.is_empty() && product != count {
        return Some("the dimension lengths do not multiply to the element count");
    }
    None
}

/// Array (spec §6.3): `ELEMENT_TAG (01 payload | 02)* 00 NDIMS len* lower*`.
pub(super) fn put_array(buf: &mut Vec<u8>, field: u32, a: &ArrayValue, level: u32) -> Result<()> {
    check_level(level)?;
    check_count(a.elements.len())?;
    if let Some(reason) = array_shape_error(&a.dims, a.elements.len()) {
        return Err(invalid(field, TypeTag::Array, reason));
    }
    buf.push(a.element as u8);
    for e in &a.elements {
        match e {
            None => buf.push(ITEM_NULL),
            Some(v) => {
                buf.push(ITEM_VALUE);
                put_item(buf, field, a.element, v, level)?;
            }
        }
    }
    buf.push(LIST_END);
    buf.push(a.dims.len() as u8);
    for d in &a.dims {
        buf.extend_from_slice(&flip_i32(d.len));
    }
    for d in &a.dims {
        buf.extend_from_slice(&flip_i32(d.lower));
    }
    Ok(())
}

/// One bound: `00` (-infinity) or `02` (+infinity), or `01`, the value, and the inclusivity
/// byte, which sorts `[v` before `(v` and `v)` before `v]` (spec §6.4).
fn put_bound(
    buf: &mut Vec<u8>,
    field: u32,
    subtype: TypeTag,
    b: &RangeBound,
    lower: bool,
    level: u32,
) -> Result<()> {
    match b {
        RangeBound::Infinite => buf.push(if lower {
            bound::LOWER_INFINITE
        } else {
            bound::UPPER_INFINITE
        }),
        RangeBound::Inclusive(v) | RangeBound::Exclusive(v) => {
            buf.push(bound::FINITE);
            put_item(buf, field, subtype, v, level)?;
            let inclusive = matches!(b, RangeBound::Inclusive(_));
            buf.push(if inclusive == lower {
                bound::LOWER_INCLUSIVE_OR_UPPER_EXCLUSIVE
            } else {
                bound::LOWER_EXCLUSIVE_OR_UPPER_INCLUSIVE
            });
        }
    }
    Ok(())
}

/// `01 LOWER UPPER`: a non-empty range's bounds.
fn put_bounds(
    buf: &mut Vec<u8>,
    field: u32,
    subtype: TypeTag,
    b: &RangeBounds,
    level: u32,
) -> Result<()> {
    buf.push(range_state::BOUNDED);
    put_bound(buf, field, subtype, &b.lower, true, level)?;
    put_bound(buf, field, subtype, &b.upper, false, level)
}

/// Range (spec §6.4): `SUBTYPE_TAG (00 | 01 LOWER UPPER)`.
pub(super) fn put_range(buf: &mut Vec<u8>, field: u32, r: &RangeValue, level: u32) -> Result<()> {
    check_level(level)?;
    buf.push(r.subtype as u8);
    match &r.bounds {
        None => buf.push(range_state::EMPTY),
        Some(b) => put_bounds(buf, field, r.subtype, b, level)?,
    }
    Ok(())
}

/// Multirange (spec §6.5): `SUBTYPE_TAG (01 LOWER UPPER)* 00`.
pub(super) fn put_multirange(
    buf: &mut Vec<u8>,
    field: u32,
    m: &MultirangeValue,
    level: u32,
) -> Result<()> {
    check_level(level)?;
    check_count(m.ranges.len())?;
    buf.push(m.subtype as u8);
    for b in &m.ranges {
        put_bounds(buf, field, m.subtype, b, level)?;
    }
    buf.push(LIST_END);
    Ok(())
}

/// Composite (spec §6.7): `COUNT (uint16 BE) (TAG 01 payload | TAG 02)*`.
pub(super) fn put_record(buf: &mut Vec<u8>, field: u32, r: &RecordValue, level: u32) -> Result<()> {
    check_level(level)?;
    let n = r.fields.len();
    if n > MAX_FIELDS as usize {
        return Err(Error::LimitExceeded {
            limit: Limit::FieldCount,
            value: n,
        });
    }
    buf.extend_from_slice(&(n as u16).to_be_bytes());
    for f in &r.fields {
        buf.push(f.tag as u8);
        match &f.value {
            None => buf.push(ITEM_NULL),
            Some(v) => {
                buf.push(ITEM_VALUE);
                put_item(buf, field, f.tag, v, level)?;
            }
        }
    }
    Ok(())
}

/// jsonb (spec §6.6): one item, containers nested.
pub(super) fn put_jsonb(buf: &mut Vec<u8>, field: u32, j: &JsonbValue, level: u32) -> Result<()> {
    check_level(level)?;
    put_json_item(buf, field, j, level)
}

fn put_json_item(buf: &mut Vec<u8>, field: u32, j: &JsonbValue, level: u32) -> Result<()> {
    let bad = |reason| invalid(field, TypeTag::Jsonb, reason);
    match j {
        JsonbValue::Null => buf.push(jsonb_tag::NULL),
        JsonbValue::Bool(false) => buf.push(jsonb_tag::FALSE),
        JsonbValue::Bool(true) => buf.push(jsonb_tag::TRUE),
        JsonbValue::String(s) => {
            buf.push(jsonb_tag::STRING);
            put_text(buf, field, TypeTag::Jsonb, s)?;
        }
        JsonbValue::Number(n) => {
            if !matches!(n.sign, NumericSign::Positive | NumericSign::Negative) {
                return Err(bad("a jsonb number is NaN or infinite"));
            }
            buf.push(jsonb_tag::NUMBER);
            put_numeric(buf, field, &n.as_numeric())?;
        }
        JsonbValue::Array(items) => {
            check_level(level + 1)?;
            check_count(items.len())?;
            buf.push(jsonb_tag::ARRAY);
            for item in items {
                put_json_item(buf, field, item, level + 1)?;
            }
            buf.push(LIST_END);
        }
        JsonbValue::Object(pairs) => {
            check_level(level + 1)?;
            check_count(pairs.len())?;
            if pairs
                .windows(2)
                .any(|w| key_order(&w[0].0, &w[1].0).is_ge())
            {
                return Err(bad(
                    "object keys are not unique and in jsonb order (length, then bytes)",
                ));
            }
            buf.push(jsonb_tag::OBJECT);
            for (k, v) in pairs {
                buf.push(ITEM_VALUE);
                put_text(buf, field, TypeTag::Jsonb, k)?;
                put_json_item(buf, field, v, level + 1)?;
            }
            buf.push(LIST_END);
        }
    }
    Ok(())
}
