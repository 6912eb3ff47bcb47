//! The value model: [`Value`] (borrowed, the encoder's input) and [`OwnedValue`] (owned, the
//! decoder's output), generated from one table so the two cannot drift apart, and the owned
//! trees of the structural families (spec/wire-format.md §6.2–§6.7).
//!
//! Scalar fields borrow their bytes; a structural value is materialised once as a tree, which
//! is both what the encoder reads (through [`Value::Array`] and its siblings) and what the
//! decoder returns, so a decoded tree re-encodes to its input.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::scalar::{
    BitString, ChildIdentity, Inet, Interval, Numeric, OwnedBits, OwnedChildIdentity, OwnedNumeric,
    Timetz,
};
use crate::structure::{ArrayDim, key_order};
use crate::tag::{Domain, TypeTag};

/// How a component of [`OwnedValue`] lends itself as the matching component of [`Value`],
/// and how a borrowed component is copied back. The table below pairs the two types of
/// every variant; this trait is what makes each pair agree.
trait Lend {
    type Loan<'a>
    where
        Self: 'a;
    fn lend(&self) -> Self::Loan<'_>;
    fn from_loan(loan: Self::Loan<'_>) -> Self;
}

/// Components that are their own loan.
macro_rules! lend_by_copy {
    ($($t:ty),*) => {$(
        impl Lend for $t {
            type Loan<'a> = $t;
            fn lend(&self) -> $t {
                *self
            }
            fn from_loan(loan: $t) -> Self {
                loan
            }
        }
    )*};
}

lend_by_copy!(
    bool, i16, i32, i64, u32, f32, f64, [u8; 6], [u8; 8], [u8; 16], Timetz, Interval, Inet
);

/// Trees lend a reference and are cloned back.
macro_rules! lend_by_ref {
    ($($t:ty),*) => {$(
        impl Lend for $t {
            type Loan<'a> = &'a $t;
            fn lend(&self) -> &$t {
                self
            }
            fn from_loan(loan: &$t) -> Self {
                loan.clone()
            }
        }
    )*};
}

lend_by_ref!(ArrayValue, MultirangeValue, JsonbValue, RecordValue);

impl Lend for Vec<u8> {
    type Loan<'a> = &'a [u8];
    fn lend(&self) -> &[u8] {
        self
    }
    fn from_loan(loan: &[u8]) -> Self {
        loan.to_vec()
    }
}

impl Lend for Box<RangeValue> {
    type Loan<'a> = &'a RangeValue;
    fn lend(&self) -> &RangeValue {
        self
    }
    fn from_loan(loan: &RangeValue) -> Self {
        Box::new(loan.clone())
    }
}

impl Lend for OwnedNumeric {
    type Loan<'a> = Numeric<'a>;
    fn lend(&self) -> Numeric<'_> {
        self.as_numeric()
    }
    fn from_loan(loan: Numeric<'_>) -> Self {
        loan.into()
    }
}

impl Lend for OwnedBits {
    type Loan<'a> = BitString<'a>;
    fn lend(&self) -> BitString<'_> {
        self.as_bits()
    }
    fn from_loan(loan: BitString<'_>) -> Self {
        loan.into()
    }
}

impl Lend for OwnedChildIdentity {
    type Loan<'a> = ChildIdentity<'a>;
    fn lend(&self) -> ChildIdentity<'_> {
        self.as_child()
    }
    fn from_loan(loan: ChildIdentity<'_>) -> Self {
        loan.into()
    }
}

