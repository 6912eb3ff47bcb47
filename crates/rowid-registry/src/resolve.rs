//! Resolution: a field's catalog description to its registry contract, or a rejection
//! (spec/registry.md §2, §4).

use rowid_codec::limits::MAX_FIELDS;
use rowid_codec::{Domain, TypeTag};

use rowid_codec::structure::Shape;

use crate::catalog::{Collation, FieldSpec, OpClass, ServerContext, TypeRef, oid};
use crate::entry::{self, Entry, Invalidation, OrderClaim, SUPPORTED_MAJORS, Volatility};
use crate::error::{FieldContext, Property, Rejection, Rejections};
use crate::size::{FIELD_OVERHEAD, IDENTITY_OVERHEAD, payload_bound};

/// A field whose contract is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedField {
    /// The expression, as given (for a source relation's identity: the column name).
    pub expr: String,
    /// `pg_type.oid` of the field's declared type (a domain's own OID): what a Relation
    /// message in the WAL must send for this column.
    pub type_oid: u32,
    /// Type name (a domain shows as `domain (base)`).
    pub type_name: String,
    /// Wire type tag.
    pub tag: TypeTag,
    /// The field's type, recursively (element types, subtypes, attributes): what a reader of
    /// send formats or Datums needs.
    pub shape: Shape,
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
        oid::XML => "xml has no equality operator",
        oid::POINT => "geometric types have no B-tree equality",
        oid::NAME => "name is not registered; cast to text",
        oid::CHAR => "\"char\" is not registered; cast to text",
        _ => "no registry entry proves an encoder for this type",
    }
}

/// Resolves one field against the registry, for the server described by `ctx`. Structural
/// types resolve recursively (spec/registry.md §2.8): the element type, subtype or every
/// attribute must resolve, and the field combines their properties.
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
    let node = resolve_type(
        field,
        ctx,
        &field.ty,
        field.typmod,
        field.collation.as_ref(),
        "",
    )?;
    let mut invalidations = node.invalidations;
    invalidations.push(Invalidation::TypeChange);
    invalidations.sort();
    invalidations.dedup();
    Ok(ResolvedField {
        expr: field.expr.clone(),
        type_oid: field.ty.oid(),
        type_name: node.type_name,
        tag: node.shape.tag(),
        shape: node.shape,
        order_preserving: node.order_preserving,
        volatility: node.volatility,
        max_encoded_len: node.payload_bound.map(|p| p + FIELD_OVERHEAD),
        invalidations,
    })
}

/// A resolved type, at any nesting level.
struct Node {
    type_name: String,
    shape: Shape,
    order_preserving: bool,
    volatility: Volatility,
    /// Worst-case payload size (no tag or state); `None` when unbounded.
    payload_bound: Option<usize>,
    invalidations: Vec<Invalidation>,
}

