//! Validation: resolve an identity and plan its index before anything is created.
//!
//! Both functions only read catalogs (`catalog`) and return the plan; a rejection is raised
//! (`errors`) naming the field, type, collation/opclass and property, with the registry's
//! SQLSTATE (feature_not_supported or invalid_parameter_value).

use pgrx::prelude::*;
use rowid_codec::Domain;
use rowid_codec::probe::PROBE_V1_PREFIX_LEN;
use rowid_registry::sql::{QualifiedName, index_ddl};
use rowid_registry::{
    FieldSpec, IdentitySchema, IndexClass, IndexPlan, MaintenanceMode, OpClass, Rejections,
    Uniqueness, choose_scan_key, plan_index, resolve_schema,
};

use crate::catalog::{
    all_columns, collation, index_candidates, relation_facts, server_context, type_collation,
    type_ref,
};
use crate::errors;

const FIELDS: &str = "pgtrickle.validate_identity_fields";
const SOURCE: &str = "pgtrickle.validate_source_identity";

fn domain_of(function: &str, name: &str) -> Domain {
    Domain::from_name(name).unwrap_or_else(|| {
        errors::invalid_argument(function, format!("unknown identity domain {name:?}"))
    })
}

fn uniqueness_of(function: &str, name: &str) -> Uniqueness {
    match name {
        "unique" => Uniqueness::Unique,
        "multiset" => Uniqueness::Multiset,
        _ => errors::invalid_argument(
            function,
            format!("uniqueness must be 'unique' or 'multiset', not {name:?}"),
        ),
    }
}

fn mode_of(function: &str, name: &str) -> MaintenanceMode {
    match name {
        "refresh" => MaintenanceMode::Refresh,
        "immediate" => MaintenanceMode::Immediate,
        _ => errors::invalid_argument(
            function,
            format!("mode must be 'refresh' or 'immediate', not {name:?}"),
        ),
    }
}

/// The first rejection of a schema that did not resolve.
fn first_rejection(function: &str, r: Rejections) -> ! {
    match r.0.first() {
        Some(first) => errors::rejected(function, first),
        None => errors::invalid_argument(function, "empty rejection".into()),
    }
}

