//! Rejections: why an identity field, schema, index or source key cannot be used, naming the
//! expression, the resolved type, its collation/opclass and the property that failed.

use std::fmt;

/// The property a rejection is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Property {
    /// The type has no registry entry (no proven encoder).
    UnregisteredType,
    /// A structural type without a resolvable contract (an anonymous record, a multirange
    /// that is not over a range).
    StructuralType,
    /// A non-deterministic collation: distinct bytes can compare equal.
    NonDeterministicCollation,
    /// A collatable field without a known collation.
    UnknownCollation,
    /// A non-default operator class without a registry proof.
    NonDefaultOperatorClass,
    /// A PostgreSQL major the registry's contracts are not verified on.
    UnsupportedMajor,
    /// More fields than the wire format allows.
    TooManyFields,
    /// The block size is not a PostgreSQL block size.
    InvalidBlockSize,
    /// The worst-case probe does not fit a B-tree tuple on this cluster.
    ProbeDoesNotFit,
    /// A unique identity without a size bound cannot be maintained in IMMEDIATE mode.
    UniqueUnboundedImmediate,
    /// No index of the source relation can serve as a SCAN_KEY.
    NoEligibleSourceKey,
}

impl Property {
    /// Short name used in messages.
    pub const fn describe(self) -> &'static str {
        match self {
            Property::UnregisteredType => "type has no proven V2 encoder",
            Property::StructuralType => "anonymous structural type",
            Property::NonDeterministicCollation => "non-deterministic collation",
            Property::UnknownCollation => "collation unknown",
            Property::NonDefaultOperatorClass => "non-default operator class",
            Property::UnsupportedMajor => "PostgreSQL major version not verified",
            Property::TooManyFields => "too many identity fields",
            Property::InvalidBlockSize => "invalid block size",
            Property::ProbeDoesNotFit => "probe does not fit a B-tree tuple",
            Property::UniqueUnboundedImmediate => "unique unbounded identity in IMMEDIATE mode",
            Property::NoEligibleSourceKey => "no eligible source key",
        }
    }

    /// The SQLSTATE the extension raises for this property.
    pub const fn sqlstate(self) -> &'static str {
        match self {
            Property::InvalidBlockSize => "22023", // invalid_parameter_value
            _ => "0A000",                          // feature_not_supported
        }
    }
}

/// The field a rejection is about: expression, resolved type, collation, operator class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldContext {
    /// The identity expression.
    pub expr: String,
    /// The resolved type name.
    pub type_name: String,
    /// The collation name, when the field has one.
    pub collation: Option<String>,
    /// The non-default operator class, when one is used.
    pub opclass: Option<String>,
}

/// Why something was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The property that failed.
    pub property: Property,
    /// The field, when the rejection is about one field.
    pub field: Option<Box<FieldContext>>,
    /// What exactly is wrong, and what to do.
    pub detail: String,
}

impl Rejection {
    /// A rejection about the whole schema, index or relation.
    pub fn general(property: Property, detail: impl Into<String>) -> Rejection {
        Rejection {
            property,
            field: None,
            detail: detail.into(),
        }
    }

    /// SQLSTATE for the extension boundary.
    pub fn sqlstate(&self) -> &'static str {
        self.property.sqlstate()
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(field) = &self.field {
            write!(
                f,
                "identity field {:?} of type {}",
                field.expr, field.type_name
            )?;
            if let Some(c) = &field.collation {
                write!(f, " collation {c:?}")?;
            }
            if let Some(o) = &field.opclass {
                write!(f, " operator class {o}")?;
            }
            write!(f, ": ")?;
        }
        write!(f, "{}: {}", self.property.describe(), self.detail)
    }
}

impl std::error::Error for Rejection {}

/// Every rejection found while resolving a schema (all fields are checked, not just the
/// first failing one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejections(pub Vec<Rejection>);

impl fmt::Display for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejections {}
