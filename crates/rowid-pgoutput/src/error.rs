//! The crate's error type.

use std::fmt;

/// What went wrong while decoding a pgoutput message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message ended early.
    Truncated {
        /// Offset where more bytes were needed.
        offset: usize,
    },
    /// Bytes remain after a complete message.
    TrailingBytes {
        /// Offset of the first extra byte.
        offset: usize,
    },
    /// The first byte names no known message.
    UnknownMessage {
        /// The byte found.
        tag: u8,
    },
    /// A byte at a fixed position has a value the protocol does not allow.
    Unexpected {
        /// Offset of the byte.
        offset: usize,
        /// The byte found.
        found: u8,
        /// What the protocol expects there.
        expected: &'static str,
    },
    /// A negative count or length.
    NegativeLength {
        /// Offset of the count or length.
        offset: usize,
    },
    /// A name is not valid UTF-8 (the decoder supports UTF8 databases).
    InvalidName {
        /// Offset where the name starts.
        offset: usize,
    },
    /// A message that only exists in a later protocol version.
    ProtocolVersion {
        /// The message tag.
        tag: u8,
        /// The version the decoder was configured with.
        version: u32,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { offset } => write!(f, "message truncated at byte {offset}"),
            DecodeError::TrailingBytes { offset } => write!(f, "trailing bytes at byte {offset}"),
            DecodeError::UnknownMessage { tag } => {
                write!(f, "unknown pgoutput message type 0x{tag:02X}")
            }
            DecodeError::Unexpected {
                offset,
                found,
                expected,
            } => write!(f, "byte {offset}: found 0x{found:02X}, expected {expected}"),
            DecodeError::NegativeLength { offset } => write!(f, "negative length at byte {offset}"),
            DecodeError::InvalidName { offset } => {
                write!(f, "name at byte {offset} is not valid UTF-8")
            }
            DecodeError::ProtocolVersion { tag, version } => write!(
                f,
                "message 0x{tag:02X} is not part of pgoutput protocol version {version}"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}
