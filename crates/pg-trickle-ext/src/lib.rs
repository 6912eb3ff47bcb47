//! # pg-trickle-ext: Row Identity V2 inside PostgreSQL
//!
//! A thin pgrx extension: Datums in, `rowid-codec` call, `bytea` out. The wire format, the
//! type contracts and the probe live in `rowid-codec` and `rowid-registry`; this crate owns
//! only what needs a backend:
//!
//! - [`datum`]: PostgreSQL's in-memory scalar representations read in place, and `to_bytea`;
//! - [`reader`]: how to read a value of one field's type (scalars, enums, child identities,
//!   structures), built once per call site;
//! - [`fields`]: one field's dispatch and the encoding loop every entry point shares;
//! - [`call_site`]: the per-call-site cache and fmgr entry of `encode_row_id_v2`;
//! - [`args`]: `encode_row_id_v2_fields`, the same identity from the arguments themselves;
//! - [`domain_arg`]: the domain argument, parsed once per call site when constant;
//! - [`capture`]: trigger change capture into change buffers (spec/change-buffer.md);
//! - [`catalog`]: every catalog read (types, collations, index candidates, columns);
//! - [`validate`]: the validation functions;
//! - [`identity_messages`]: a table's identity schema as JSON, written into the WAL by an
//!   opt-in event trigger (spec/identity-messages.md);
//! - [`errors`]: every error that reaches SQL, with its SQLSTATE.
//!
//! SQL surface (schema `pgtrickle`):
//! - `encode_row_id_v2(domain text, fields record) RETURNS bytea` (STABLE: enum labels are
//!   catalog state) and `encode_row_id_v2_fields(domain text, VARIADIC "any")`, the same
//!   bytes with one field per argument;
//! - `capture_table(regclass)`, the trigger function `capture_changes()` and
//!   `check_change_buffer(regclass)`: trigger capture into change buffers;
//! - `row_probe_v1(bytea) RETURNS bytea` (IMMUTABLE, STRICT);
//! - `row_id_fingerprint(bytea) RETURNS text` (length and a short digest, safe for logs);
//! - `row_id_describe(bytea) RETURNS text` (decoded fields; EXECUTE revoked from PUBLIC,
//!   because identities carry reversible source values);
//! - the domain `row_id` over `bytea`, which marks child identities inside derived ones;
//! - `identity_schema(regclass) RETURNS text` (the table's identity schema message, JSON),
//!   `enable_identity_messages()` / `disable_identity_messages()` (the event triggers that
//!   write it into the WAL at the end of every DDL that can change it; superuser).

use pgrx::prelude::*;

pub mod args;
#[cfg(feature = "bench")]
pub mod bench;
pub mod call_site;
pub mod capture;
pub mod catalog;
pub mod datum;
pub mod domain_arg;
pub mod errors;
pub mod fields;
pub mod identity_messages;
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

    use crate::errors;

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

    /// The identity schema of a table as a format-1 identity schema message (JSON text,
    /// spec/identity-messages.md): its key as the registry chooses it (or the keyless
    /// identity, or why it has none), columns, primary key and replica identity. What the
    /// identity-message event trigger writes into the WAL, and what a WAL consumer reads at
    /// its slot's consistent point.
    #[pg_extern(stable, strict)]
    fn identity_schema(rel: pg_sys::Oid) -> String {
        crate::identity_messages::schema_json(rel)
    }

    /// The identity schema message saying table `relid` was dropped (JSON text).
    #[pg_extern(immutable, parallel_safe, strict)]
    fn identity_dropped_message(relid: pg_sys::Oid, namespace: &str, relname: &str) -> String {
        crate::identity_messages::dropped_json(relid, namespace, relname)
    }

    /// Captures the changes of `source` by trigger: validates its identity (refusing a table
    /// without one by name), creates its change buffer `pgtrickle_changes.changes_<oid>`
    /// (spec/change-buffer.md; no PUBLIC access) unless it exists and passes the buffer
    /// check, and the `pgtrickle_capture` (row) and `pgtrickle_capture_truncate`
    /// (statement) triggers. Returns the buffer's name.
    #[pg_extern(sql = r#"
CREATE FUNCTION pgtrickle.capture_table(source regclass) RETURNS text
VOLATILE STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'capture_table_wrapper';
"#)]
    fn capture_table(source: pg_sys::Oid) -> String {
        crate::capture::capture_table(source)
    }

    /// Refuses (raises) unless `buffer` is a change buffer of this library: its columns are
    /// the buffer shape and every row carries row_identity_version 2 and
    /// row_probe_version 1. A reader calls it before consuming a buffer.
    #[pg_extern(sql = r#"
CREATE FUNCTION pgtrickle.check_change_buffer(buffer regclass) RETURNS boolean
STABLE STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'check_change_buffer_wrapper';
"#)]
    fn check_change_buffer(buffer: pg_sys::Oid) -> bool {
        crate::capture::check_buffer(
            "pgtrickle.check_change_buffer",
            &crate::catalog::relation_name(buffer),
        );
        true
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
    r#"
CREATE FUNCTION pgtrickle.encode_row_id_v2(domain text, fields record) RETURNS bytea
STABLE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'encode_row_id_v2_wrapper';
COMMENT ON FUNCTION pgtrickle.encode_row_id_v2(text, record) IS
  'Row Identity V2 of the record''s fields (spec/wire-format.md)';
"#,
    name = "encode_row_id_v2",
    requires = ["row_id_domain"]
);

