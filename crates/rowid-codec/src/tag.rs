//! Stable byte assignments: the format version, identity domains and type tags
//! (spec/wire-format.md §3 and §4). Each assignment is written once, in a table below; the
//! enums, their byte and name lookups and their `ALL` lists are generated from it.

/// First byte of every V2 identity (spec §3).
pub const VERSION_V2: u8 = 0x02;
/// Last byte of every identity, after the last field (spec §3).
pub const TUPLE_END: u8 = 0xFF;
/// Second byte of a field: the field is SQL NULL and no payload follows (spec §4).
pub const NULL_STATE: u8 = 0x00;
/// Second byte of a field: a payload follows (spec §4).
pub const VALUE_STATE: u8 = 0x01;

/// Generates a `#[repr(u8)]` enum of byte assignments with `ALL` (in table order, which is
/// byte order), `from_byte`, `name` and `from_name`.
macro_rules! assignments {
    (
        $(#[$meta:meta])*
        pub enum $enum:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $byte:literal, $name:literal; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum $enum {
            $( $(#[$vmeta])* $variant = $byte, )*
        }

        impl $enum {
            /// Every assignment, in byte order.
            pub const ALL: [$enum; [$($byte),*].len()] = [$($enum::$variant),*];

            /// The assignment of `byte`, if any. Reserved and unassigned bytes return `None`.
            pub const fn from_byte(byte: u8) -> Option<$enum> {
                match byte {
                    $($byte => Some($enum::$variant),)*
                    _ => None,
                }
            }

            /// The name used in SQL, in the vectors and in messages.
            pub const fn name(self) -> &'static str {
                match self {
                    $($enum::$variant => $name,)*
                }
            }

            /// The assignment whose [`Self::name`] is `name` (exact match).
            pub fn from_name(name: &str) -> Option<$enum> {
                Self::ALL.into_iter().find(|x| x.name() == name)
            }
        }
    };
}

assignments! {
    /// What an identity means; makes identities of different meanings disjoint (spec §3.1).
    pub enum Domain {
        /// Fields of an eligible source identity index (primary key or eligible unique index).
        ScanKey = 0x01, "SCAN_KEY";
        /// All logical output fields of a keyless row.
        KeylessRow = 0x02, "KEYLESS_ROW";
        /// GROUP BY fields.
        GroupKey = 0x03, "GROUP_KEY";
        /// Ordered child identities of a join.
        JoinKey = 0x04, "JOIN_KEY";
        /// Set-operation identity components.
        SetKey = 0x05, "SET_KEY";
        /// Window partition/order identity components.
        WindowKey = 0x06, "WINDOW_KEY";
        /// A registered internal discriminator (spec §3.2).
        Synthetic = 0x07, "SYNTHETIC";
    }
}

assignments! {
    /// A field's semantic family. Tag values are stable and never reused (spec §4). Names are
    /// PostgreSQL's type names; the child identity tag is named `identity`, the structural
    /// families by their kind (`array`, `range`, `multirange`, `jsonb`, `record`).
    pub enum TypeTag {
        /// `bool` (spec §5.1).
        Bool = 0x01, "bool";
        /// `int2` (spec §5.2).
        Int2 = 0x02, "int2";
        /// `int4` (spec §5.2).
        Int4 = 0x03, "int4";
        /// `int8` (spec §5.2).
        Int8 = 0x04, "int8";
        /// `oid` (spec §5.3).
        Oid = 0x05, "oid";
        /// `float4` (spec §5.4).
        Float4 = 0x06, "float4";
        /// `float8` (spec §5.4).
        Float8 = 0x07, "float8";
        /// `numeric` (spec §5.5).
        Numeric = 0x08, "numeric";
        /// `text` (spec §5.6).
        Text = 0x09, "text";
        /// `varchar` (spec §5.6).
        Varchar = 0x0A, "varchar";
        /// `bpchar` (spec §5.7).
        Bpchar = 0x0B, "bpchar";
        /// `bytea` (spec §5.8).
        Bytea = 0x0C, "bytea";
        /// `uuid` (spec §5.9).
        Uuid = 0x0D, "uuid";
        /// `date` (spec §5.10).
        Date = 0x0E, "date";
        /// `time` (spec §5.11).
        Time = 0x0F, "time";
        /// `timestamp` (spec §5.12).
        Timestamp = 0x10, "timestamp";
        /// `timestamptz` (spec §5.12).
        Timestamptz = 0x11, "timestamptz";
        /// `timetz` (spec §5.13).
        Timetz = 0x12, "timetz";
        /// `interval` (spec §5.14).
        Interval = 0x13, "interval";
        /// `inet` (spec §5.15).
        Inet = 0x14, "inet";
        /// `cidr` (spec §5.15).
        Cidr = 0x15, "cidr";
        /// `macaddr` (spec §5.16).
        Macaddr = 0x16, "macaddr";
        /// `macaddr8` (spec §5.16).
        Macaddr8 = 0x17, "macaddr8";
        /// `bit` (spec §5.17).
        Bit = 0x18, "bit";
        /// `varbit` (spec §5.17).
        Varbit = 0x19, "varbit";
        /// Any enum type: the label (spec §5.18).
        Enum = 0x1A, "enum";
        /// A complete child identity inside JOIN_KEY / SET_KEY / WINDOW_KEY (spec §6.1).
        ChildIdentity = 0x40, "identity";
        /// Any array type (spec §6.3).
        Array = 0x41, "array";
        /// Any range type (spec §6.4).
        Range = 0x42, "range";
        /// Any multirange type (spec §6.5).
        Multirange = 0x43, "multirange";
        /// `jsonb` (spec §6.6).
        Jsonb = 0x44, "jsonb";
        /// Any composite (row) type (spec §6.7).
        Record = 0x45, "record";
    }
}

impl TypeTag {
    /// The payload width in bytes when it is fixed by the tag; `None` for variable-width
    /// (escape-and-terminate or structural) payloads (spec §4, table 2).
    pub const fn fixed_width(self) -> Option<usize> {
        Some(match self {
            TypeTag::Bool => 1,
            TypeTag::Int2 => 2,
            TypeTag::Int4 | TypeTag::Oid | TypeTag::Float4 | TypeTag::Date => 4,
            TypeTag::Macaddr => 6,
            TypeTag::Int8
            | TypeTag::Float8
            | TypeTag::Time
            | TypeTag::Timestamp
            | TypeTag::Timestamptz
            | TypeTag::Macaddr8 => 8,
            TypeTag::Timetz => 12,
            TypeTag::Uuid | TypeTag::Interval => 16,
            _ => return None,
        })
    }

    /// True for the scalar families (`01`–`3F`).
    pub const fn is_scalar(self) -> bool {
        (self as u8) < 0x40
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is in byte order, and every byte maps back to its own assignment.
    #[test]
    fn tables_are_in_byte_order_and_round_trip() {
        assert!(TypeTag::ALL.windows(2).all(|w| (w[0] as u8) < (w[1] as u8)));
        assert!(Domain::ALL.windows(2).all(|w| (w[0] as u8) < (w[1] as u8)));
        for byte in 0..=u8::MAX {
            if let Some(t) = TypeTag::from_byte(byte) {
                assert_eq!(t as u8, byte);
                assert_eq!(TypeTag::from_name(t.name()), Some(t));
            }
            if let Some(d) = Domain::from_byte(byte) {
                assert_eq!(d as u8, byte);
                assert_eq!(Domain::from_name(d.name()), Some(d));
            }
        }
        assert_eq!(TypeTag::ALL.len(), 32);
        assert_eq!(Domain::ALL.len(), 7);
    }
}
