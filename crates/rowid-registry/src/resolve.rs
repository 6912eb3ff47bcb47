//! Resolution: a field's catalog description to its registry contract, or a rejection
//! (spec/registry.md §2, §4).

use rowid_codec::limits::MAX_FIELDS;
use rowid_codec::{Domain, TypeTag};

use crate::catalog::{FieldSpec, OpClass, ServerContext, TypeRef, oid};
use crate::entry::{self, Entry, Invalidation, OrderClaim, SUPPORTED_MAJORS, Volatility};
use crate::error::{FieldContext, Property, Rejection, Rejections};
use crate::size::{FIELD_OVERHEAD, IDENTITY_OVERHEAD, payload_bound};

/// A field whose contract is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedField {
    /// The expression, as given.
    pub expr: String,
    /// Type name (a domain shows as `domain (base)`).
    pub type_name: String,
    /// Wire type tag.
    pub tag: TypeTag,
    /// Whether payload order is the default B-tree order for this field (after the
    /// collation is taken into account).
    pub order_preserving: bool,
    /// Volatility of the encoding.
    pub volatility: Volatility,
    /// Worst-case encoded field size (tag and state included); `None` when unbounded.
    pub max_encoded_len: Option<usize>,
    /// Catalog changes that invalidate this field's contract, sorted.
    pub invalidations: Vec<Invalidation>,
}

impl ResolvedField {
    /// A child identity field (JOIN_KEY / SET_KEY / WINDOW_KEY components) holding identities
    /// of the given child schema.
    pub fn child_identity(expr: &str, child: &IdentitySchema) -> ResolvedField {
        ResolvedField {
            expr: expr.to_string(),
            type_name: format!("identity ({})", child.domain.name()),
            tag: TypeTag::ChildIdentity,
            order_preserving: child.order_preserving(),
            volatility: child.volatility(),
            max_encoded_len: crate::size::child_identity_bound(child.max_encoded_len()),
            invalidations: child.invalidations(),
        }
    }
}

/// A resolved identity schema: its domain and fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySchema {
    /// Domain of the identities.
    pub domain: Domain,
    /// Fields in order.
    pub fields: Vec<ResolvedField>,
}

impl IdentitySchema {
    /// Worst-case encoded identity size; `None` if any field is unbounded.
    pub fn max_encoded_len(&self) -> Option<usize> {
        self.fields.iter().try_fold(IDENTITY_OVERHEAD, |acc, f| {
            acc.checked_add(f.max_encoded_len?)
        })
    }

    /// Stable if any field is stable.
    pub fn volatility(&self) -> Volatility {
        self.fields
            .iter()
            .map(|f| f.volatility)
            .max()
            .unwrap_or(Volatility::Immutable)
    }

    /// True when every field is order-preserving.
    pub fn order_preserving(&self) -> bool {
        self.fields.iter().all(|f| f.order_preserving)
    }

