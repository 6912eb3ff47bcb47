//! Stable byte assignments: the format version, identity domains and type tags
//! (spec/wire-format.md §3 and §4).

/// First byte of every V2 identity (spec §3).
pub const VERSION_V2: u8 = 0x02;
/// Last byte of every identity, after the last field (spec §3).
pub const TUPLE_END: u8 = 0xFF;
/// Second byte of a field: the field is SQL NULL and no payload follows (spec §4).
pub const NULL_STATE: u8 = 0x00;
/// Second byte of a field: a payload follows (spec §4).
pub const VALUE_STATE: u8 = 0x01;

/// What an identity means; makes identities of different meanings disjoint (spec §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Domain {
    /// Fields of an eligible source identity index (primary key or eligible unique index).
    ScanKey = 0x01,
    /// All logical output fields of a keyless row.
    KeylessRow = 0x02,
    /// GROUP BY fields.
    GroupKey = 0x03,
    /// Ordered child identities of a join.
    JoinKey = 0x04,
    /// Set-operation identity components.
    SetKey = 0x05,
    /// Window partition/order identity components.
    WindowKey = 0x06,
    /// A registered internal discriminator (spec §3.2).
    Synthetic = 0x07,
}

impl Domain {
    /// Every domain, in byte order.
    pub const ALL: [Domain; 7] = [
        Domain::ScanKey,
        Domain::KeylessRow,
        Domain::GroupKey,
        Domain::JoinKey,
        Domain::SetKey,
        Domain::WindowKey,
        Domain::Synthetic,
    ];

    /// The domain assigned to `byte`, if any.
    pub const fn from_byte(byte: u8) -> Option<Domain> {
        Some(match byte {
            0x01 => Domain::ScanKey,
            0x02 => Domain::KeylessRow,
            0x03 => Domain::GroupKey,
            0x04 => Domain::JoinKey,
            0x05 => Domain::SetKey,
            0x06 => Domain::WindowKey,
            0x07 => Domain::Synthetic,
            _ => return None,
        })
    }

    /// The upper-case name used in SQL (`'SCAN_KEY'`) and in the vectors.
    pub const fn name(self) -> &'static str {
        match self {
            Domain::ScanKey => "SCAN_KEY",
            Domain::KeylessRow => "KEYLESS_ROW",
            Domain::GroupKey => "GROUP_KEY",
            Domain::JoinKey => "JOIN_KEY",
            Domain::SetKey => "SET_KEY",
            Domain::WindowKey => "WINDOW_KEY",
            Domain::Synthetic => "SYNTHETIC",
        }
    }

    /// The domain whose [`Domain::name`] is `name` (exact, upper case).
    pub fn from_name(name: &str) -> Option<Domain> {
        Domain::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// A field's semantic family. Tag values are stable and never reused (spec §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum TypeTag {
    /// `bool` (spec §5.1).
    Bool = 0x01,
    /// `int2` (spec §5.2).
    Int2 = 0x02,
    /// `int4` (spec §5.2).
    Int4 = 0x03,
    /// `int8` (spec §5.2).
    Int8 = 0x04,
    /// `oid` (spec §5.3).
    Oid = 0x05,
    /// `float4` (spec §5.4).
    Float4 = 0x06,
    /// `float8` (spec §5.4).
    Float8 = 0x07,
    /// `numeric` (spec §5.5).
    Numeric = 0x08,
    /// `text` (spec §5.6).
    Text = 0x09,
    /// `varchar` (spec §5.6).
    Varchar = 0x0A,
    /// `bpchar` (spec §5.7).
    Bpchar = 0x0B,
    /// `bytea` (spec §5.8).
    Bytea = 0x0C,
    /// `uuid` (spec §5.9).
    Uuid = 0x0D,
    /// `date` (spec §5.10).
    Date = 0x0E,
    /// `time` (spec §5.11).
    Time = 0x0F,
    /// `timestamp` (spec §5.12).
    Timestamp = 0x10,
    /// `timestamptz` (spec §5.12).
    Timestamptz = 0x11,
    /// `timetz` (spec §5.13).
    Timetz = 0x12,
    /// `interval` (spec §5.14).
    Interval = 0x13,
    /// `inet` (spec §5.15).
    Inet = 0x14,
    /// `cidr` (spec §5.15).
    Cidr = 0x15,
    /// `macaddr` (spec §5.16).
    Macaddr = 0x16,
    /// `macaddr8` (spec §5.16).
    Macaddr8 = 0x17,
    /// `bit` (spec §5.17).
    Bit = 0x18,
    /// `varbit` (spec §5.17).
    Varbit = 0x19,
    /// Any enum type: the label (spec §5.18).
    Enum = 0x1A,
    /// A complete child identity inside JOIN_KEY / SET_KEY / WINDOW_KEY (spec §6.1).
    ChildIdentity = 0x40,
    /// Any array type (spec §6.3).
    Array = 0x41,
    /// Any range type (spec §6.4).
    Range = 0x42,
    /// Any multirange type (spec §6.5).
    Multirange = 0x43,
    /// `jsonb` (spec §6.6).
    Jsonb = 0x44,
    /// Any composite (row) type (spec §6.7).
    Record = 0x45,
}

