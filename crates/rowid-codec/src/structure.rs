//! The structural vocabulary (spec/wire-format.md §6.2–§6.7): framing bytes of arrays,
//! ranges, multiranges, jsonb and composites, the [`Shape`] of a field's type, jsonb's key
//! order, and the shape, depth and count checks that the encoder, the decoder and the
//! send-format parsers all apply. The values themselves are in [`crate::value`].

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::error::{Error, Limit, Result};
use crate::limits::{MAX_DEPTH, MAX_ELEMENTS};
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

/// Fails when a structure at nesting `level` would exceed `MAX_DEPTH` (spec §7).
pub fn check_depth(level: u32) -> Result<()> {
    if level > MAX_DEPTH {
        return Err(Error::LimitExceeded {
            limit: Limit::Depth,
            value: level as usize,
        });
    }
    Ok(())
}

/// Fails when a structural list of `n` items would exceed `MAX_ELEMENTS` (spec §7).
pub fn check_count(n: usize) -> Result<()> {
    if n > MAX_ELEMENTS {
        return Err(Error::LimitExceeded {
            limit: Limit::Elements,
            value: n,
        });
    }
    Ok(())
}

/// Checks an array's shape the way PostgreSQL constructs arrays: no dimensions iff no
/// elements, at most `MAXDIM`, every length at least 1, the upper bound within int32, and
/// the product of the lengths equal to the element count. Returns what is wrong.
pub fn array_shape_error(dims: &[ArrayDim], count: usize) -> Option<&'static str> {
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
