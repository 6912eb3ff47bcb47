//! Catalog facts as plain data: what the caller (the extension, or a Rust tool reading the
//! catalogs) knows about an identity field. Runtime OIDs only select a registry entry; they
//! never reach identity bytes.

/// Built-in type OIDs (stable across PostgreSQL majors: assigned in `pg_type.dat`).
pub mod oid {
    #![allow(missing_docs)]
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const CHAR: u32 = 18;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const OID: u32 = 26;
    pub const JSON: u32 = 114;
    pub const XML: u32 = 142;
    pub const POINT: u32 = 600;
    pub const CIDR: u32 = 650;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const MACADDR8: u32 = 774;
    pub const MONEY: u32 = 790;
    pub const MACADDR: u32 = 829;
    pub const INET: u32 = 869;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const TIMETZ: u32 = 1266;
    pub const BIT: u32 = 1560;
    pub const VARBIT: u32 = 1562;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
    pub const RECORD: u32 = 2249;
}

/// The concrete type of a field, with the nested metadata resolution needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeRef {
    /// A built-in base type, by OID, with its name for messages.
    Builtin {
        /// `pg_type.oid`.
        oid: u32,
        /// `format_type` name.
        name: String,
    },
    /// A domain over `base`.
    Domain {
        /// `pg_type.oid` of the domain.
        oid: u32,
        /// Domain name.
        name: String,
        /// Its base type.
        base: Box<TypeRef>,
    },
    /// An enum type (labels are encoded, never OIDs).
    Enum {
        /// `pg_type.oid`.
        oid: u32,
        /// Type name.
        name: String,
    },
    /// An array of `element`.
    Array {
        /// `pg_type.oid`.
        oid: u32,
        /// Type name.
        name: String,
        /// Element type.
        element: Box<TypeRef>,
    },
    /// A range over `subtype`.
    Range {
        /// `pg_type.oid`.
        oid: u32,
        /// Type name.
        name: String,
        /// Subtype.
        subtype: Box<TypeRef>,
        /// `pg_range.rngcollation`, for a collatable subtype.
        collation: Option<Collation>,
    },
    /// A multirange of `range`.
    Multirange {
        /// `pg_type.oid`.
        oid: u32,
        /// Type name.
        name: String,
        /// Range type.
        range: Box<TypeRef>,
    },
    /// A named composite (row) type.
    Composite {
        /// `pg_type.oid`.
        oid: u32,
        /// Type name.
        name: String,
        /// Its non-dropped attributes, in order.
        fields: Vec<CompositeField>,
    },
    /// The pseudo-type `record` (an anonymous `ROW(...)` nested in a field): its columns are
    /// known only per value, so no contract can be resolved for it.
    AnonymousRecord,
    /// Any other type (pseudo-types, base types of extensions, ...).
    Other {
        /// `pg_type.oid`.
        oid: u32,
        /// Type name.
        name: String,
    },
}

impl TypeRef {
    /// Every enum type in this type's tree (itself, a domain's base, an array's element, a
    /// range's subtype, a multirange's range, a composite's attributes), as (OID, name), each
    /// once, in the order met: what an identity of this type depends on besides the bytes of
    /// its values (an enum is encoded by its label).
    pub fn enums(&self) -> Vec<(u32, String)> {
        let mut found = Vec::new();
        self.collect_enums(&mut found);
        found
    }

    fn collect_enums(&self, found: &mut Vec<(u32, String)>) {
        match self {
            TypeRef::Enum { oid, name } => {
                if !found.iter().any(|(o, _)| o == oid) {
                    found.push((*oid, name.clone()));
                }
            }
            TypeRef::Domain { base, .. } => base.collect_enums(found),
            TypeRef::Array { element, .. } => element.collect_enums(found),
            TypeRef::Range { subtype, .. } => subtype.collect_enums(found),
            TypeRef::Multirange { range, .. } => range.collect_enums(found),
            TypeRef::Composite { fields, .. } => {
                for f in fields {
                    f.ty.collect_enums(found);
                }
            }
            TypeRef::Builtin { .. } | TypeRef::AnonymousRecord | TypeRef::Other { .. } => {}
        }
    }

    /// A built-in type with its usual name.
    pub fn builtin(oid: u32, name: &str) -> TypeRef {
        TypeRef::Builtin {
            oid,
            name: name.to_string(),
        }
    }

    /// `pg_type.oid` of this type (a domain's own OID, not its base type's). Runtime OIDs
    /// select registry entries and let the WAL path check a column's type; they never reach
    /// identity bytes.
    pub fn oid(&self) -> u32 {
        match self {
            TypeRef::Builtin { oid, .. }
            | TypeRef::Domain { oid, .. }
            | TypeRef::Enum { oid, .. }
            | TypeRef::Array { oid, .. }
            | TypeRef::Range { oid, .. }
            | TypeRef::Multirange { oid, .. }
            | TypeRef::Composite { oid, .. }
            | TypeRef::Other { oid, .. } => *oid,
            TypeRef::AnonymousRecord => oid::RECORD,
        }
    }

    /// The type's name as messages show it.
    pub fn name(&self) -> &str {
        match self {
            TypeRef::Builtin { name, .. }
            | TypeRef::Domain { name, .. }
            | TypeRef::Enum { name, .. }
            | TypeRef::Array { name, .. }
            | TypeRef::Range { name, .. }
            | TypeRef::Multirange { name, .. }
            | TypeRef::Composite { name, .. }
            | TypeRef::Other { name, .. } => name,
            TypeRef::AnonymousRecord => "record",
        }
    }
}

