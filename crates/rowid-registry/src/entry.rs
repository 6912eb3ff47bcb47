//! Registry entries: the contract of each supported type (spec/registry.md §2).

use rowid_codec::TypeTag;

use crate::catalog::oid;

/// PostgreSQL majors whose contracts are verified against running servers by
/// `cargo xtask test` (spec/registry.md §2.6).
pub const SUPPORTED_MAJORS: &[u32] = &[15, 16, 17, 18];

/// Names of the tests that prove a claim: one against the codec's model of PostgreSQL's
/// operators, one against the operators of running servers (every supported major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    /// Test against the model (`rowid-codec/tests/properties.rs::agree_<type>`).
    pub model: &'static str,
    /// Test against the servers' `=` and `<` (`rowid-codec/tests/server_oracle.rs`, run by
    /// `cargo xtask test` on PostgreSQL 15, 16, 17 and 18).
    pub server: &'static str,
}

/// The server-side proof shared by every entry: one test covers all types, per major.
pub const SERVER_ORACLE: &str =
    "rowid-codec/tests/server_oracle.rs::server_operators_agree_with_the_codec";

/// The in-server proof of the structural families: generated pairs of arrays, ranges,
/// multiranges, jsonb and composites compared by the servers' `=`/`<` and encoded by
/// `pgtrickle.encode_row_id_v2`, on every supported major.
pub const STRUCTURAL_ORACLE: &str =
    "rowid-vectors/tests/structural_oracle.rs::servers_agree_on_structural_values";

/// Whether lexicographic payload order agrees with the type's default B-tree comparator for
/// non-NULL values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderClaim {
    /// Always (proof named).
    Preserving(Proof),
    /// Only when the field's collation is `C` or `POSIX` (proof named).
    OnlyUnderCCollation(Proof),
    /// A structural family: exactly when every component (element type, subtype, attribute)
    /// is order-preserving (proof named).
    WhenComponentsAre(Proof),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `pg_type.oid` of the concrete type.
    pub oid: u32,
    /// Type name.
    pub name: &'static str,
    /// Wire type tag.
    pub tag: TypeTag,
    /// Proof that PostgreSQL equality and byte equality agree in both directions.
    pub equality_canonical: Proof,
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

const fn proof(model: &'static str, server: &'static str) -> Proof {
    Proof { model, server }
}

macro_rules! scalar {
    ($oid:expr, $name:literal, $tag:ident, $order:ident, $size:expr, $inval:expr) => {
        Entry {
            oid: $oid,
            name: $name,
            tag: TypeTag::$tag,
            equality_canonical: proof(
                concat!("rowid-codec/tests/properties.rs::agree_", $name),
                SERVER_ORACLE,
            ),
            order: order_claim!($order, $name),
            volatility: Volatility::Immutable,
            size: $size,
            ddl_invalidations: $inval,
            supported_majors: SUPPORTED_MAJORS,
        }
    };
}

macro_rules! order_claim {
    (yes, $name:literal) => {
        OrderClaim::Preserving(proof(
            concat!("rowid-codec/tests/properties.rs::agree_", $name),
            SERVER_ORACLE,
        ))
    };
    (c_only, $name:literal) => {
        OrderClaim::OnlyUnderCCollation(proof(
            concat!("rowid-codec/tests/properties.rs::agree_", $name),
            SERVER_ORACLE,
        ))
    };
}

const NONE: &[Invalidation] = &[];
const COLLATED: &[Invalidation] = &[Invalidation::CollationChange];

