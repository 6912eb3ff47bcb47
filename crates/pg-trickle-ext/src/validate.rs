//! Validation: resolve an identity and plan its index before anything is created.
//!
//! Both functions only read catalogs and return the plan; a rejection is raised as an SQL
//! error naming the field, type, collation/opclass and property, with the registry's
//! SQLSTATE (feature_not_supported or invalid_parameter_value).

use pgrx::prelude::*;
use pgrx::spi::SpiResult;
use rowid_codec::Domain;
use rowid_codec::probe::PROBE_V1_PREFIX_LEN;
use rowid_registry::sql::{QualifiedName, index_ddl};
use rowid_registry::{
    Collation, CollationProvider, FieldSpec, IdentitySchema, IndexCandidate, IndexPlan, KeyColumn,
    MaintenanceMode, OpClass, Rejection, Uniqueness, choose_scan_key, plan_index, resolve_schema,
};

use crate::catalog::{server_context, type_ref};

fn raise(r: &Rejection) -> ! {
    let code = if r.sqlstate() == "22023" {
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
    } else {
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED
    };
    ereport!(ERROR, code, format!("row identity V2: {r}"));
}

fn invalid(message: String) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        message
    );
}

fn spi<T>(r: SpiResult<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("{e}")
            );
        }
    }
}

/// A collation's facts from pg_collation (the database default resolved to the database's
/// provider and locale).
fn collation(oid: u32) -> Option<Collation> {
    if oid == 0 {
        return None;
    }
    let query = format!(
        "SELECT c.collname::text, \
                CASE WHEN c.collprovider = 'd' THEN d.datlocprovider::text ELSE c.collprovider::text END, \
                c.collisdeterministic, \
                CASE WHEN c.collprovider = 'd' THEN d.datcollate ELSE coalesce(c.collcollate, '') END \
         FROM pg_collation c, pg_database d \
         WHERE c.oid = {oid} AND d.datname = current_database()"
    );
    spi(Spi::connect(|c| {
        let rows = c.select(&query, None, &[])?;
        let mut out = None;
        for row in rows {
            let provider = match row.get::<String>(2)?.as_deref() {
                Some("c") => CollationProvider::Libc,
                Some("i") => CollationProvider::Icu,
                Some("b") => CollationProvider::Builtin,
                _ => CollationProvider::Default,
            };
            out = Some(Collation {
                name: row.get::<String>(1)?.unwrap_or_default(),
                provider,
                deterministic: row.get::<bool>(3)?.unwrap_or(false),
                locale: row.get::<String>(4)?.unwrap_or_default(),
            });
        }
        Ok(out)
    }))
}

fn domain_of(name: &str) -> Domain {
    Domain::from_name(name).unwrap_or_else(|| invalid(format!("unknown identity domain {name:?}")))
}

fn uniqueness_of(name: &str) -> Uniqueness {
    match name {
        "unique" => Uniqueness::Unique,
        "multiset" => Uniqueness::Multiset,
        _ => invalid(format!(
            "uniqueness must be 'unique' or 'multiset', not {name:?}"
        )),
    }
}

fn mode_of(name: &str) -> MaintenanceMode {
    match name {
        "refresh" => MaintenanceMode::Refresh,
        "immediate" => MaintenanceMode::Immediate,
        _ => invalid(format!(
            "mode must be 'refresh' or 'immediate', not {name:?}"
        )),
    }
}

fn plan(schema: &IdentitySchema, uniqueness: Uniqueness, mode: MaintenanceMode) -> IndexPlan {
    plan_index(
        schema,
        uniqueness,
        mode,
        server_context().block_size,
        PROBE_V1_PREFIX_LEN,
    )
    .unwrap_or_else(|r| raise(&r))
}

fn class_name(plan: &IndexPlan) -> String {
    match plan.class {
        rowid_registry::IndexClass::DirectUnique => "direct_unique",
        rowid_registry::IndexClass::DirectNonUnique => "direct_non_unique",
        rowid_registry::IndexClass::ProbeExpression => "probe_expression",
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
            ty: type_ref(t, &|c| collation(u32::from(c))),
            typmod: typmods
                .as_ref()
                .and_then(|m| m.get(i).copied())
                .unwrap_or(-1),
            collation: collations
                .as_ref()
                .and_then(|c| c.get(i).copied())
                .and_then(|c| collation(u32::from(c)))
                .or_else(|| {
                    // A collatable type without an explicit collation uses its default one.
                    // SAFETY: lsyscache lookup on a valid type OID.
                    let c = unsafe { pg_sys::get_typcollation(t) };
                    collation(u32::from(c))
                }),
            opclass: OpClass::Default,
        })
        .collect();
    let schema =
        resolve_schema(domain_of(domain), &fields, &server_context()).unwrap_or_else(|r| {
            match r.0.first() {
                Some(first) => raise(first),
                None => invalid("empty rejection".into()),
            }
        });
    let plan = plan(&schema, uniqueness_of(uniqueness), mode_of(mode));
    TableIterator::once(plan_row(&schema, &plan))
}

