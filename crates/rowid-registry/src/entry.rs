//! Registry entries: the contract of each supported type (spec/registry.md §2).

use rowid_codec::TypeTag;

use crate::catalog::oid;

/// PostgreSQL majors whose contracts are verified against running servers by
/// `cargo xtask test` (spec/registry.md §2.6).
pub const SUPPORTED_MAJORS: &[u32] = &[15, 16, 17, 18];

/// Whether lexicographic payload order agrees with the type's default B-tree comparator for
/// non-NULL values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderClaim {
    /// Always.
    Preserving,
    /// Only when the field's collation is `C` or `POSIX`.
    OnlyUnderCCollation,
    /// A structural family: exactly when every component (element type, subtype, attribute)
    /// is order-preserving.
    WhenComponentsAre,
    /// Never: no locality claim.
    NotPreserving,
}

/// Volatility of the encoding of a value of this type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Volatility {
    /// Depends only on the value.
    Immutable,
    /// Depends on catalog state (enum labels).
    Stable,
}

/// How the worst-case encoded size of a field is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeRule {
    /// A fixed payload width (or a family-determined maximum, inet/cidr).
    Fixed(usize),
    /// `numeric(p, s)`: bounded by the precision in the typmod.
    NumericTypmod,
    /// `varchar(n)` / `char(n)`: bounded by `n` characters of the database encoding.
    CharTypmod,
    /// `bit(n)` / `varbit(n)`: bounded by `n` bits.
    BitTypmod,
    /// Enum labels: bounded by `MAX_ENUM_LABEL_LEN`.
    EnumLabel,
    /// No bound.
    Unbounded,
    /// A structural family: computed from the components (ranges and composites of bounded
    /// components are bounded; arrays, multiranges and jsonb are not).
    Structural,
}

/// Catalog changes that invalidate a resolved identity schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invalidation {
    /// The field's collation changes (`ALTER ... COLLATE`, collation version change).
    CollationChange,
    /// `ALTER TYPE ... RENAME VALUE / ADD VALUE` on an enum.
    EnumLabelOrOrder,
    /// `ALTER DOMAIN` or DDL on a domain's base type.
    DomainOrBaseType,
    /// `ALTER TYPE` on a composite type used by the field (at any nesting level).
    CompositeAlteration,
    /// The column's type is changed or replaced (`ALTER COLUMN ... TYPE`): every field.
    TypeChange,
}

/// The contract of one concrete type.
///
/// Every entry is equality-canonical: PostgreSQL equality and byte equality agree in both
/// directions (an entry cannot exist without that proof). Which tests prove each entry's
/// equality and order claims is listed in `spec/registry.md` §2.9, and a test of this crate
/// checks that every entry is listed there and that every named test exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `pg_type.oid` of the concrete type.
    pub oid: u32,
    /// Type name.
    pub name: &'static str,
    /// Wire type tag.
    pub tag: TypeTag,
    /// Order claim for non-NULL values under the default ascending B-tree opclass.
    pub order: OrderClaim,
    /// Volatility.
    pub volatility: Volatility,
    /// Size rule.
    pub size: SizeRule,
    /// Catalog changes that invalidate a schema using this type.
    pub ddl_invalidations: &'static [Invalidation],
    /// Majors on which the contract is verified.
    pub supported_majors: &'static [u32],
}

macro_rules! scalar {
    ($oid:expr, $name:literal, $tag:ident, $order:ident, $size:expr, $inval:expr) => {
        Entry {
            oid: $oid,
            name: $name,
            tag: TypeTag::$tag,
            order: OrderClaim::$order,
            volatility: Volatility::Immutable,
            size: $size,
            ddl_invalidations: $inval,
            supported_majors: SUPPORTED_MAJORS,
        }
    };
}

const NONE: &[Invalidation] = &[];
const COLLATED: &[Invalidation] = &[Invalidation::CollationChange];

