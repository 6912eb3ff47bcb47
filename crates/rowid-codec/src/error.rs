//! The crate's one error type.

use core::fmt;

use crate::tag::TypeTag;

/// A structural resource limit (spec §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// [`crate::limits::MAX_FIELDS`].
    FieldCount,
    /// [`crate::limits::MAX_DEPTH`].
    Depth,
    /// [`crate::limits::MAX_IDENTITY_LEN`].
    IdentityLength,
    /// [`crate::limits::MAX_ENUM_LABEL_LEN`].
    EnumLabelLength,
    /// [`crate::limits::MAX_BIT_LEN`].
    BitLength,
    /// [`crate::limits::MAX_NUMERIC_GROUPS`].
    NumericDigits,
    /// [`crate::limits::MAX_ELEMENTS`].
    Elements,
}

impl Limit {
    /// The limit's name as written in the spec.
    pub const fn name(self) -> &'static str {
        match self {
            Limit::FieldCount => "MAX_FIELDS",
            Limit::Depth => "MAX_DEPTH",
            Limit::IdentityLength => "MAX_IDENTITY_LEN",
            Limit::EnumLabelLength => "MAX_ENUM_LABEL_LEN",
            Limit::BitLength => "MAX_BIT_LEN",
            Limit::NumericDigits => "MAX_NUMERIC_GROUPS",
            Limit::Elements => "MAX_ELEMENTS",
        }
    }
}

/// Everything that can go wrong while encoding, decoding or parsing a send format.
///
/// Decoder errors carry the byte `offset` into the identity being decoded (for a nested child
/// identity, into that child's unescaped bytes) and, once the fields start, the zero-based
/// `field` index. Encoder errors carry the index of the field that was being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The input ended inside a structure.
    Truncated {
        /// Offset at which more bytes were needed.
        offset: usize,
    },
    /// Bytes remain after the identity's `TUPLE_END`, or after a send-format value.
    TrailingBytes {
        /// Offset of the first unexpected byte.
        offset: usize,
    },
    /// The first byte is not [`crate::VERSION_V2`].
    UnknownVersion {
        /// The byte found.
        found: u8,
    },
    /// The domain byte is not assigned.
    UnknownDomain {
        /// The byte found.
        found: u8,
    },
    /// A field starts with an unassigned or reserved type tag.
    UnknownTypeTag {
        /// Field index.
        field: u32,
        /// Offset of the tag.
        offset: usize,
        /// The byte found.
        found: u8,
    },
    /// A field's second byte is neither `0x00` (NULL) nor `0x01` (value).
    InvalidNullState {
        /// Field index.
        field: u32,
        /// Offset of the state byte.
        offset: usize,
        /// The byte found.
        found: u8,
    },
    /// `0x00` inside an escaped payload was followed by a byte other than `0x00` or `0xFF`.
    InvalidEscape {
        /// Field index.
        field: u32,
        /// Offset of the `0x00` that starts the bad sequence.
        offset: usize,
    },
    /// A payload is well-formed but not the one canonical encoding of its value (for example
    /// `-0.0`, a NaN other than the canonical quiet NaN, an unnormalised numeric, a `bpchar`
    /// with trailing spaces, a `cidr` with host bits set).
    NonCanonical {
        /// Field index.
        field: u32,
        /// Offset where the payload starts.
        offset: usize,
        /// The field's type.
        tag: TypeTag,
        /// What is wrong.
        reason: &'static str,
    },
    /// The identity declares a different number of fields than it holds.
    FieldCountMismatch {
        /// Count in the header.
        declared: u32,
        /// Fields actually present (decoding) or written (encoding).
        actual: u32,
    },
    /// The byte after the last declared field is not `TUPLE_END`.
    MissingTupleEnd {
        /// Offset where `TUPLE_END` was expected.
        offset: usize,
    },
    /// An encoder input value cannot be represented (for example a NUL byte in text, an inet
    /// prefix longer than its address, a time of day past 24:00).
    InvalidValue {
        /// Field index.
        field: u32,
        /// The field's type.
        tag: TypeTag,
        /// What is wrong.
        reason: &'static str,
    },
    /// A structural resource limit was exceeded.
    LimitExceeded {
        /// Which limit.
        limit: Limit,
        /// The offending size, count or depth.
        value: usize,
    },
    /// A PostgreSQL binary send-format value is malformed.
    InvalidSendFormat {
        /// The type being parsed.
        tag: TypeTag,
        /// Offset inside the send-format bytes.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { offset } => write!(f, "identity truncated at byte {offset}"),
            Error::TrailingBytes { offset } => write!(f, "trailing bytes at byte {offset}"),
            Error::UnknownVersion { found } => {
                write!(f, "unknown row identity version byte 0x{found:02X}")
            }
            Error::UnknownDomain { found } => write!(f, "unknown identity domain 0x{found:02X}"),
            Error::UnknownTypeTag {
                field,
                offset,
                found,
            } => write!(
                f,
                "field {field}: unknown type tag 0x{found:02X} at byte {offset}"
            ),
            Error::InvalidNullState {
                field,
                offset,
                found,
            } => write!(
                f,
                "field {field}: invalid NULL/value state 0x{found:02X} at byte {offset}"
            ),
            Error::InvalidEscape { field, offset } => {
                write!(f, "field {field}: invalid escape sequence at byte {offset}")
            }
            Error::NonCanonical {
                field,
                offset,
                tag,
                reason,
            } => write!(
                f,
                "field {field} ({}): non-canonical payload at byte {offset}: {reason}",
                tag.name()
            ),
            Error::FieldCountMismatch { declared, actual } => {
                write!(f, "identity declares {declared} fields but holds {actual}")
            }
            Error::MissingTupleEnd { offset } => {
                write!(f, "expected TUPLE_END (0xFF) at byte {offset}")
            }
            Error::InvalidValue { field, tag, reason } => {
                write!(
                    f,
                    "field {field} ({}): cannot encode value: {reason}",
                    tag.name()
                )
            }
            Error::LimitExceeded { limit, value } => {
                write!(f, "resource limit {} exceeded: {value}", limit.name())
            }
            Error::InvalidSendFormat {
                tag,
                offset,
                reason,
            } => write!(
                f,
                "invalid {} send format at byte {offset}: {reason}",
                tag.name()
            ),
        }
    }
}

impl Error {
    /// [`Error::InvalidValue`] for field `field` of type `tag`.
    pub(crate) const fn invalid_value(field: u32, tag: TypeTag, reason: &'static str) -> Error {
        Error::InvalidValue { field, tag, reason }
    }
}

#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Shorthand used throughout the crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;