    /// Union of the fields' invalidations, sorted.
    pub fn invalidations(&self) -> Vec<Invalidation> {
        let mut all: Vec<_> = self
            .fields
            .iter()
            .flat_map(|f| f.invalidations.iter().copied())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

fn reject(field: &FieldSpec, property: Property, detail: impl Into<String>) -> Rejection {
    Rejection {
        property,
        field: Some(Box::new(FieldContext {
            expr: field.expr.clone(),
            type_name: field.ty.name().to_string(),
            collation: field.collation.as_ref().map(|c| c.name.clone()),
            opclass: match &field.opclass {
                OpClass::Default => None,
                OpClass::NonDefault(name) => Some(name.clone()),
            },
        })),
        detail: detail.into(),
    }
}

/// Why a known but unsupported built-in type is rejected.
fn unsupported_reason(oid_value: u32) -> &'static str {
    match oid_value {
        oid::MONEY => "money output and arithmetic depend on lc_monetary; use numeric",
        oid::JSON => "json keeps its input text (key order, whitespace, duplicates); use jsonb",
        oid::JSONB => "jsonb needs the structural encoder, not yet supported",
        oid::XML => "xml has no equality operator",
        oid::POINT => "geometric types have no B-tree equality",
        oid::NAME => "name is not registered; cast to text",
        oid::CHAR => "\"char\" is not registered; cast to text",
        _ => "no registry entry proves an encoder for this type",
    }
}

/// Resolves one field against the registry, for the server described by `ctx`.
pub fn resolve_field(field: &FieldSpec, ctx: &ServerContext) -> Result<ResolvedField, Rejection> {
    if !SUPPORTED_MAJORS.contains(&ctx.pg_major) {
        return Err(reject(
            field,
            Property::UnsupportedMajor,
            format!(
                "contracts are verified on PostgreSQL {SUPPORTED_MAJORS:?}, not {}",
                ctx.pg_major
            ),
        ));
    }
    if let OpClass::NonDefault(name) = &field.opclass {
        return Err(reject(
            field,
            Property::NonDefaultOperatorClass,
            format!("no registry entry proves that {name}'s equality agrees with V2 bytes"),
        ));
    }
    let (entry, type_name, domain_levels) = base_entry(field, &field.ty, 0)?;
    let mut invalidations: Vec<Invalidation> = entry.ddl_invalidations.to_vec();
    invalidations.push(Invalidation::TypeChange);
    if domain_levels > 0 {
        invalidations.push(Invalidation::DomainOrBaseType);
    }
    let collatable = matches!(
        entry.tag,
        TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar
    );
    let order_preserving = match entry.order {
        OrderClaim::Preserving(_) => true,
        OrderClaim::NotPreserving => false,
        OrderClaim::OnlyUnderCCollation(_) => {
            field.collation.as_ref().is_some_and(|c| c.is_c_or_posix())
        }
    };
    if collatable {
        match &field.collation {
            None => {
                return Err(reject(
                    field,
                    Property::UnknownCollation,
                    "a collatable identity field needs its resolved collation",
                ));
            }
            Some(c) if !c.deterministic => {
                return Err(reject(
                    field,
                    Property::NonDeterministicCollation,
                    "distinct byte strings can compare equal; use a deterministic collation \
                     (for example COLLATE \"C\")",
                ));
            }
            Some(_) => {}
        }
    }
    invalidations.sort();
    invalidations.dedup();
    Ok(ResolvedField {
        expr: field.expr.clone(),
        type_name,
        tag: entry.tag,
        order_preserving,
        volatility: entry.volatility,
        max_encoded_len: payload_bound(entry.size, field.typmod, ctx.max_char_bytes)
            .map(|p| p + FIELD_OVERHEAD),
        invalidations,
    })
}

/// The entry a type resolves to, following domains; returns the display name and the number
/// of domain levels crossed.
fn base_entry(
    field: &FieldSpec,
    ty: &TypeRef,
    levels: u32,
) -> Result<(&'static Entry, String, u32), Rejection> {
    match ty {
        TypeRef::Builtin { oid: o, name } => match entry::builtin(*o) {
            Some(e) => Ok((e, name.clone(), levels)),
            None => Err(reject(
                field,
                Property::UnregisteredType,
                unsupported_reason(*o),
            )),
        },
        TypeRef::Enum { name } => Ok((&entry::ENUM, name.clone(), levels)),
        TypeRef::Domain { name, base } => {
            let (e, base_name, n) = base_entry(field, base, levels + 1)?;
            Ok((e, format!("{name} ({base_name})"), n))
        }
        TypeRef::Array { .. }
        | TypeRef::Range { .. }
        | TypeRef::Multirange { .. }
        | TypeRef::Composite { .. } => Err(reject(
            field,
            Property::StructuralType,
            "arrays, ranges, multiranges and composites have no registry entry yet",
        )),
        TypeRef::Other { oid: o, .. } => Err(reject(
            field,
            Property::UnregisteredType,
            unsupported_reason(*o),
        )),
    }
}

/// Resolves every field of a schema; all rejections are reported together.
pub fn resolve_schema(
    domain: Domain,
    fields: &[FieldSpec],
    ctx: &ServerContext,
) -> Result<IdentitySchema, Rejections> {
    if fields.len() > MAX_FIELDS as usize {
        return Err(Rejections(vec![Rejection::general(
            Property::TooManyFields,
            format!(
                "{} fields; the wire format allows {MAX_FIELDS}",
                fields.len()
            ),
        )]));
    }
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for f in fields {
        match resolve_field(f, ctx) {
            Ok(r) => ok.push(r),
            Err(e) => bad.push(e),
        }
    }
    if bad.is_empty() {
        Ok(IdentitySchema { domain, fields: ok })
    } else {
        Err(Rejections(bad))
    }
}
