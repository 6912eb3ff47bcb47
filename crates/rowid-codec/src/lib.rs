//! # rowid-codec: the Row Identity V2 wire format
//!
//! This crate owns the bytes: an exact, canonical, order-preserving encoding of typed
//! PostgreSQL values, specified normatively in `spec/wire-format.md` and `spec/probe.md` of
//! the repository. The bytes are the identity: there is no hash in it, equal values (under
//! PostgreSQL's equality) encode identically, unequal values encode differently, and no
//! complete identity is a prefix of another. It owns framing, ordered escaping, the per-type
//! transforms, structural framing, strict decoding and the probe; it knows nothing of
//! PostgreSQL catalogs or of pgrx (that is `rowid-registry` and the extension).
//!
//! The crate is `#![no_std]` with `alloc`. Features: `std` (default: `std::error::Error` for
//! [`Error`]), `send` (PostgreSQL's binary send formats into encoder inputs, for the WAL
//! path), `testing` (a probe with a forced digest, for collision tests).
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
//! assert_eq!(back.to_string(), "SCAN_KEY(int8 7, text NULL)");
//! ```
//!
//! ## Layers
//!
//! The vocabulary ([`tag`], [`primitives`], [`limits`], [`error`], [`scalar`], [`structure`],
//! [`value`]) sits below both directions; [`mod@encode`] and [`mod@decode`] use it and never each
//! other. [`describe`] renders decoded identities, [`probe`] derives index keys, [`send`]
//! (feature `send`) reads PostgreSQL's send formats.
//!
//! ## Spec sections and the code that implements them
//!
//! | spec section | what | code |
//! |---|---|---|
//! | wire-format §2.1 | escape-and-terminate | [`primitives::put_escaped`]; the decoder's reader |
//! | wire-format §2.2 | sign flip | [`primitives::flip_i16`] … [`primitives::flip_i128`] |
//! | wire-format §3 | identity header, domains, `TUPLE_END` | [`IdentityEncoder`], [`Domain`] |
//! | wire-format §4 | fields, NULL states, type tags | [`IdentityEncoder::value`], [`IdentityEncoder::null`], [`TypeTag`] |
//! | wire-format §5 | scalar payloads | [`Value`] and the types of [`scalar`] |
//! | wire-format §5.4 | float transform | [`encode::float4_key`], [`encode::float8_key`] |
//! | wire-format §5.5 | numeric | [`Numeric`], [`scalar::numeric_class`] |
//! | wire-format §5.14 | interval | [`Interval`] |
//! | wire-format §6.1 | child identities | [`ChildIdentity`], [`Value::Identity`] |
//! | wire-format §6.2–§6.7 | arrays, ranges, multiranges, jsonb, composites | [`structure`], [`Value::Array`] … [`Value::Record`] |
//! | wire-format §7 | resource limits | [`limits`] |
//! | wire-format §8 | strict decoding | [`decode()`], [`validate`], [`decode::fields`] |
//! | wire-format §9 | send formats | `send` (feature `send`) |
//! | probe §2–§3 | probe V1 | [`probe::probe_v1`], [`probe::probe_with_prefix`] |
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod decode;
pub mod describe;
pub mod encode;
pub mod error;
pub mod hex;
pub mod limits;
pub mod primitives;
pub mod probe;
pub mod scalar;
#[cfg(feature = "send")]
pub mod send;
pub mod structure;
pub mod tag;
pub mod value;

pub use decode::{Summary, decode, validate};
pub use encode::{IdentityEncoder, encode_identity};
pub use error::{Error, Limit, Result};
pub use probe::{PROBE_V1_PREFIX_LEN, probe_v1};
pub use scalar::{
    BitString, ChildIdentity, Digits, Inet, Interval, IpFamily, Numeric, NumericSign, OwnedBits,
    OwnedChildIdentity, OwnedNumeric, Timetz,
};
pub use tag::{Domain, TUPLE_END, TypeTag, VERSION_V2};
pub use value::{DecodedIdentity, OwnedField, OwnedValue, Value};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