/// One attribute of a composite type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompositeField {
    /// `attname`.
    pub name: String,
    /// `atttypid`, resolved.
    pub ty: TypeRef,
    /// `atttypmod`.
    pub typmod: i32,
    /// `attcollation`, for a collatable attribute.
    pub collation: Option<Collation>,
}

/// Collation provider (`pg_collation.collprovider`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollationProvider {
    /// `c`: libc.
    Libc,
    /// `i`: ICU.
    Icu,
    /// `b`: the built-in provider (PostgreSQL 17+).
    Builtin,
    /// `d`: the database default (resolve it to the database's provider when known).
    Default,
}

/// A field's resolved collation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collation {
    /// Collation name (`"C"`, `"default"`, `"en-x-icu"`, ...).
    pub name: String,
    /// Provider.
    pub provider: CollationProvider,
    /// `pg_collation.collisdeterministic`.
    pub deterministic: bool,
    /// The effective `LC_COLLATE` / locale (`"C"`, `"POSIX"`, `"en_US.UTF-8"`, `"und"`).
    pub locale: String,
}

impl Collation {
    /// The `C` collation.
    pub fn c() -> Collation {
        Collation::libc("C", "C")
    }

    /// A deterministic libc collation named `name` with locale `locale` (`"en_US"`,
    /// `"en_US.UTF-8"`).
    pub fn libc(name: &str, locale: &str) -> Collation {
        Collation {
            name: name.into(),
            provider: CollationProvider::Libc,
            deterministic: true,
            locale: locale.into(),
        }
    }

    /// True for the byte-order collations `C` and `POSIX` (libc, or the database default
    /// with such a locale). Only these make text order equal byte order.
    pub fn is_c_or_posix(&self) -> bool {
        matches!(
            self.provider,
            CollationProvider::Libc | CollationProvider::Default
        ) && matches!(self.locale.as_str(), "C" | "POSIX")
    }
}

/// The B-tree operator class (and so the equality operator family) a field is compared
/// with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// The type's default B-tree operator class.
    Default,
    /// A named non-default operator class.
    NonDefault(String),
}

/// One identity field as the catalogs describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// The expression or column, as errors name it.
    pub expr: String,
    /// Its type.
    pub ty: TypeRef,
    /// `atttypmod` / expression typmod; -1 when unconstrained.
    pub typmod: i32,
    /// The collation, for collatable types.
    pub collation: Option<Collation>,
    /// The operator class the identity's equality uses.
    pub opclass: OpClass,
}

impl FieldSpec {
    /// A field of a non-collatable type with the default operator class.
    pub fn new(expr: &str, ty: TypeRef, typmod: i32) -> FieldSpec {
        FieldSpec {
            expr: expr.to_string(),
            ty,
            typmod,
            collation: None,
            opclass: OpClass::Default,
        }
    }

    /// The same field with a collation.
    pub fn collate(mut self, collation: Collation) -> FieldSpec {
        self.collation = Some(collation);
        self
    }
}

/// Facts about the server that resolution and planning depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerContext {
    /// PostgreSQL major version (15, 16, ...).
    pub pg_major: u32,
    /// Maximum bytes per character of the database encoding (`pg_encoding_max_length`:
    /// 4 for UTF8, 1 for SQL_ASCII/LATIN1, 3 for EUC_JP, ...).
    pub max_char_bytes: u32,
    /// `SHOW block_size`.
    pub block_size: u32,
}

impl ServerContext {
    /// PostgreSQL 18, UTF8, 8 kB pages.
    pub const fn default_pg18() -> ServerContext {
        ServerContext {
            pg_major: 18,
            max_char_bytes: 4,
            block_size: 8192,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_are_found_at_any_depth_once_each() {
        let mood = || TypeRef::Enum {
            oid: 9001,
            name: "public.mood".into(),
        };
        let ty = TypeRef::Composite {
            oid: 9002,
            name: "public.pair".into(),
            fields: vec![
                CompositeField {
                    name: "m".into(),
                    ty: TypeRef::Array {
                        oid: 9003,
                        name: "public.mood[]".into(),
                        element: Box::new(mood()),
                    },
                    typmod: -1,
                    collation: None,
                },
                CompositeField {
                    name: "d".into(),
                    ty: TypeRef::Domain {
                        oid: 9004,
                        name: "public.shade".into(),
                        base: Box::new(TypeRef::Enum {
                            oid: 9005,
                            name: "public.colour".into(),
                        }),
                    },
                    typmod: -1,
                    collation: None,
                },
                CompositeField {
                    name: "again".into(),
                    ty: mood(),
                    typmod: -1,
                    collation: None,
                },
                CompositeField {
                    name: "n".into(),
                    ty: TypeRef::builtin(20, "bigint"),
                    typmod: -1,
                    collation: None,
                },
            ],
        };
        assert_eq!(
            ty.enums(),
            [
                (9001, "public.mood".to_string()),
                (9005, "public.colour".to_string())
            ]
        );
        assert!(TypeRef::builtin(25, "text").enums().is_empty());
    }
}
