//! PostgreSQL's binary send formats (`typsend`) read into encoder inputs
//! (spec/wire-format.md §9): what the WAL path gets from a pgoutput `'b'` column. Not part of
//! the wire format itself, so it sits behind the `send` feature.
//!
//! Scalars are read in place by the parsers of [`scalar`](self) (re-exported here); the
//! structural families (`array_send`, `range_send`, `multirange_send`, `record_send`,
//! `jsonb_send`) are read into owned trees according to the field's [`Shape`], with nesting
//! bounded by `MAX_DEPTH` as in the encoder, so hostile input cannot recurse without limit.

mod image;
mod json;
mod scalar;

use alloc::boxed::Box;
use alloc::vec::Vec;

pub use image::{timestamp_text, write_image_json, write_json_string};
pub use json::{JSONB_SEND_VERSION, decimal_to_numeric, jsonb_from_text};
pub use scalar::{
    bits_from_send, bool_from_send, date_from_send, float4_from_send, float8_from_send,
    inet_from_send, int2_from_send, int4_from_send, int8_from_send, interval_from_send,
    macaddr_from_send, macaddr8_from_send, numeric_from_send, oid_from_send, text_from_send,
    time_from_send, timestamp_from_send, timetz_from_send, uuid_from_send, value_from_send,
};

use self::scalar::bad;
use crate::error::{Error, Result};
use crate::limits::MAX_FIELDS;
use crate::structure::{
    ArrayDim, MAX_ARRAY_DIMS, Shape, array_shape_error, check_count, check_depth,
};
use crate::tag::TypeTag;
use crate::value::{
    ArrayValue, MultirangeValue, OwnedField, OwnedValue, RangeBound, RangeBounds, RangeValue,
    RecordValue,
};

/// `range_send` flag bits (`rangetypes.h`).
mod range_flags {
    pub const EMPTY: u8 = 0x01;
    pub const LB_INC: u8 = 0x02;
    pub const UB_INC: u8 = 0x04;
    pub const LB_INF: u8 = 0x08;
    pub const UB_INF: u8 = 0x10;
    /// Every bit a sent range may carry; `LB_NULL`, `UB_NULL` and `CONTAIN_EMPTY` never
    /// appear in a stored range.
    pub const KNOWN: u8 = EMPTY | LB_INC | UB_INC | LB_INF | UB_INF;
}

/// A cursor over one send-format value.
struct Reader<'a> {
    tag: TypeTag,
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(tag: TypeTag, b: &'a [u8]) -> Self {
        Reader { tag, b, pos: 0 }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(bad(self.tag, self.b.len(), what))?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn i32(&mut self, what: &'static str) -> Result<i32> {
        let s = self.take(4, what)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// An `int32 length` (-1 for NULL when `nullable`) and that many bytes.
    fn item(&mut self, nullable: bool) -> Result<Option<&'a [u8]>> {
        let at = self.pos;
        let len = self.i32("item length is truncated")?;
        if len == -1 && nullable {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| bad(self.tag, at, "negative item length"))?;
        self.take(len, "item is shorter than its length").map(Some)
    }

    fn finish(&self) -> Result<()> {
        if self.pos == self.b.len() {
            Ok(())
        } else {
            Err(Error::TrailingBytes { offset: self.pos })
        }
    }
}

/// Parses the send format of a field value of shape `shape` into an owned value. Nesting is
/// bounded by `MAX_DEPTH` as in the encoder, so hostile input cannot recurse without limit.
pub fn owned_from_send(shape: &Shape, b: &[u8]) -> Result<OwnedValue> {
    parse(shape, b, 2)
}

fn parse(shape: &Shape, b: &[u8], level: u32) -> Result<OwnedValue> {
    match shape {
        Shape::Scalar(tag) => Ok(OwnedValue::from(value_from_send(*tag, b)?)),
        Shape::Array(element) => {
            check_depth(level)?;
            array(element, b, level)
        }
        Shape::Range(subtype) => {
            check_depth(level)?;
            let mut r = Reader::new(TypeTag::Range, b);
            let bounds = range_body(subtype, &mut r, level)?;
            r.finish()?;
            Ok(OwnedValue::Range(Box::new(RangeValue {
                subtype: subtype.tag(),
                bounds,
            })))
        }
        Shape::Multirange(subtype) => {
            check_depth(level)?;
            multirange(subtype, b, level)
        }
        Shape::Jsonb => {
            check_depth(level)?;
            json::jsonb_from_send(b, level).map(OwnedValue::Jsonb)
        }
        Shape::Record(fields) => {
            check_depth(level)?;
            record(fields, b, level)
        }
    }
}