fn plan(
    function: &str,
    schema: &IdentitySchema,
    uniqueness: Uniqueness,
    mode: MaintenanceMode,
) -> IndexPlan {
    plan_index(
        schema,
        uniqueness,
        mode,
        server_context().block_size,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap_or_else(|r| errors::rejected(function, &r))
}

fn class_name(plan: &IndexPlan) -> String {
    match plan.class {
        IndexClass::DirectUnique => "direct_unique",
        IndexClass::DirectNonUnique => "direct_non_unique",
        IndexClass::ProbeExpression => "probe_expression",
    }
    .to_string()
}

type PlanRow = (
    name!(max_identity_bytes, Option<i64>),
    name!(index_class, String),
    name!(order_preserving, bool),
    name!(volatility, String),
    name!(invalidations, Vec<String>),
);

fn plan_row(schema: &IdentitySchema, plan: &IndexPlan) -> PlanRow {
    (
        schema.max_encoded_len().map(|b| b as i64),
        class_name(plan),
        schema.order_preserving(),
        format!("{:?}", schema.volatility()).to_lowercase(),
        schema
            .invalidations()
            .iter()
            .map(|i| format!("{i:?}"))
            .collect(),
    )
}

/// Validates a list of identity field types (for derived identities) and returns its plan.
// pgrx needs the TableIterator row spelled out in the signature (no type alias).
#[allow(clippy::type_complexity)]
#[pg_extern(schema = "pgtrickle", stable, parallel_safe)]
fn validate_identity_fields(
    domain: &str,
    types: Vec<pg_sys::Oid>,
    typmods: default!(Option<Vec<i32>>, "NULL"),
    collations: default!(Option<Vec<pg_sys::Oid>>, "NULL"),
    uniqueness: default!(&str, "'unique'"),
    mode: default!(&str, "'refresh'"),
) -> TableIterator<
    'static,
    (
        name!(max_identity_bytes, Option<i64>),
        name!(index_class, String),
        name!(order_preserving, bool),
        name!(volatility, String),
        name!(invalidations, Vec<String>),
    ),
> {
    let fields: Vec<FieldSpec> = types
        .iter()
        .enumerate()
        .map(|(i, &t)| FieldSpec {
            expr: format!("field {}", i + 1),
            ty: type_ref(t, &collation),
            typmod: typmods
                .as_ref()
                .and_then(|m| m.get(i).copied())
                .unwrap_or(-1),
            collation: collations
                .as_ref()
                .and_then(|c| c.get(i).copied())
                .and_then(collation)
                // A collatable type without an explicit collation uses its default one.
                .or_else(|| type_collation(t)),
            opclass: OpClass::Default,
        })
        .collect();
    let domain = domain_of(FIELDS, domain);
    let schema = resolve_schema(domain, &fields, &server_context())
        .unwrap_or_else(|r| first_rejection(FIELDS, r));
    let plan = plan(
        FIELDS,
        &schema,
        uniqueness_of(FIELDS, uniqueness),
        mode_of(FIELDS, mode),
    );
    TableIterator::once(plan_row(&schema, &plan))
}

/// Validates the row identity of a source relation: the SCAN_KEY it would use (or, unless
/// `require_key`, the keyless rule when no index is eligible), every field's contract, and
/// the storage index plan for this cluster's block size. Creates nothing. With
/// `require_key` (a mode that needs a unique identity), no eligible index is an error
/// listing every candidate and why it was passed over.
// pgrx needs the TableIterator row spelled out in the signature (no type alias).
#[allow(clippy::type_complexity)]
#[pg_extern(schema = "pgtrickle", stable)]
fn validate_source_identity(
    rel: pg_sys::Oid,
    mode: default!(&str, "'refresh'"),
    require_key: default!(bool, false),
) -> TableIterator<
    'static,
    (
        name!(identity, String),
        name!(index_name, Option<String>),
        name!(key_columns, Vec<String>),
        name!(max_identity_bytes, Option<i64>),
        name!(index_class, String),
        name!(index_ddl, String),
        name!(passed_over, Vec<String>),
    ),
> {
    let mode = mode_of(SOURCE, mode);
    let ctx = server_context();
    let Some(facts) = relation_facts(rel) else {
        errors::invalid_argument(SOURCE, format!("OID {} is not a table", u32::from(rel)));
    };
    let table = QualifiedName::new(&facts.namespace, &format!("{}_storage", facts.relname));
    let (identity, index, columns, schema, uniqueness, passed) =
        match choose_scan_key(&index_candidates(rel), &ctx) {
            Ok(key) => (
                "SCAN_KEY".to_string(),
                Some(key.index.clone()),
                key.columns.clone(),
                key.schema,
                Uniqueness::Unique,
                key.passed_over,
            ),
            Err(none) if require_key => errors::rejected(SOURCE, &none.rejection),
            Err(none) => {
                let fields = all_columns(rel);
                let names = fields.iter().map(|f| f.expr.clone()).collect();
                let schema = resolve_schema(Domain::KeylessRow, &fields, &ctx)
                    .unwrap_or_else(|r| first_rejection(SOURCE, r));
                (
                    "KEYLESS_ROW".to_string(),
                    None,
                    names,
                    schema,
                    Uniqueness::Multiset,
                    none.candidates,
                )
            }
        };
    let plan = plan(SOURCE, &schema, uniqueness, mode);
    let ddl = index_ddl(plan.class, &format!("{}_row_id", table.name), &table);
    TableIterator::once((
        identity,
        index,
        columns,
        schema.max_encoded_len().map(|b| b as i64),
        class_name(&plan),
        ddl,
        passed
            .iter()
            .map(|p| format!("{}: {}", p.index, p.reason))
            .collect(),
    ))
}
