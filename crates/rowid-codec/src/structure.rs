//! Structural values (spec/wire-format.md §6.2–§6.7): arrays, ranges, multiranges, jsonb and
//! composites, as trees of owned values.
//!
//! Scalar fields borrow their bytes ([`crate::Value`]); a structural value is materialised
//! once as a tree, which is both what the encoder reads (through [`crate::Value::Array`] and
//! its siblings) and what the decoder returns, so a decoded tree re-encodes to its input.
//! [`Shape`] describes a field's type recursively, which is what the send-format parsers and
//! the registry need to interpret nested values.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::decode::{DecodedField, OwnedNumeric, OwnedValue};
use crate::tag::TypeTag;

/// Element, range and record-field framing byte: end of a list (spec §6.2).
pub const LIST_END: u8 = 0x00;
/// Element framing byte: a non-NULL element or field follows (spec §6.2).
pub const ITEM_VALUE: u8 = 0x01;
/// Element framing byte: a NULL element or field (spec §6.2). It sorts after
/// [`ITEM_VALUE`] because `array_cmp` and `record_cmp` sort NULL after every value.
pub const ITEM_NULL: u8 = 0x02;

/// jsonb item tags (spec §6.6), in jsonb's type order.
pub mod jsonb_tag {
    /// `null`.
    pub const NULL: u8 = 0x01;
    /// A string.
    pub const STRING: u8 = 0x02;
    /// A number.
    pub const NUMBER: u8 = 0x03;
    /// `false`.
    pub const FALSE: u8 = 0x04;
    /// `true`.
    pub const TRUE: u8 = 0x05;
    /// An array.
    pub const ARRAY: u8 = 0x06;
    /// An object.
    pub const OBJECT: u8 = 0x07;
}

/// Range bound bytes (spec §6.4).
pub mod bound {
    /// Lower bound `-infinity`.
    pub const LOWER_INFINITE: u8 = 0x00;
    /// A finite bound follows (its value, then the inclusivity byte).
    pub const FINITE: u8 = 0x01;
    /// Upper bound `+infinity`.
    pub const UPPER_INFINITE: u8 = 0x02;
    /// Inclusivity byte of a lower bound `[` / an upper bound `)`.
    pub const LOWER_INCLUSIVE_OR_UPPER_EXCLUSIVE: u8 = 0x00;
    /// Inclusivity byte of a lower bound `(` / an upper bound `]`.
    pub const LOWER_EXCLUSIVE_OR_UPPER_INCLUSIVE: u8 = 0x01;
}

/// Range state bytes (spec §6.4).
pub mod range_state {
    /// The empty range.
    pub const EMPTY: u8 = 0x00;
    /// Two bounds follow.
    pub const BOUNDED: u8 = 0x01;
}

/// Largest number of dimensions of an array (PostgreSQL's `MAXDIM`).
pub const MAX_ARRAY_DIMS: usize = 6;

/// One array dimension: its length and lower bound (`ARR_DIMS`, `ARR_LBOUND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArrayDim {
    /// Number of elements along this dimension (at least 1).
    pub len: i32,
    /// Subscript of the first element (`1` unless written as `'[0:2]={...}'`).
    pub lower: i32,
}

/// An array value (spec §6.3): element type, dimensions and elements in storage order.
///
/// An empty array has no dimensions. Otherwise the product of the dimension lengths is the
/// number of elements.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayValue {
    /// Tag of every element (a domain's elements use the base family's tag).
    pub element: TypeTag,
    /// Dimensions, outermost first; empty for an empty array.
    pub dims: Vec<ArrayDim>,
    /// Elements in row-major storage order; `None` is a NULL element.
    pub elements: Vec<Option<OwnedValue>>,
}

/// One bound of a non-empty range (spec §6.4).
#[derive(Clone, Debug, PartialEq)]
pub enum RangeBound {
    /// Unbounded (`-infinity` as a lower bound, `+infinity` as an upper bound).
    Infinite,
    /// A bound that includes its value (`[` or `]`).
    Inclusive(OwnedValue),
    /// A bound that excludes its value (`(` or `)`).
    Exclusive(OwnedValue),
}