impl TypeTag {
    /// Every assigned tag, in byte order.
    pub const ALL: [TypeTag; 32] = [
        TypeTag::Bool,
        TypeTag::Int2,
        TypeTag::Int4,
        TypeTag::Int8,
        TypeTag::Oid,
        TypeTag::Float4,
        TypeTag::Float8,
        TypeTag::Numeric,
        TypeTag::Text,
        TypeTag::Varchar,
        TypeTag::Bpchar,
        TypeTag::Bytea,
        TypeTag::Uuid,
        TypeTag::Date,
        TypeTag::Time,
        TypeTag::Timestamp,
        TypeTag::Timestamptz,
        TypeTag::Timetz,
        TypeTag::Interval,
        TypeTag::Inet,
        TypeTag::Cidr,
        TypeTag::Macaddr,
        TypeTag::Macaddr8,
        TypeTag::Bit,
        TypeTag::Varbit,
        TypeTag::Enum,
        TypeTag::ChildIdentity,
        TypeTag::Array,
        TypeTag::Range,
        TypeTag::Multirange,
        TypeTag::Jsonb,
        TypeTag::Record,
    ];

    /// The tag assigned to `byte`, if any. Reserved and unassigned bytes return `None`.
    pub const fn from_byte(byte: u8) -> Option<TypeTag> {
        Some(match byte {
            0x01 => TypeTag::Bool,
            0x02 => TypeTag::Int2,
            0x03 => TypeTag::Int4,
            0x04 => TypeTag::Int8,
            0x05 => TypeTag::Oid,
            0x06 => TypeTag::Float4,
            0x07 => TypeTag::Float8,
            0x08 => TypeTag::Numeric,
            0x09 => TypeTag::Text,
            0x0A => TypeTag::Varchar,
            0x0B => TypeTag::Bpchar,
            0x0C => TypeTag::Bytea,
            0x0D => TypeTag::Uuid,
            0x0E => TypeTag::Date,
            0x0F => TypeTag::Time,
            0x10 => TypeTag::Timestamp,
            0x11 => TypeTag::Timestamptz,
            0x12 => TypeTag::Timetz,
            0x13 => TypeTag::Interval,
            0x14 => TypeTag::Inet,
            0x15 => TypeTag::Cidr,
            0x16 => TypeTag::Macaddr,
            0x17 => TypeTag::Macaddr8,
            0x18 => TypeTag::Bit,
            0x19 => TypeTag::Varbit,
            0x1A => TypeTag::Enum,
            0x40 => TypeTag::ChildIdentity,
            0x41 => TypeTag::Array,
            0x42 => TypeTag::Range,
            0x43 => TypeTag::Multirange,
            0x44 => TypeTag::Jsonb,
            0x45 => TypeTag::Record,
            _ => return None,
        })
    }

    /// The PostgreSQL type name of the family (`"int8"`, `"timestamptz"`, ...); the child
    /// identity tag is named `"identity"`, the structural families by their kind (`"array"`,
    /// `"range"`, `"multirange"`, `"jsonb"`, `"record"`).
    pub const fn name(self) -> &'static str {
        match self {
            TypeTag::Bool => "bool",
            TypeTag::Int2 => "int2",
            TypeTag::Int4 => "int4",
            TypeTag::Int8 => "int8",
            TypeTag::Oid => "oid",
            TypeTag::Float4 => "float4",
            TypeTag::Float8 => "float8",
            TypeTag::Numeric => "numeric",
            TypeTag::Text => "text",
            TypeTag::Varchar => "varchar",
            TypeTag::Bpchar => "bpchar",
            TypeTag::Bytea => "bytea",
            TypeTag::Uuid => "uuid",
            TypeTag::Date => "date",
            TypeTag::Time => "time",
            TypeTag::Timestamp => "timestamp",
            TypeTag::Timestamptz => "timestamptz",
            TypeTag::Timetz => "timetz",
            TypeTag::Interval => "interval",
            TypeTag::Inet => "inet",
            TypeTag::Cidr => "cidr",
            TypeTag::Macaddr => "macaddr",
            TypeTag::Macaddr8 => "macaddr8",
            TypeTag::Bit => "bit",
            TypeTag::Varbit => "varbit",
            TypeTag::Enum => "enum",
            TypeTag::ChildIdentity => "identity",
            TypeTag::Array => "array",
            TypeTag::Range => "range",
            TypeTag::Multirange => "multirange",
            TypeTag::Jsonb => "jsonb",
            TypeTag::Record => "record",
        }
    }

    /// The tag whose [`TypeTag::name`] is `name`.
    pub fn from_name(name: &str) -> Option<TypeTag> {
        TypeTag::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The payload width in bytes when it is fixed by the tag; `None` for variable-width
    /// (escape-and-terminate) payloads (spec §4, table 2).
    pub const fn fixed_width(self) -> Option<usize> {
        match self {
            TypeTag::Bool => Some(1),
            TypeTag::Int2 => Some(2),
            TypeTag::Int4 | TypeTag::Oid | TypeTag::Float4 | TypeTag::Date => Some(4),
            TypeTag::Int8
            | TypeTag::Float8
            | TypeTag::Time
            | TypeTag::Timestamp
            | TypeTag::Timestamptz
            | TypeTag::Macaddr8 => Some(8),
            TypeTag::Timetz => Some(12),
            TypeTag::Uuid | TypeTag::Interval => Some(16),
            TypeTag::Macaddr => Some(6),
            TypeTag::Numeric
            | TypeTag::Text
            | TypeTag::Varchar
            | TypeTag::Bpchar
            | TypeTag::Bytea
            | TypeTag::Inet
            | TypeTag::Cidr
            | TypeTag::Bit
            | TypeTag::Varbit
            | TypeTag::Enum
            | TypeTag::ChildIdentity
            | TypeTag::Array
            | TypeTag::Range
            | TypeTag::Multirange
            | TypeTag::Jsonb
            | TypeTag::Record => None,
        }
    }

    /// True for the scalar families (`01`–`3F`).
    pub const fn is_scalar(self) -> bool {
        (self as u8) < 0x40
    }
}