/// `where_` names the nesting position for messages (`"element of int4[]: "`).
fn resolve_type(
    field: &FieldSpec,
    ctx: &ServerContext,
    ty: &TypeRef,
    typmod: i32,
    collation: Option<&Collation>,
    where_: &str,
) -> Result<Node, Rejection> {
    let nested =
        |inner: &TypeRef, what: &str| format!("{where_}{what} {} of {}: ", inner.name(), ty.name());
    match ty {
        TypeRef::Builtin { oid: o, name } => match entry::builtin(*o) {
            Some(e) => scalar_node(field, ctx, e, name.clone(), typmod, collation, where_),
            None => Err(reject(
                field,
                Property::UnregisteredType,
                format!("{where_}{}", unsupported_reason(*o)),
            )),
        },
        TypeRef::Enum { name, .. } => scalar_node(
            field,
            ctx,
            &entry::ENUM,
            name.clone(),
            typmod,
            collation,
            where_,
        ),
        TypeRef::Domain { name, base, .. } => {
            let mut n = resolve_type(field, ctx, base, typmod, collation, where_)?;
            n.type_name = format!("{name} ({})", n.type_name);
            n.invalidations.push(Invalidation::DomainOrBaseType);
            Ok(n)
        }
        TypeRef::Array { name, element, .. } => {
            let e = resolve_type(
                field,
                ctx,
                element,
                typmod,
                collation,
                &nested(element, "element type"),
            )?;
            Ok(Node {
                type_name: name.clone(),
                shape: Shape::Array(Box::new(e.shape)),
                order_preserving: e.order_preserving,
                volatility: e.volatility,
                payload_bound: None,
                invalidations: with(e.invalidations, &entry::ARRAY),
            })
        }
        TypeRef::Range {
            name,
            subtype,
            collation: range_collation,
            ..
        } => {
            let s = resolve_type(
                field,
                ctx,
                subtype,
                -1,
                range_collation.as_ref(),
                &nested(subtype, "subtype"),
            )?;
            Ok(Node {
                type_name: name.clone(),
                payload_bound: s.payload_bound.map(range_bound),
                shape: Shape::Range(Box::new(s.shape)),
                order_preserving: s.order_preserving,
                volatility: s.volatility,
                invalidations: with(s.invalidations, &entry::RANGE),
            })
        }
        TypeRef::Multirange { name, range, .. } => {
            let r = resolve_type(field, ctx, range, -1, None, &nested(range, "range type"))?;
            let Shape::Range(subtype) = r.shape else {
                return Err(reject(
                    field,
                    Property::StructuralType,
                    format!("{where_}multirange {name} is not over a range type"),
                ));
            };
            Ok(Node {
                type_name: name.clone(),
                shape: Shape::Multirange(subtype),
                order_preserving: r.order_preserving,
                volatility: r.volatility,
                payload_bound: None,
                invalidations: with(r.invalidations, &entry::MULTIRANGE),
            })
        }
        TypeRef::Composite { name, fields, .. } => {
            if fields.len() > MAX_FIELDS as usize {
                return Err(reject(
                    field,
                    Property::TooManyFields,
                    format!("{where_}composite {name} has {} attributes", fields.len()),
                ));
            }
            let mut shapes = Vec::with_capacity(fields.len());
            let mut order_preserving = true;
            let mut volatility = entry::RECORD.volatility;
            let mut payload_bound = Some(COMPOSITE_COUNT_LEN);
            let mut invalidations = entry::RECORD.ddl_invalidations.to_vec();
            for f in fields {
                let n = resolve_type(
                    field,
                    ctx,
                    &f.ty,
                    f.typmod,
                    f.collation.as_ref(),
                    &format!("{where_}attribute {} of {name}: ", f.name),
                )?;
                order_preserving &= n.order_preserving;
                volatility = volatility.max(n.volatility);
                payload_bound = payload_bound
                    .zip(n.payload_bound)
                    .and_then(|(acc, p)| acc.checked_add(p + FIELD_OVERHEAD));
                invalidations.extend(n.invalidations);
                shapes.push(n.shape);
            }
            Ok(Node {
                type_name: name.clone(),
                shape: Shape::Record(shapes),
                order_preserving,
                volatility,
                payload_bound,
                invalidations,
            })
        }
        TypeRef::AnonymousRecord => Err(reject(
            field,
            Property::StructuralType,
            format!(
                "{where_}an anonymous record's columns are known only per value; cast it to a \
                 named composite type"
            ),
        )),
        TypeRef::Other { oid: o, .. } => Err(reject(
            field,
            Property::UnregisteredType,
            format!("{where_}{}", unsupported_reason(*o)),
        )),
    }
}

/// `invalidations` plus the family entry's own.
fn with(mut invalidations: Vec<Invalidation>, family: &Entry) -> Vec<Invalidation> {
    invalidations.extend_from_slice(family.ddl_invalidations);
    invalidations
}

/// Bytes of a composite's field count (spec/wire-format.md §6.7).
const COMPOSITE_COUNT_LEN: usize = 2;

/// Worst-case range payload for a subtype payload bound: subtype tag, state, and two bounds
/// of marker, value and inclusivity byte (spec/wire-format.md §6.4).
fn range_bound(subtype_payload: usize) -> usize {
    2 + 2 * (subtype_payload + 2)
}

/// A scalar or enum entry at any nesting level, with the collation rules of §2.3.
fn scalar_node(
    field: &FieldSpec,
    ctx: &ServerContext,
    entry: &'static Entry,
    type_name: String,
    typmod: i32,
    collation: Option<&Collation>,
    where_: &str,
) -> Result<Node, Rejection> {
    let collatable = matches!(
        entry.tag,
        TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar
    );
    let order_preserving = match entry.order {
        OrderClaim::Preserving | OrderClaim::WhenComponentsAre => true,
        OrderClaim::NotPreserving => false,
        OrderClaim::OnlyUnderCCollation => collation.is_some_and(|c| c.is_c_or_posix()),
    };
    if collatable {
        match collation {
            None => {
                return Err(reject(
                    field,
                    Property::UnknownCollation,
                    format!("{where_}a collatable identity field needs its resolved collation"),
                ));
            }
            Some(c) if !c.deterministic => {
                return Err(reject(
                    field,
                    Property::NonDeterministicCollation,
                    format!(
                        "{where_}distinct byte strings can compare equal under collation {:?}; \
                         use a deterministic collation (for example COLLATE \"C\")",
                        c.name
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(Node {
        type_name,
        shape: if entry.tag == TypeTag::Jsonb {
            Shape::Jsonb
        } else {
            Shape::Scalar(entry.tag)
        },
        order_preserving,
        volatility: entry.volatility,
        payload_bound: payload_bound(entry.size, typmod, ctx.max_char_bytes),
        invalidations: entry.ddl_invalidations.to_vec(),
    })
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