extension_sql!(
    r#"
CREATE FUNCTION pgtrickle.encode_row_id_v2_fields(domain text, VARIADIC fields "any")
RETURNS bytea STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'encode_row_id_v2_fields';
COMMENT ON FUNCTION pgtrickle.encode_row_id_v2_fields(text, "any") IS
  'Row Identity V2 of the arguments, each one field: the bytes of encode_row_id_v2(domain, ROW(...)) without the ROW';
"#,
    name = "encode_row_id_v2_fields",
    requires = ["row_id_domain"]
);

extension_sql!(
    r#"
CREATE FUNCTION pgtrickle.capture_changes() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'capture_changes';
COMMENT ON FUNCTION pgtrickle.capture_changes() IS
  'Trigger: appends each change with its old and new Row Identity V2 to the change buffer named by its argument (pgtrickle.capture_table creates both)';
"#,
    name = "capture_changes",
    requires = ["row_id_domain"]
);

extension_sql!(
    "REVOKE EXECUTE ON FUNCTION pgtrickle.row_id_describe(bytea) FROM PUBLIC;",
    name = "revoke_describe",
    finalize
);

extension_sql!(
    r#"
-- Identity schema messages (spec/identity-messages.md). The event-trigger functions run as
-- the extension's owner: any role's DDL must be able to write the message.
CREATE FUNCTION pgtrickle.identity_messages_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  rel oid;
BEGIN
  FOR rel IN
    WITH cmd AS (SELECT classid, objid FROM pg_event_trigger_ddl_commands()),
    touched(relid) AS (
      -- tables, and the table of an index
      SELECT CASE WHEN c.relkind IN ('i', 'I') THEN i.indrelid ELSE c.oid END
      FROM cmd JOIN pg_class c ON cmd.classid = 'pg_class'::regclass AND c.oid = cmd.objid
      LEFT JOIN pg_index i ON i.indexrelid = c.oid
      UNION
      -- constraints (primary keys, unique constraints)
      SELECT con.conrelid FROM cmd
      JOIN pg_constraint con ON cmd.classid = 'pg_constraint'::regclass AND con.oid = cmd.objid
      UNION
      -- a table added to a publication
      SELECT pr.prrelid FROM cmd
      JOIN pg_publication_rel pr ON cmd.classid = 'pg_publication_rel'::regclass AND pr.oid = cmd.objid
      UNION
      -- ALTER TYPE / ALTER DOMAIN: tables with a column of the type, its array or a domain over it
      SELECT a.attrelid FROM cmd
      JOIN pg_type t ON cmd.classid = 'pg_type'::regclass
        AND (t.oid = cmd.objid OR t.typelem = cmd.objid OR t.typbasetype = cmd.objid)
      JOIN pg_attribute a ON a.atttypid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
    )
    SELECT DISTINCT t.relid FROM touched t
    JOIN pg_class c ON c.oid = t.relid AND c.relkind IN ('r', 'p')
    WHERE EXISTS (SELECT 1 FROM pg_publication_tables p
                  WHERE format('%I.%I', p.schemaname, p.tablename)::regclass = t.relid)
    ORDER BY 1
  LOOP
    PERFORM pg_logical_emit_message(true, 'pgtrickle.identity', pgtrickle.identity_schema(rel));
  END LOOP;
END
$fn$;

CREATE FUNCTION pgtrickle.identity_messages_on_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  o record;
  rel oid;
BEGIN
  FOR o IN SELECT objid, schema_name, object_name FROM pg_event_trigger_dropped_objects()
           WHERE classid = 'pg_class'::regclass AND object_type = 'table'
  LOOP
    PERFORM pg_logical_emit_message(true, 'pgtrickle.identity',
      pgtrickle.identity_dropped_message(o.objid, o.schema_name, o.object_name));
  END LOOP;
  -- A standalone DROP INDEX names no table once the index is gone: every published table's
  -- schema is written again (the consumer keeps what did not change).
  IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects()
             WHERE object_type IN ('index', 'table constraint')) THEN
    FOR rel IN SELECT DISTINCT format('%I.%I', schemaname, tablename)::regclass::oid
               FROM pg_publication_tables ORDER BY 1
    LOOP
      PERFORM pg_logical_emit_message(true, 'pgtrickle.identity', pgtrickle.identity_schema(rel));
    END LOOP;
  END IF;
END
$fn$;

CREATE FUNCTION pgtrickle.enable_identity_messages() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'pgtrickle_identity_ddl') THEN
    CREATE EVENT TRIGGER pgtrickle_identity_ddl ON ddl_command_end
      EXECUTE FUNCTION pgtrickle.identity_messages_on_ddl();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'pgtrickle_identity_drop') THEN
    CREATE EVENT TRIGGER pgtrickle_identity_drop ON sql_drop
      EXECUTE FUNCTION pgtrickle.identity_messages_on_drop();
  END IF;
END
$fn$;
COMMENT ON FUNCTION pgtrickle.enable_identity_messages() IS
  'Writes each published table''s identity schema into the WAL at the end of every DDL that can change it (superuser; run disable_identity_messages() before DROP EXTENSION)';

CREATE FUNCTION pgtrickle.disable_identity_messages() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
  DROP EVENT TRIGGER IF EXISTS pgtrickle_identity_ddl;
  DROP EVENT TRIGGER IF EXISTS pgtrickle_identity_drop;
$fn$;
REVOKE EXECUTE ON FUNCTION pgtrickle.enable_identity_messages() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgtrickle.disable_identity_messages() FROM PUBLIC;
"#,
    name = "identity_messages",
    requires = [
        pgtrickle::identity_schema,
        pgtrickle::identity_dropped_message
    ]
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    // pgrx's harness calls every test in schema `tests`: one module, several files.
    include!("tests.rs");
    include!("tests_fields.rs");
    include!("tests_capture.rs");
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