/// The index candidates of `rel` as catalog data.
fn candidates(rel: pg_sys::Oid) -> Vec<IndexCandidate> {
    let query = format!(
        "SELECT i.indexrelid::regclass::text, i.indisprimary, i.indisunique, \
                i.indisvalid AND i.indisready, i.indpred IS NOT NULL, i.indexprs IS NOT NULL, \
                NOT i.indimmediate, i.indnullsnotdistinct, \
                array_agg(coalesce(a.attname::text, '') ORDER BY k.ord), \
                array_agg(coalesce(a.attnotnull, false) ORDER BY k.ord), \
                array_agg(coalesce(a.atttypid, 0) ORDER BY k.ord), \
                array_agg(coalesce(a.atttypmod, -1) ORDER BY k.ord), \
                array_agg(k.coll ORDER BY k.ord), \
                array_agg(coalesce(oc.opcdefault, false) ORDER BY k.ord), \
                array_agg(coalesce(oc.opcname::text, '') ORDER BY k.ord) \
         FROM pg_index i \
         CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indcollation::oid[], i.indclass::oid[]) \
              WITH ORDINALITY AS k(attnum, coll, opclass, ord) \
         LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0 \
         LEFT JOIN pg_opclass oc ON oc.oid = k.opclass \
         WHERE i.indrelid = {} AND k.ord <= i.indnkeyatts \
         GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1",
        u32::from(rel)
    );
    spi(Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            let names: Vec<String> = row.get(9)?.unwrap_or_default();
            let not_null: Vec<bool> = row.get(10)?.unwrap_or_default();
            let types: Vec<pg_sys::Oid> = row.get(11)?.unwrap_or_default();
            let typmods: Vec<i32> = row.get(12)?.unwrap_or_default();
            let colls: Vec<pg_sys::Oid> = row.get(13)?.unwrap_or_default();
            let defaults: Vec<bool> = row.get(14)?.unwrap_or_default();
            let opcnames: Vec<String> = row.get(15)?.unwrap_or_default();
            let columns = (0..names.len())
                .map(|k| KeyColumn {
                    name: names[k].clone(),
                    not_null: not_null[k],
                    field: FieldSpec {
                        expr: names[k].clone(),
                        // Expression columns (attnum 0) have no column type; such an
                        // index is ineligible before its columns are resolved.
                        ty: if types[k] == pg_sys::InvalidOid {
                            rowid_registry::TypeRef::Other {
                                oid: 0,
                                name: "expression".into(),
                            }
                        } else {
                            type_ref(types[k], &|c| collation(u32::from(c)))
                        },
                        typmod: typmods[k],
                        collation: collation(u32::from(colls[k])),
                        opclass: if defaults[k] {
                            OpClass::Default
                        } else {
                            OpClass::NonDefault(opcnames[k].clone())
                        },
                    },
                })
                .collect();
            out.push(IndexCandidate {
                name: row.get::<String>(1)?.unwrap_or_default(),
                primary: row.get::<bool>(2)?.unwrap_or(false),
                unique: row.get::<bool>(3)?.unwrap_or(false),
                valid: row.get::<bool>(4)?.unwrap_or(false),
                partial: row.get::<bool>(5)?.unwrap_or(false),
                expressions: row.get::<bool>(6)?.unwrap_or(false),
                deferrable: row.get::<bool>(7)?.unwrap_or(false),
                nulls_not_distinct: row.get::<bool>(8)?.unwrap_or(false),
                columns,
            });
        }
        Ok(out)
    }))
}

/// Every user column of `rel`, for the keyless rule.
fn all_columns(rel: pg_sys::Oid) -> Vec<FieldSpec> {
    let query = format!(
        "SELECT attname::text, atttypid, atttypmod, attcollation FROM pg_attribute \
         WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        u32::from(rel)
    );
    spi(Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            let name = row.get::<String>(1)?.unwrap_or_default();
            let ty = row.get::<pg_sys::Oid>(2)?.unwrap_or(pg_sys::InvalidOid);
            out.push(FieldSpec {
                expr: name,
                ty: type_ref(ty, &|c| collation(u32::from(c))),
                typmod: row.get::<i32>(3)?.unwrap_or(-1),
                collation: collation(u32::from(
                    row.get::<pg_sys::Oid>(4)?.unwrap_or(pg_sys::InvalidOid),
                )),
                opclass: OpClass::Default,
            });
        }
        Ok(out)
    }))
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
    let mode = mode_of(mode);
    let ctx = server_context();
    let relname = spi(Spi::get_one::<String>(&format!(
        "SELECT {}::regclass::text",
        u32::from(rel)
    )))
    .unwrap_or_default();
    let table = QualifiedName {
        schema: None,
        name: format!("{relname}_storage"),
    };
    let (identity, index, columns, schema, uniqueness, passed) =
        match choose_scan_key(&candidates(rel), &ctx) {
            Ok(key) => (
                "SCAN_KEY".to_string(),
                Some(key.index.clone()),
                key.columns.clone(),
                key.schema,
                Uniqueness::Unique,
                key.passed_over,
            ),
            Err(none) if require_key => raise(&none.rejection),
            Err(none) => {
                let fields = all_columns(rel);
                let names = fields.iter().map(|f| f.expr.clone()).collect();
                let schema =
                    resolve_schema(Domain::KeylessRow, &fields, &ctx).unwrap_or_else(|r| {
                        match r.0.first() {
                            Some(first) => raise(first),
                            None => invalid("empty rejection".into()),
                        }
                    });
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
    let plan = plan(&schema, uniqueness, mode);
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
