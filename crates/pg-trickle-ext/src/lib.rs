//! # pg-trickle-ext: Row Identity V2 inside PostgreSQL
//!
//! A thin pgrx extension: Datums in, `rowid-codec` call, `bytea` out. The wire format, the
//! type contracts and the probe live in `rowid-codec` and `rowid-registry`; this crate owns
//! only what needs a backend:
//!
//! - [`datum`]: PostgreSQL's in-memory scalar representations read in place, and `to_bytea`;
//! - [`reader`]: how to read a value of one field's type (scalars, enums, child identities,
//!   structures), built once per call site;
//! - [`call_site`]: the per-call-site cache of `encode_row_id_v2`;
//! - [`catalog`]: every catalog read (types, collations, index candidates, columns);
//! - [`validate`]: the validation functions;
//! - [`errors`]: every error that reaches SQL, with its SQLSTATE.
//!
//! SQL surface (schema `pgtrickle`):
//! - `encode_row_id_v2(domain text, fields record) RETURNS bytea` (STABLE: enum labels are
//!   catalog state);
//! - `row_probe_v1(bytea) RETURNS bytea` (IMMUTABLE, STRICT);
//! - `row_id_fingerprint(bytea) RETURNS text` (length and a short digest, safe for logs);
//! - `row_id_describe(bytea) RETURNS text` (decoded fields; EXECUTE revoked from PUBLIC,
//!   because identities carry reversible source values);
//! - the domain `row_id` over `bytea`, which marks child identities inside derived ones.

use pgrx::prelude::*;

#[cfg(feature = "bench")]
pub mod bench;
pub mod call_site;
pub mod catalog;
pub mod datum;
pub mod errors;
pub mod reader;
pub mod validate;

::pgrx::pg_module_magic!(name, version);

extension_sql!(
    r#"
CREATE SCHEMA IF NOT EXISTS pgtrickle;
CREATE DOMAIN pgtrickle.row_id AS bytea;
COMMENT ON DOMAIN pgtrickle.row_id IS
  'A complete Row Identity V2; inside encode_row_id_v2 it is encoded as a child identity';
"#,
    name = "row_id_domain",
    bootstrap
);

#[pg_schema]
mod pgtrickle {
    use pgrx::pg_sys;
    use pgrx::prelude::*;
    use rowid_codec::Domain;

    use crate::call_site::CallSite;
    use crate::errors;

    const ENCODE: &str = "pgtrickle.encode_row_id_v2";

    /// The domain named by the first argument's bytes; raises for an unknown name.
    fn parse_domain(name: &[u8]) -> Domain {
        std::str::from_utf8(name)
            .ok()
            .and_then(Domain::from_name)
            .unwrap_or_else(|| {
                let names: Vec<&str> = Domain::ALL.iter().map(|d| d.name()).collect();
                errors::invalid_argument(
                    ENCODE,
                    format!(
                        "unknown identity domain {:?}; expected one of {}",
                        String::from_utf8_lossy(name),
                        names.join(", ")
                    ),
                )
            })
    }

    /// Encodes `fields` as a Row Identity V2 of `domain`.
    ///
    /// The record argument is read as a raw Datum from `fcinfo` (its SQL type is `record`)
    /// and deformed against the cached tuple descriptor.
    #[pg_extern(sql = r#"
CREATE FUNCTION pgtrickle.encode_row_id_v2(domain text, fields record) RETURNS bytea
STABLE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'encode_row_id_v2_wrapper';
"#)]
    fn encode_row_id_v2(fcinfo: pg_sys::FunctionCallInfo) -> Option<pgrx::datum::Internal> {
        // SAFETY: PostgreSQL calls this with two arguments (text, record) per the SQL
        // definition above; fn_extra/fn_mcxt belong to this call site's FmgrInfo.
        unsafe {
            if pgrx::pg_arg_is_null(fcinfo, 0) {
                errors::null_argument(ENCODE, "domain must not be NULL");
            }
            let domain_bytes = crate::datum::varlena_bytes(pgrx::pg_getarg_datum_raw(fcinfo, 0));
            if pgrx::pg_arg_is_null(fcinfo, 1) {
                errors::null_argument(
                    ENCODE,
                    "fields must not be NULL (a NULL row has no identity)",
                );
            }
            let record = pgrx::pg_getarg_datum_raw(fcinfo, 1);
            let flinfo = (*fcinfo).flinfo;
            let mcxt = (*flinfo).fn_mcxt;
            let mut cache = pgrx::pg_func_extra(fcinfo, CallSite::default);
            let domain = cache.domain(domain_bytes, parse_domain);
            let out = cache.encode(domain, record, mcxt);
            Some(pgrx::datum::Internal::from(Some(pg_sys::Datum::from(out))))
        }
    }

    /// Probe V1 of an identity: the identity itself when short, else its first P bytes and
    /// an XXH3-128 digest (spec/probe.md). Defined for every bytea.
    #[pg_extern(immutable, parallel_safe, strict)]
    fn row_probe_v1(id: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(id.len().min(rowid_codec::PROBE_V1_PREFIX_LEN + 16));
        rowid_codec::probe_v1(id, &mut out);
        out
    }

    /// The decoded fields of an identity as text. Identities carry reversible source values
    /// (they are the source key's values, not a hash of them), so EXECUTE is revoked from
    /// PUBLIC: only roles granted it can read them back.
    #[pg_extern(immutable, parallel_safe, strict)]
    fn row_id_describe(id: &[u8]) -> String {
        match rowid_codec::decode(id) {
            Ok(decoded) => decoded.to_string(),
            Err(e) => errors::not_an_identity("pgtrickle.row_id_describe", &e),
        }
    }

    /// Test support: the probe with a constant digest, so distinct long identities collide.
    /// Only in test builds; proves that matching rechecks the complete identity.
    #[cfg(feature = "pg_test")]
    #[pg_extern(immutable, parallel_safe, strict)]
    fn row_probe_forced_v1(id: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        rowid_codec::probe::probe_with_forced_digest(
            id,
            rowid_codec::PROBE_V1_PREFIX_LEN,
            [0xAB; 16],
            &mut out,
        );
        out
    }

    /// Length and a 32-bit digest prefix: identifies an identity in logs without revealing it.
    #[pg_extern(immutable, parallel_safe, strict)]
    fn row_id_fingerprint(id: &[u8]) -> String {
        let d = rowid_codec::probe::probe_digest(id);
        format!(
            "len={} fp={:02x}{:02x}{:02x}{:02x}",
            id.len(),
            d[0],
            d[1],
            d[2],
            d[3]
        )
    }
}

extension_sql!(
    "REVOKE EXECUTE ON FUNCTION pgtrickle.row_id_describe(bytea) FROM PUBLIC;",
    name = "revoke_describe",
    finalize
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    include!("tests.rs");
}

/// pgrx test harness hooks.
#[cfg(test)]
pub mod pg_test {
    /// Runs once before the tests.
    pub fn setup(_options: Vec<&str>) {}

    /// Server settings for the test cluster.
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