/// The two bounds of a non-empty range.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeBounds {
    /// Lower bound.
    pub lower: RangeBound,
    /// Upper bound.
    pub upper: RangeBound,
}

/// A range value (spec §6.4) exactly as PostgreSQL stores it: discrete ranges arrive
/// canonicalised by the range type's canonical function, continuous ones as written. The
/// encoder never canonicalises.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeValue {
    /// Tag of the subtype.
    pub subtype: TypeTag,
    /// `None` for the empty range.
    pub bounds: Option<RangeBounds>,
}

/// A multirange value (spec §6.5): its ranges in PostgreSQL's canonical order (sorted,
/// non-empty, neither overlapping nor adjacent).
#[derive(Clone, Debug, PartialEq)]
pub struct MultirangeValue {
    /// Tag of the range subtype.
    pub subtype: TypeTag,
    /// The ranges; none is empty.
    pub ranges: Vec<RangeBounds>,
}

/// A composite value (spec §6.7): its non-dropped fields in attribute order.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordValue {
    /// Each field's tag and value (`None` for NULL).
    pub fields: Vec<DecodedField>,
}

/// A `jsonb` value (spec §6.6), as jsonb stores it.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonbValue {
    /// `null`.
    Null,
    /// A string: database-encoding bytes, without NUL.
    String(Vec<u8>),
    /// A number (finite numeric).
    Number(OwnedNumeric),
    /// `false` / `true`.
    Bool(bool),
    /// An array.
    Array(Vec<JsonbValue>),
    /// An object: keys unique and ordered as jsonb stores them (shorter key first, then
    /// bytewise); see [`JsonbValue::object`].
    Object(Vec<(Vec<u8>, JsonbValue)>),
}

impl JsonbValue {
    /// An object from pairs in any order, normalised as `jsonb_in` does: of duplicate keys
    /// the last one wins, and keys are sorted by length, then bytes.
    pub fn object(pairs: Vec<(Vec<u8>, JsonbValue)>) -> JsonbValue {
        let mut pairs: Vec<(usize, (Vec<u8>, JsonbValue))> =
            pairs.into_iter().enumerate().collect();
        // Stable sort by key, then keep the last of each run of equal keys.
        pairs.sort_by(|(ia, (a, _)), (ib, (b, _))| key_order(a, b).then(ia.cmp(ib)));
        let mut out: Vec<(Vec<u8>, JsonbValue)> = Vec::with_capacity(pairs.len());
        for (_, (k, v)) in pairs {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => out.push((k, v)),
            }
        }
        JsonbValue::Object(out)
    }
}

/// jsonb's object key order: shorter first, then bytewise (`lengthCompareJsonbString`).
pub fn key_order(a: &[u8], b: &[u8]) -> core::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A field's type, recursively: what a send-format parser needs to read a value, and what
/// the registry resolves a catalog type to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// A scalar family, or a child identity.
    Scalar(TypeTag),
    /// An array of the element shape.
    Array(Box<Shape>),
    /// A range over the subtype shape.
    Range(Box<Shape>),
    /// A multirange over the subtype shape.
    Multirange(Box<Shape>),
    /// `jsonb`.
    Jsonb,
    /// A composite with these field shapes (non-dropped attributes, in order).
    Record(Vec<Shape>),
}

impl Shape {
    /// The tag a value of this shape is written with.
    pub fn tag(&self) -> TypeTag {
        match self {
            Shape::Scalar(t) => *t,
            Shape::Array(_) => TypeTag::Array,
            Shape::Range(_) => TypeTag::Range,
            Shape::Multirange(_) => TypeTag::Multirange,
            Shape::Jsonb => TypeTag::Jsonb,
            Shape::Record(_) => TypeTag::Record,
        }
    }
}