/// Generates [`Value`], [`OwnedValue`], their tags and the conversions between them from
/// one row per variant: `Variant(borrowed type, owned type) => TypeTag`.
macro_rules! value_model {
    ($( $(#[$doc:meta])* $variant:ident($borrowed:ty, $owned:ty) => $tag:ident; )*) => {
        /// One non-NULL field value, borrowing its variable-width parts: what the encoder
        /// reads, so no input is copied before it is written.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum Value<'a> {
            $( $(#[$doc])* $variant($borrowed), )*
        }

        /// One non-NULL field value that owns its parts: what the decoder returns, and an
        /// encoder input once borrowed with [`OwnedValue::as_value`]. An owned value may hold
        /// a non-canonical representation (unnormalised numeric groups, `-0`, padded
        /// `bpchar`); it encodes exactly like its canonical form.
        #[derive(Clone, Debug, PartialEq)]
        pub enum OwnedValue {
            $( $(#[$doc])* $variant($owned), )*
        }

        impl Value<'_> {
            /// The type tag this value is written with.
            pub const fn tag(&self) -> TypeTag {
                match self {
                    $( Value::$variant(_) => TypeTag::$tag, )*
                }
            }
        }

        impl OwnedValue {
            /// Borrows the value as an encoder input.
            pub fn as_value(&self) -> Value<'_> {
                match self {
                    $( OwnedValue::$variant(x) => Value::$variant(x.lend()), )*
                }
            }

            /// The type tag this value is written with.
            pub const fn tag(&self) -> TypeTag {
                match self {
                    $( OwnedValue::$variant(_) => TypeTag::$tag, )*
                }
            }
        }

        impl From<Value<'_>> for OwnedValue {
            /// Copies an encoder input (structural trees are cloned).
            fn from(v: Value<'_>) -> Self {
                match v {
                    $( Value::$variant(x) => OwnedValue::$variant(Lend::from_loan(x)), )*
                }
            }
        }
    };
}

value_model! {
    /// `bool`.
    Bool(bool, bool) => Bool;
    /// `int2`.
    Int2(i16, i16) => Int2;
    /// `int4`.
    Int4(i32, i32) => Int4;
    /// `int8`.
    Int8(i64, i64) => Int8;
    /// `oid`.
    Oid(u32, u32) => Oid;
    /// `float4`: any bit pattern; `-0` and every NaN are canonicalised.
    Float4(f32, f32) => Float4;
    /// `float8`: any bit pattern; `-0` and every NaN are canonicalised.
    Float8(f64, f64) => Float8;
    /// `numeric`.
    Numeric(Numeric<'a>, OwnedNumeric) => Numeric;
    /// `text`: database-encoding bytes (never contain `0x00`).
    Text(&'a [u8], Vec<u8>) => Text;
    /// `varchar`: database-encoding bytes (never contain `0x00`).
    Varchar(&'a [u8], Vec<u8>) => Varchar;
    /// `bpchar`: database-encoding bytes, with or without trailing pad spaces.
    Bpchar(&'a [u8], Vec<u8>) => Bpchar;
    /// `bytea`: arbitrary bytes.
    Bytea(&'a [u8], Vec<u8>) => Bytea;
    /// `uuid`: 16 bytes in network order.
    Uuid([u8; 16], [u8; 16]) => Uuid;
    /// `date`: days since 2000-01-01; `i32::MIN`/`i32::MAX` are `-infinity`/`infinity`.
    Date(i32, i32) => Date;
    /// `time`: microseconds since midnight, `0..=86_400_000_000`.
    Time(i64, i64) => Time;
    /// `timestamp`: microseconds since 2000-01-01; `i64::MIN`/`i64::MAX` are infinities.
    Timestamp(i64, i64) => Timestamp;
    /// `timestamptz`: microseconds since 2000-01-01 00:00 UTC; infinities as `timestamp`.
    Timestamptz(i64, i64) => Timestamptz;
    /// `timetz`.
    Timetz(Timetz, Timetz) => Timetz;
    /// `interval`.
    Interval(Interval, Interval) => Interval;
    /// `inet`.
    Inet(Inet, Inet) => Inet;
    /// `cidr` (host bits must be zero).
    Cidr(Inet, Inet) => Cidr;
    /// `macaddr`.
    Macaddr([u8; 6], [u8; 6]) => Macaddr;
    /// `macaddr8`.
    Macaddr8([u8; 8], [u8; 8]) => Macaddr8;
    /// `bit(n)`.
    Bit(BitString<'a>, OwnedBits) => Bit;
    /// `varbit(n)`.
    Varbit(BitString<'a>, OwnedBits) => Varbit;
    /// Enum value: its current label's bytes.
    Enum(&'a [u8], Vec<u8>) => Enum;
    /// A complete child identity (JOIN_KEY / SET_KEY / WINDOW_KEY components), validated.
    Identity(ChildIdentity<'a>, OwnedChildIdentity) => ChildIdentity;
    /// Any array (spec §6.3).
    Array(&'a ArrayValue, ArrayValue) => Array;
    /// Any range (spec §6.4).
    Range(&'a RangeValue, Box<RangeValue>) => Range;
    /// Any multirange (spec §6.5).
    Multirange(&'a MultirangeValue, MultirangeValue) => Multirange;
    /// `jsonb` (spec §6.6).
    Jsonb(&'a JsonbValue, JsonbValue) => Jsonb;
    /// Any composite (spec §6.7).
    Record(&'a RecordValue, RecordValue) => Record;
}

/// One field of an identity or of a composite: its tag and its value, `None` for SQL NULL.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedField {
    /// The field's type tag.
    pub tag: TypeTag,
    /// The value, or `None` for SQL NULL.
    pub value: Option<OwnedValue>,
}

/// A decoded identity: its domain and its fields in order.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedIdentity {
    /// The identity's domain.
    pub domain: Domain,
    /// Its fields, in order.
    pub fields: Vec<OwnedField>,
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
    pub fields: Vec<OwnedField>,
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
