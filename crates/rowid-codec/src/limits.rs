//! Structural resource limits (spec/wire-format.md §7). Exceeding one is an error, never a
//! switch to another identity algorithm.

/// Most fields one identity may declare: PostgreSQL's `MaxTupleAttributeNumber`.
pub const MAX_FIELDS: u32 = 1664;

/// Deepest nesting. A top-level identity has depth 1; a child identity field adds the child's
/// depth, and every structural level (an array, range, multirange, composite, jsonb value
/// or jsonb container) adds 1 (spec §7).
pub const MAX_DEPTH: u32 = 32;

/// Longest complete identity in bytes: the largest payload of a PostgreSQL varlena
/// (`0x3FFFFFFF` total size minus the 4-byte header).
pub const MAX_IDENTITY_LEN: usize = 0x3FFF_FFFB;

/// Longest enum label in bytes: `NAMEDATALEN - 1` of a default PostgreSQL build.
pub const MAX_ENUM_LABEL_LEN: usize = 63;

/// Largest bit length of a `bit`/`varbit` value: PostgreSQL's `VARBITMAXLEN`
/// (`INT_MAX - BITS_PER_BYTE + 1`).
pub const MAX_BIT_LEN: u32 = 0x7FFF_FFF8;

/// Largest number of base-10000 digit groups in a normalised numeric: 131072 decimal digits
/// before the point and 16383 after give at most 32768 + 4096 groups.
pub const MAX_NUMERIC_GROUPS: usize = 36_864;

/// Most items in one structural list: array elements, multirange ranges, jsonb array
/// elements or object pairs. PostgreSQL's `MaxArraySize` (`MaxAllocSize / sizeof(Datum)`).
pub const MAX_ELEMENTS: usize = 134_217_727;