/// Every built-in type the registry supports, by OID.
pub const BUILTINS: &[Entry] = &[
    scalar!(
        oid::BOOL,
        "bool",
        Bool,
        Preserving,
        SizeRule::Fixed(1),
        NONE
    ),
    scalar!(
        oid::INT2,
        "int2",
        Int2,
        Preserving,
        SizeRule::Fixed(2),
        NONE
    ),
    scalar!(
        oid::INT4,
        "int4",
        Int4,
        Preserving,
        SizeRule::Fixed(4),
        NONE
    ),
    scalar!(
        oid::INT8,
        "int8",
        Int8,
        Preserving,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(oid::OID, "oid", Oid, Preserving, SizeRule::Fixed(4), NONE),
    scalar!(
        oid::FLOAT4,
        "float4",
        Float4,
        Preserving,
        SizeRule::Fixed(4),
        NONE
    ),
    scalar!(
        oid::FLOAT8,
        "float8",
        Float8,
        Preserving,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(
        oid::NUMERIC,
        "numeric",
        Numeric,
        Preserving,
        SizeRule::NumericTypmod,
        NONE
    ),
    scalar!(
        oid::TEXT,
        "text",
        Text,
        OnlyUnderCCollation,
        SizeRule::Unbounded,
        COLLATED
    ),
    scalar!(
        oid::VARCHAR,
        "varchar",
        Varchar,
        OnlyUnderCCollation,
        SizeRule::CharTypmod,
        COLLATED
    ),
    scalar!(
        oid::BPCHAR,
        "bpchar",
        Bpchar,
        OnlyUnderCCollation,
        SizeRule::CharTypmod,
        COLLATED
    ),
    scalar!(
        oid::BYTEA,
        "bytea",
        Bytea,
        Preserving,
        SizeRule::Unbounded,
        NONE
    ),
    scalar!(
        oid::UUID,
        "uuid",
        Uuid,
        Preserving,
        SizeRule::Fixed(16),
        NONE
    ),
    scalar!(
        oid::DATE,
        "date",
        Date,
        Preserving,
        SizeRule::Fixed(4),
        NONE
    ),
    scalar!(
        oid::TIME,
        "time",
        Time,
        Preserving,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(
        oid::TIMESTAMP,
        "timestamp",
        Timestamp,
        Preserving,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(
        oid::TIMESTAMPTZ,
        "timestamptz",
        Timestamptz,
        Preserving,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(
        oid::TIMETZ,
        "timetz",
        Timetz,
        Preserving,
        SizeRule::Fixed(12),
        NONE
    ),
    scalar!(
        oid::INTERVAL,
        "interval",
        Interval,
        Preserving,
        SizeRule::Fixed(16),
        NONE
    ),
    scalar!(
        oid::INET,
        "inet",
        Inet,
        Preserving,
        SizeRule::Fixed(34),
        NONE
    ),
    scalar!(
        oid::CIDR,
        "cidr",
        Cidr,
        Preserving,
        SizeRule::Fixed(34),
        NONE
    ),
    scalar!(
        oid::MACADDR,
        "macaddr",
        Macaddr,
        Preserving,
        SizeRule::Fixed(6),
        NONE
    ),
    scalar!(
        oid::MACADDR8,
        "macaddr8",
        Macaddr8,
        Preserving,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(oid::BIT, "bit", Bit, Preserving, SizeRule::BitTypmod, NONE),
    scalar!(
        oid::VARBIT,
        "varbit",
        Varbit,
        Preserving,
        SizeRule::BitTypmod,
        NONE
    ),
];

/// The contract of enum types (one for all: labels, not OIDs, are encoded).
pub const ENUM: Entry = Entry {
    oid: 0,
    name: "enum",
    tag: TypeTag::Enum,
    order: OrderClaim::NotPreserving,
    volatility: Volatility::Stable,
    size: SizeRule::EnumLabel,
    ddl_invalidations: &[Invalidation::EnumLabelOrOrder],
    supported_majors: SUPPORTED_MAJORS,
};

const fn structural(
    name: &'static str,
    tag: TypeTag,
    order: OrderClaim,
    ddl_invalidations: &'static [Invalidation],
) -> Entry {
    Entry {
        oid: 0,
        name,
        tag,
        order,
        volatility: Volatility::Immutable,
        size: SizeRule::Structural,
        ddl_invalidations,
        supported_majors: SUPPORTED_MAJORS,
    }
}

/// Arrays of any supported element type (spec/wire-format.md §6.3). Volatility, size and
/// invalidations combine with the element type's (spec/registry.md §2.8).
pub const ARRAY: Entry = structural("array", TypeTag::Array, OrderClaim::WhenComponentsAre, NONE);

/// Ranges over any supported subtype (spec/wire-format.md §6.4).
pub const RANGE: Entry = structural("range", TypeTag::Range, OrderClaim::WhenComponentsAre, NONE);

/// Multiranges over any supported subtype (spec/wire-format.md §6.5).
pub const MULTIRANGE: Entry = structural(
    "multirange",
    TypeTag::Multirange,
    OrderClaim::WhenComponentsAre,
    NONE,
);

/// Named composite types whose attributes are all supported (spec/wire-format.md §6.7).
pub const RECORD: Entry = structural(
    "record",
    TypeTag::Record,
    OrderClaim::WhenComponentsAre,
    &[Invalidation::CompositeAlteration],
);

/// `jsonb` (spec/wire-format.md §6.6): equality only.
pub const JSONB: Entry = Entry {
    oid: oid::JSONB,
    ..structural("jsonb", TypeTag::Jsonb, OrderClaim::NotPreserving, NONE)
};

/// The built-in entry for `oid`.
pub fn builtin(oid: u32) -> Option<&'static Entry> {
    if oid == JSONB.oid {
        return Some(&JSONB);
    }
    BUILTINS.iter().find(|e| e.oid == oid)
}