/// An `array_send` header from `r`: the dimensions and the element count, checked against
/// the codec's limits (the element type OID is skipped: the shape decides).
fn array_header(r: &mut Reader<'_>) -> Result<(Vec<ArrayDim>, usize)> {
    let t = TypeTag::Array;
    let ndim = r.i32("array header is truncated")?;
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|&n| n <= MAX_ARRAY_DIMS)
        .ok_or(bad(t, 0, "dimension count outside 0..=6"))?;
    let flags = r.i32("array header is truncated")?;
    if flags != 0 && flags != 1 {
        return Err(bad(t, 4, "has-null flag is neither 0 nor 1"));
    }
    r.take(4, "array header is truncated")?;
    let mut dims = Vec::with_capacity(ndim);
    let mut count: usize = if ndim == 0 { 0 } else { 1 };
    for _ in 0..ndim {
        let len = r.i32("dimensions are truncated")?;
        let lower = r.i32("dimensions are truncated")?;
        count = count.saturating_mul(usize::try_from(len).unwrap_or(0));
        dims.push(ArrayDim { len, lower });
    }
    check_count(count)?;
    if let Some(reason) = array_shape_error(&dims, count) {
        return Err(bad(t, 12, reason));
    }
    Ok((dims, count))
}

fn array(element: &Shape, b: &[u8], level: u32) -> Result<OwnedValue> {
    let mut r = Reader::new(TypeTag::Array, b);
    let (dims, count) = array_header(&mut r)?;
    let mut elements = Vec::with_capacity(count.min(b.len() / 4));
    for _ in 0..count {
        elements.push(match r.item(true)? {
            None => None,
            Some(e) => Some(parse(element, e, level + 1)?),
        });
    }
    r.finish()?;
    Ok(OwnedValue::Array(ArrayValue {
        element: element.tag(),
        dims,
        elements,
    }))
}

/// A `range_send` flags byte from `r`, checked: known bits only, an empty range with no
/// other flag, no infinite bound marked inclusive.
fn range_flags_of(r: &mut Reader<'_>) -> Result<u8> {
    use range_flags::*;
    let flags = r.u8("range flags are missing")?;
    if flags & !KNOWN != 0 {
        return Err(bad(r.tag, 0, "unknown range flag bits"));
    }
    if flags & EMPTY != 0 && flags != EMPTY {
        return Err(bad(r.tag, 0, "an empty range carries other flags"));
    }
    if flags & LB_INF != 0 && flags & LB_INC != 0 || flags & UB_INF != 0 && flags & UB_INC != 0 {
        return Err(bad(r.tag, 0, "an infinite bound is marked inclusive"));
    }
    Ok(flags)
}

/// A `range_send` value from `r` (flags byte and bounds); `None` for the empty range.
fn range_body(subtype: &Shape, r: &mut Reader<'_>, level: u32) -> Result<Option<RangeBounds>> {
    use range_flags::*;
    let flags = range_flags_of(r)?;
    if flags & EMPTY != 0 {
        return Ok(None);
    }
    let mut bound = |infinite: u8, inclusive: u8| -> Result<RangeBound> {
        if flags & infinite != 0 {
            return Ok(RangeBound::Infinite);
        }
        let bytes = r.item(false)?.unwrap_or_default();
        let v = parse(subtype, bytes, level + 1)?;
        Ok(if flags & inclusive != 0 {
            RangeBound::Inclusive(v)
        } else {
            RangeBound::Exclusive(v)
        })
    };
    let lower = bound(LB_INF, LB_INC)?;
    let upper = bound(UB_INF, UB_INC)?;
    Ok(Some(RangeBounds { lower, upper }))
}

fn multirange(subtype: &Shape, b: &[u8], level: u32) -> Result<OwnedValue> {
    let t = TypeTag::Multirange;
    let mut r = Reader::new(t, b);
    let n = r.i32("range count is truncated")?;
    let n = usize::try_from(n).map_err(|_| bad(t, 0, "negative range count"))?;
    check_count(n)?;
    let mut ranges = Vec::with_capacity(n.min(b.len()));
    for _ in 0..n {
        let at = r.pos;
        let bytes = r.item(false)?.unwrap_or_default();
        let mut inner = Reader::new(t, bytes);
        match range_body(subtype, &mut inner, level)? {
            Some(bounds) => ranges.push(bounds),
            None => return Err(bad(t, at, "a multirange holds an empty range")),
        }
        inner.finish()?;
    }
    r.finish()?;
    Ok(OwnedValue::Multirange(MultirangeValue {
        subtype: subtype.tag(),
        ranges,
    }))
}

fn record(shapes: &[Shape], b: &[u8], level: u32) -> Result<OwnedValue> {
    let t = TypeTag::Record;
    let mut r = Reader::new(t, b);
    let n = r.i32("column count is truncated")?;
    if usize::try_from(n).ok() != Some(shapes.len()) || shapes.len() > MAX_FIELDS as usize {
        return Err(bad(t, 0, "column count differs from the composite type's"));
    }
    let mut fields = Vec::with_capacity(shapes.len());
    for shape in shapes {
        r.take(4, "column type is truncated")?; // column type OID: the shape decides
        let value = match r.item(true)? {
            None => None,
            Some(bytes) => Some(parse(shape, bytes, level + 1)?),
        };
        fields.push(OwnedField {
            tag: shape.tag(),
            value,
        });
    }
    r.finish()?;
    Ok(OwnedValue::Record(RecordValue { fields }))
}