/// Every built-in type the registry supports, by OID.
pub const BUILTINS: &[Entry] = &[
    scalar!(oid::BOOL, "bool", Bool, yes, SizeRule::Fixed(1), NONE),
    scalar!(oid::INT2, "int2", Int2, yes, SizeRule::Fixed(2), NONE),
    scalar!(oid::INT4, "int4", Int4, yes, SizeRule::Fixed(4), NONE),
    scalar!(oid::INT8, "int8", Int8, yes, SizeRule::Fixed(8), NONE),
    scalar!(oid::OID, "oid", Oid, yes, SizeRule::Fixed(4), NONE),
    scalar!(oid::FLOAT4, "float4", Float4, yes, SizeRule::Fixed(4), NONE),
    scalar!(oid::FLOAT8, "float8", Float8, yes, SizeRule::Fixed(8), NONE),
    scalar!(
        oid::NUMERIC,
        "numeric",
        Numeric,
        yes,
        SizeRule::NumericTypmod,
        NONE
    ),
    scalar!(
        oid::TEXT,
        "text",
        Text,
        c_only,
        SizeRule::Unbounded,
        COLLATED
    ),
    scalar!(
        oid::VARCHAR,
        "varchar",
        Varchar,
        c_only,
        SizeRule::CharTypmod,
        COLLATED
    ),
    scalar!(
        oid::BPCHAR,
        "bpchar",
        Bpchar,
        c_only,
        SizeRule::CharTypmod,
        COLLATED
    ),
    scalar!(oid::BYTEA, "bytea", Bytea, yes, SizeRule::Unbounded, NONE),
    scalar!(oid::UUID, "uuid", Uuid, yes, SizeRule::Fixed(16), NONE),
    scalar!(oid::DATE, "date", Date, yes, SizeRule::Fixed(4), NONE),
    scalar!(oid::TIME, "time", Time, yes, SizeRule::Fixed(8), NONE),
    scalar!(
        oid::TIMESTAMP,
        "timestamp",
        Timestamp,
        yes,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(
        oid::TIMESTAMPTZ,
        "timestamptz",
        Timestamptz,
        yes,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(
        oid::TIMETZ,
        "timetz",
        Timetz,
        yes,
        SizeRule::Fixed(12),
        NONE
    ),
    scalar!(
        oid::INTERVAL,
        "interval",
        Interval,
        yes,
        SizeRule::Fixed(16),
        NONE
    ),
    scalar!(oid::INET, "inet", Inet, yes, SizeRule::Fixed(34), NONE),
    scalar!(oid::CIDR, "cidr", Cidr, yes, SizeRule::Fixed(34), NONE),
    scalar!(
        oid::MACADDR,
        "macaddr",
        Macaddr,
        yes,
        SizeRule::Fixed(6),
        NONE
    ),
    scalar!(
        oid::MACADDR8,
        "macaddr8",
        Macaddr8,
        yes,
        SizeRule::Fixed(8),
        NONE
    ),
    scalar!(oid::BIT, "bit", Bit, yes, SizeRule::BitTypmod, NONE),
    scalar!(
        oid::VARBIT,
        "varbit",
        Varbit,
        yes,
        SizeRule::BitTypmod,
        NONE
    ),
];

/// The contract of enum types (one for all: labels, not OIDs, are encoded).
pub const ENUM: Entry = Entry {
    oid: 0,
    name: "enum",
    tag: TypeTag::Enum,
    equality_canonical: proof("rowid-codec/tests/properties.rs::agree_enum", SERVER_ORACLE),
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
        equality_canonical: STRUCTURAL_PROOF,
        order,
        volatility: Volatility::Immutable,
        size: SizeRule::Structural,
        ddl_invalidations,
        supported_majors: SUPPORTED_MAJORS,
    }
}

const STRUCTURAL_PROOF: Proof = proof(
    "rowid-codec/tests/structures.rs (model of array_cmp, range_cmp, multirange_cmp, \
     record_cmp, jsonb equality)",
    STRUCTURAL_ORACLE,
);

/// Arrays of any supported element type (spec/wire-format.md §6.3). Volatility, size and
/// invalidations combine with the element type's (spec/registry.md §2.8).
pub const ARRAY: Entry = structural(
    "array",
    TypeTag::Array,
    OrderClaim::WhenComponentsAre(STRUCTURAL_PROOF),
    NONE,
);

/// Ranges over any supported subtype (spec/wire-format.md §6.4).
pub const RANGE: Entry = structural(
    "range",
    TypeTag::Range,
    OrderClaim::WhenComponentsAre(STRUCTURAL_PROOF),
    NONE,
);

/// Multiranges over any supported subtype (spec/wire-format.md §6.5).
pub const MULTIRANGE: Entry = structural(
    "multirange",
    TypeTag::Multirange,
    OrderClaim::WhenComponentsAre(STRUCTURAL_PROOF),
    NONE,
);

/// Named composite types whose attributes are all supported (spec/wire-format.md §6.7).
pub const RECORD: Entry = structural(
    "record",
    TypeTag::Record,
    OrderClaim::WhenComponentsAre(STRUCTURAL_PROOF),
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
