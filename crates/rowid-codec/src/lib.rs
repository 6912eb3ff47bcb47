//! # rowid-codec: Row Identity V2 wire format
//!
//! Exact, canonical, order-preserving byte encoding of typed PostgreSQL values, as specified
//! normatively in `spec/wire-format.md` and `spec/probe.md` of this repository. The bytes are
//! the identity: there is no hash in it, equal values (under PostgreSQL's equality) encode
//! identically, unequal values encode differently, and no complete identity is a prefix of
//! another.
//!
//! The crate is `#![no_std]` with `alloc`; it knows nothing of PostgreSQL catalogs or of pgrx.
//!
//! ```
//! use rowid_codec::{decode, encode_identity, Domain, TypeTag, Value};
//! let mut id = Vec::new();
//! encode_identity(&mut id, Domain::ScanKey, &[
//!     (TypeTag::Int8, Some(Value::Int8(7))),
//!     (TypeTag::Text, None),
//! ]).unwrap();
//! let back = decode(&id).unwrap();
//! assert_eq!(back.fields.len(), 2);
//! ```
//!
//! ## Spec sections and the code that implements them
//!
//! | spec section | what | code |
//! |---|---|---|
//! | wire-format §2.1 | escape-and-terminate | [`primitives::put_escaped`], [`primitives::scan_escaped`] |
//! | wire-format §2.2 | sign flip | [`primitives::flip_i16`] … [`primitives::flip_i128`] |
//! | wire-format §3 | identity header, domains, `TUPLE_END` | [`IdentityEncoder`], [`Domain`] |
//! | wire-format §4 | fields, NULL states, type tags | [`IdentityEncoder::value`], [`IdentityEncoder::null`], [`TypeTag`] |
//! | wire-format §5 | scalar payloads | [`Value`] and its component types |
//! | wire-format §5.4 | float transform | [`encode::float4_key`], [`encode::float8_key`] |
//! | wire-format §5.5 | numeric | [`Numeric`], [`encode::numeric_class`] |
//! | wire-format §5.14 | interval | [`Interval`] |
//! | wire-format §6.1 | child identities | [`Value::Identity`] |
//! | wire-format §6.2–§6.7 | arrays, ranges, multiranges, jsonb, composites | [`structure`], [`Value::Array`] … [`Value::Record`] |
//! | wire-format §7 | resource limits | [`limits`] |
//! | wire-format §8 | strict decoding | [`decode()`], [`validate`] |
//! | wire-format §9 | send formats | [`send`], [`send::owned_from_send`] for structures |
//! | probe §2–§3 | probe V1 | [`probe::probe_v1`], [`probe::probe_with_prefix`] |
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod decode;
pub mod describe;
pub mod encode;
pub mod error;
pub mod limits;
pub mod primitives;
pub mod probe;
pub mod send;
pub mod structure;
pub mod tag;
pub mod value;

pub use decode::{
    ChildIdentity, DecodedField, DecodedIdentity, OwnedBits, OwnedNumeric, OwnedValue, Summary,
    decode, validate,
};
pub use encode::{IdentityEncoder, encode_identity};
pub use error::{Error, Limit, Result};
pub use probe::{PROBE_V1_PREFIX_LEN, probe_v1};
pub use tag::{Domain, TUPLE_END, TypeTag, VERSION_V2};
pub use value::{BitString, Digits, Inet, Interval, IpFamily, Numeric, NumericSign, Timetz, Value};
