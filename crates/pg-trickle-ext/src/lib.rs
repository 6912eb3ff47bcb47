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
//! - [`spi`] and [`guard`]: every SQL statement, run with `search_path` locked to
//!   `pg_catalog, pg_temp`, and the owner switch of the capture trigger;
//! - [`validate`]: the validation functions;
//! - [`identity_messages`]: a table's identity schema as JSON, and the rows of
//!   `pgtrickle.identity_schemas` the opt-in event triggers write at every DDL that can change
//!   it (spec/identity-messages.md);
//! - [`errors`]: every error that reaches SQL, with its SQLSTATE.
//!
//! SQL surface (schema `pgtrickle`):
//! - `encode_row_id_v2(domain text, fields record) RETURNS bytea` (STABLE: enum labels are
//!   catalog state) and `encode_row_id_v2_fields(domain text, VARIADIC "any")`, the same
//!   bytes with one field per argument;
//! - `capture_table(regclass)`, the trigger function `capture_changes()` and
//!   `check_change_buffer(regclass)`: trigger capture into change buffers in the extension's
//!   schema `pgtrickle_changes`;
//! - `row_probe_v1(bytea) RETURNS bytea` (IMMUTABLE, STRICT);
//! - `row_id_fingerprint(bytea) RETURNS text` (length and a short digest, safe for logs);
//! - `row_id_describe(bytea) RETURNS text` (decoded fields; EXECUTE revoked from PUBLIC,
//!   because identities carry reversible source values);
//! - the domain `row_id` over `bytea`, which marks child identities inside derived ones;
//! - `identity_schema(regclass) RETURNS text` (the table's identity schema message, JSON),
//!   `enable_identity_messages()` / `disable_identity_messages()` (the event triggers that
//!   write it into `pgtrickle.identity_schemas`, published by `pgtrickle_identity`, at the end
//!   of every DDL that can change it; superuser);
//! - `grant_capture(regrole)`: what a capture role needs beyond REPLICATION (superuser);
//! - stream tables (spec/stream-tables.md; [`stream_query`] reads the query, [`stream_table`]
//!   keeps them): `create_stream_table(name, query, schedule, refresh_mode, initialize,
//!   cdc_mode)`, `alter_stream_table(name, query, refresh_mode, cdc_mode)`,
//!   `refresh_stream_table(name)`, `drop_stream_table(name, cascade)`,
//!   `export_stream_tables()`, `rebuild_stream_tables(dry_run)` ([`stream_rebuild`]),
//!   `publish_stream_table(name, publication)` ([`stream_publish`]) and the catalog
//!   `pgt_stream_tables`.

use pgrx::prelude::*;

pub mod access;
pub mod args;
#[cfg(feature = "bench")]
pub mod bench;
pub mod binding;
pub mod call_site;
pub mod capture;
pub mod catalog;
pub mod datum;
pub mod domain_arg;
pub mod errors;
pub mod fields;
pub mod guard;
pub mod identity_messages;
pub mod immediate_statements;
pub mod locks;
pub mod panic_hook;
pub mod privacy;
pub mod reader;
pub mod redefinition;
pub mod scheduler;
pub mod sealed;
pub mod sequence;
pub mod spi;
pub mod stream_graph;
pub mod stream_immediate;
pub mod stream_publish;
pub mod stream_query;
pub mod stream_rebuild;
pub mod stream_table;
pub mod stream_wal;
pub mod validate;

::pgrx::pg_module_magic!(name, version);

/// Loads the library: errors without Rust backtraces ([`panic_hook`]), the hook that keeps
/// maintenance sealed off from the session it runs in ([`sealed`]), the check that stored
/// statements call only what create resolved ([`binding`]), the `pg_trickle.*`
/// settings, and the scheduler's launcher when loaded from `shared_preload_libraries`
/// (spec/stream-tables.md §8).
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    crate::panic_hook::install();
    crate::sealed::install();
    crate::binding::install();
    crate::scheduler::init();
}

extension_sql!(
    r#"
CREATE SCHEMA IF NOT EXISTS pgtrickle;
-- Everything the extension defines is usable by every role unless revoked below; the
-- schema is owned by the extension, so no other role can create objects in it.
GRANT USAGE ON SCHEMA pgtrickle TO PUBLIC;
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

    /// Writes the identity schemas of `relids` (those that exist) into
    /// `pgtrickle.identity_schemas` where they differ from the rows there; returns how many
    /// rows changed. Called by the identity-message event triggers, as the extension's owner
    /// (nobody else may write that table); EXECUTE is revoked from PUBLIC.
    #[pg_extern(volatile, strict)]
    fn write_identity_schemas(relids: Vec<pg_sys::Oid>) -> i32 {
        crate::identity_messages::write_schemas(&relids)
    }

    /// Writes the identity schemas of the tables of `candidates` that a publication carries,
    /// and of every published table without a row yet, deciding what is published under a
    /// snapshot taken when it runs (a publication committed during the DDL's lock wait
    /// counts); the tables of `publishing` (those the DDL may publish now) are locked before
    /// their schema is read. Returns how many rows changed. Called by the DDL event trigger
    /// as the extension's owner; EXECUTE is revoked from PUBLIC.
    #[pg_extern(volatile, strict)]
    fn write_published_identity_schemas(
        candidates: Vec<pg_sys::Oid>,
        publishing: Vec<pg_sys::Oid>,
    ) -> i32 {
        crate::identity_messages::write_published_schemas(&candidates, &publishing)
    }

    /// Notes, for this backend's current transaction, that table `rel` is being rewritten
    /// for `reason` (`pg_event_trigger_table_rewrite_reason()`); the identity schema rows
    /// the transaction writes for it then say `"rewritten": true` when the reason gives its
    /// rows new values. Called by the extension's `pgtrickle_identity_rewrite` event trigger,
    /// as the extension's owner; EXECUTE is revoked from PUBLIC, and nothing removes a note
    /// before the transaction ends (a volatile default's function runs during the rewrite).
    #[pg_extern(volatile, strict)]
    fn note_table_rewrite(rel: pg_sys::Oid, reason: i32) {
        crate::identity_messages::note_rewrite(rel, reason);
    }

    /// Follows the `ALTER TABLE` of captured sources in their trigger buffers
    /// (spec/change-buffer.md §1c), as each buffer's owner; returns how many it altered.
    /// Called by the extension's `pgtrickle_capture_ddl` event trigger; EXECUTE is revoked
    /// from PUBLIC.
    #[pg_extern(volatile, strict)]
    fn follow_source_ddl(sources: Vec<pg_sys::Oid>) -> i32 {
        crate::capture::follow_source_ddl(&sources)
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
        crate::capture::check_buffer("pgtrickle.check_change_buffer", buffer);
        true
    }

    /// Creates the stream table `name` keeping `query`'s result (spec/stream-tables.md):
    /// checks the query's operators and every identity field first, then creates the
    /// storage (owned by the caller) and its catalog row, and fills it unless `initialize`
    /// is false. `schedule` (an interval such as `'2s'`, a cron expression, `'calculated'`,
    /// or NULL: refreshed by hand) is what the scheduler follows. `cdc_mode` says where a
    /// DIFFERENTIAL stream table's changes come from: `'trigger'` (`capture_table` on each
    /// source) or `'wal'` (the buffers `rowid-cdc --sink postgres:` fills, spec §5.6).
    #[pg_extern(volatile)]
    fn create_stream_table(
        name: Option<&str>,
        query: Option<&str>,
        schedule: default!(Option<&str>, "NULL"),
        refresh_mode: default!(Option<&str>, "'DIFFERENTIAL'"),
        initialize: default!(Option<bool>, true),
        cdc_mode: default!(Option<&str>, "'trigger'"),
    ) {
        const F: &str = "pgtrickle.create_stream_table";
        let name = name.unwrap_or_else(|| errors::null_argument(F, "name is NULL"));
        let query = query.unwrap_or_else(|| errors::null_argument(F, "query is NULL"));
        let mode = refresh_mode.unwrap_or_else(|| errors::null_argument(F, "refresh_mode is NULL"));
        let cdc = cdc_mode.unwrap_or_else(|| errors::null_argument(F, "cdc_mode is NULL"));
        // Checked here, not in the create a rebuild runs again: a recorded schedule stays
        // valid when pg_trickle.min_schedule_seconds grows.
        if let Some(text) = schedule {
            crate::scheduler::check_schedule(F, text);
        }
        crate::stream_table::create(name, query, schedule, mode, initialize.unwrap_or(true), cdc);
        if schedule.is_some() {
            crate::scheduler::ensure_running();
        }
    }

    /// Replaces the query, the refresh mode and/or the CDC mode of the stream table `name`
    /// (NULL: keep), everything checked before the old storage is replaced; or, given only
    /// a `schedule`, changes that alone (`'none'`: refreshed by hand from now on).
    #[pg_extern(volatile)]
    fn alter_stream_table(
        name: Option<&str>,
        query: default!(Option<&str>, "NULL"),
        refresh_mode: default!(Option<&str>, "NULL"),
        cdc_mode: default!(Option<&str>, "NULL"),
        schedule: default!(Option<&str>, "NULL"),
    ) {
        let name = name.unwrap_or_else(|| {
            errors::null_argument("pgtrickle.alter_stream_table", "name is NULL")
        });
        // A new schedule is checked here (the scheduler reads what stream_table records).
        let scheduled = schedule.filter(|s| !s.eq_ignore_ascii_case("none"));
        if let Some(text) = scheduled {
            crate::scheduler::check_schedule("pgtrickle.alter_stream_table", text);
        }
        crate::stream_rebuild::alter(name, query, refresh_mode, cdc_mode, schedule);
        if scheduled.is_some() {
            crate::scheduler::ensure_running();
        }
    }

    /// Refreshes the stream table `name` now, as its owner.
    #[pg_extern(volatile, strict)]
    fn refresh_stream_table(name: &str) {
        crate::stream_rebuild::refresh(name);
    }

    /// Drops the stream table `name`: its storage and its catalog row; refused while other
    /// stream tables read it, unless `cascade` (they are dropped first, the deepest first).
    #[pg_extern(volatile, strict)]
    fn drop_stream_table(name: &str, cascade: default!(bool, false)) {
        crate::stream_table::drop(name, cascade);
    }

    /// Rebuilds every stream table (spec/stream-tables.md §7.3): a preflight that tries the
    /// whole rebuild and rolls it back reports each one that cannot be rebuilt, and refuses
    /// before anything changes; then, in the caller's transaction, each is dropped (the
    /// readers first) and created again in dependency order, as its owner, with a fresh
    /// initial refresh and what it carried (privileges, comments, indexes, publications).
    /// `dry_run` reports what would happen and changes nothing.
    // pgrx needs the TableIterator row spelled out in the signature (no type alias).
    #[allow(clippy::type_complexity)]
    #[pg_extern(volatile)]
    fn rebuild_stream_tables(
        dry_run: default!(Option<bool>, false),
    ) -> TableIterator<
        'static,
        (
            name!(step, i32),
            name!(level, i32),
            name!(name, String),
            name!(action, String),
            name!(detail, String),
        ),
    > {
        let dry_run = dry_run.unwrap_or_else(|| {
            errors::null_argument("pgtrickle.rebuild_stream_tables", "dry_run is NULL")
        });
        let steps = crate::stream_rebuild::rebuild_all(dry_run);
        TableIterator::new(
            steps
                .into_iter()
                .map(|s| (s.step, s.level, s.name, s.action.to_string(), s.detail)),
        )
    }

    /// Adds the stream table `name` to `publication` (created when missing) with every
    /// column of its storage, `__pgt_row_id` among them, after checking its replica
    /// identity (spec/stream-tables.md §9): what a subscriber needs to keep an exact copy.
    #[pg_extern(volatile, strict)]
    fn publish_stream_table(name: &str, publication: &str) {
        crate::stream_publish::publish(name, publication);
    }

    /// Length and a 32-bit digest prefix: identifies an identity in logs without revealing it.
    #[pg_extern(immutable, parallel_safe, strict)]
    fn row_id_fingerprint(id: &[u8]) -> String {
        rowid_codec::probe::Fingerprint::of(id).to_string()
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
    r#"
-- Stream tables (spec/stream-tables.md §6): one row per stream table, written only by the
-- extension's functions (as the extension's owner), readable by every role.
CREATE TABLE pgtrickle.pgt_stream_tables (
    pgt_relid oid PRIMARY KEY,
    pgt_name text NOT NULL,
    defining_query text NOT NULL,
    schedule text,
    refresh_mode text NOT NULL CHECK (refresh_mode IN ('FULL', 'DIFFERENTIAL', 'IMMEDIATE')),
    cdc_mode text NOT NULL DEFAULT 'trigger' CHECK (cdc_mode IN ('trigger', 'wal')),
    status text NOT NULL CHECK (status IN ('INITIALIZING', 'ACTIVE', 'NEEDS_REINIT')),
    identity_domain text NOT NULL,
    identity_unique boolean NOT NULL,
    index_class text NOT NULL,
    max_identity_bytes integer,
    row_identity_version smallint NOT NULL,
    row_probe_version smallint NOT NULL,
    sources oid[] NOT NULL,
    frontier text,
    frontier_xid bigint,
    frontier_seq integer,
    refresh_sql text NOT NULL,
    fill_sql text NOT NULL,
    delta_sql text,
    time_zone text NOT NULL,
    search_path text NOT NULL,
    source_shape text NOT NULL,
    last_refresh_at timestamptz,
    last_refresh_ms double precision,
    rows_changed bigint,
    consecutive_failures integer NOT NULL DEFAULT 0,
    last_error text,
    last_failure_at timestamptz,
    -- What create resolved (spec/stream-tables.md §10.2): the only user-defined functions and
    -- operators its stored statements may call.
    bound_functions oid[] NOT NULL DEFAULT '{}',
    bound_operators oid[] NOT NULL DEFAULT '{}'
);
-- Every refresh a scheduler ran (spec/stream-tables.md §8), the last 100 per stream table.
CREATE TABLE pgtrickle.pgt_refresh_history (
    pgt_relid oid NOT NULL,
    pgt_name text NOT NULL,
    started_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL,
    rows_changed bigint,
    error text
);
CREATE INDEX ON pgtrickle.pgt_refresh_history (pgt_relid, started_at);
REVOKE ALL ON pgtrickle.pgt_refresh_history FROM PUBLIC;
GRANT SELECT ON pgtrickle.pgt_refresh_history TO PUBLIC;
COMMENT ON TABLE pgtrickle.pgt_refresh_history IS
  'Refreshes run by the pg_trickle schedulers: when, how long, rows changed, the error of a failed one';
-- The statement each IMMEDIATE stream table applies for a statement on one of its sources
-- (event i, u, d; a TRUNCATE recomputes with fill_sql).
CREATE TABLE pgtrickle.pgt_immediate (
    pgt_relid oid NOT NULL REFERENCES pgtrickle.pgt_stream_tables ON DELETE CASCADE,
    source oid NOT NULL,
    event text NOT NULL CHECK (event IN ('i', 'u', 'd')),
    statement text NOT NULL,
    -- The columns the query reads of the source (attribute numbers; 0: the whole row): the
    -- owner must keep SELECT on them (spec/stream-tables.md §10.6).
    read_columns int2[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (pgt_relid, source, event)
);
REVOKE ALL ON pgtrickle.pgt_immediate FROM PUBLIC;
GRANT SELECT ON pgtrickle.pgt_immediate TO PUBLIC;
-- One row per IMMEDIATE stream table, updated by every statement that maintains it
-- (spec/stream-tables.md §5.3, "Isolation"): a REPEATABLE READ or SERIALIZABLE writer whose
-- snapshot predates the last maintenance fails to update it, with a serialisation error.
CREATE TABLE pgtrickle.pgt_immediate_marks (
    pgt_relid oid PRIMARY KEY REFERENCES pgtrickle.pgt_stream_tables ON DELETE CASCADE,
    statements bigint NOT NULL DEFAULT 0
) WITH (fillfactor = 10);
REVOKE ALL ON pgtrickle.pgt_immediate_marks FROM PUBLIC;
-- A table-level SELECT on a stream table becomes SELECT on its columns but __pgt_row_id
-- (spec/stream-tables.md §10.4): after every GRANT.
CREATE FUNCTION pgtrickle.keep_identities_private() RETURNS event_trigger
LANGUAGE c SET search_path = pg_catalog, pg_temp SET jit = off
AS 'MODULE_PATHNAME', 'keep_identities_private';
REVOKE EXECUTE ON FUNCTION pgtrickle.keep_identities_private() FROM PUBLIC;
CREATE EVENT TRIGGER pgtrickle_keep_identities_private ON ddl_command_end WHEN TAG IN ('GRANT')
  EXECUTE FUNCTION pgtrickle.keep_identities_private();
CREATE FUNCTION pgtrickle.maintain_stream_table() RETURNS trigger
LANGUAGE c AS 'MODULE_PATHNAME', 'maintain_stream_table';
COMMENT ON FUNCTION pgtrickle.maintain_stream_table() IS
  'Trigger: applies a statement on a source to the IMMEDIATE stream table whose OID is its argument (create_stream_table creates these triggers)';
COMMENT ON TABLE pgtrickle.pgt_stream_tables IS
  'Stream tables (spec/stream-tables.md): their queries, identities, index plans and refreshes';
REVOKE ALL ON pgtrickle.pgt_stream_tables FROM PUBLIC;
GRANT SELECT ON pgtrickle.pgt_stream_tables TO PUBLIC;
-- Each role reads the rows of the stream tables it may act as the owner of (the storage's
-- owner, or a member of its role): a row holds the query, its statements and the last
-- error, none another tenant may read (spec/stream-tables.md §10.5). The extension's owner,
-- who writes them and reads them for the extension, owns the tables (no policy applies).
ALTER TABLE pgtrickle.pgt_stream_tables ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_reads ON pgtrickle.pgt_stream_tables FOR SELECT USING (
  pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                          WHERE c.oid OPERATOR(pg_catalog.=) pgt_relid), 'USAGE'));
ALTER TABLE pgtrickle.pgt_refresh_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_reads ON pgtrickle.pgt_refresh_history FOR SELECT USING (
  pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                          WHERE c.oid OPERATOR(pg_catalog.=) pgt_relid), 'USAGE'));
ALTER TABLE pgtrickle.pgt_immediate ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_reads ON pgtrickle.pgt_immediate FOR SELECT USING (
  pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c
                          WHERE c.oid OPERATOR(pg_catalog.=) pgt_relid), 'USAGE'));
"#,
    name = "stream_tables_catalog",
    requires = ["row_id_domain"]
);

extension_sql!(
    r#"
-- Every stream table's definition in dependency order (spec/stream-tables.md §7): what it
-- reads first. Its level is the longest chain of stream tables below it (0: it reads none).
CREATE FUNCTION pgtrickle.export_stream_tables()
RETURNS TABLE (step integer, level integer, name text, query text, schedule text,
               refresh_mode text, cdc_mode text, search_path text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  WITH RECURSIVE chain(relid, depth) AS (
    SELECT t.pgt_relid, 0 FROM pgtrickle.pgt_stream_tables t
    UNION ALL
    SELECT t.pgt_relid, c.depth + 1
    FROM pgtrickle.pgt_stream_tables t JOIN chain c ON c.relid = ANY (t.sources)
    WHERE c.depth < 1000
  ), levels AS (
    SELECT relid, max(depth) AS level FROM chain GROUP BY relid
  )
  SELECT (row_number() OVER (ORDER BY l.level, t.pgt_name))::integer, l.level, t.pgt_name,
         t.defining_query, t.schedule, t.refresh_mode, t.cdc_mode, t.search_path
  FROM pgtrickle.pgt_stream_tables t JOIN levels l ON l.relid = t.pgt_relid
  ORDER BY l.level, t.pgt_name
$$;
COMMENT ON FUNCTION pgtrickle.export_stream_tables() IS
  'Every stream table''s definition (query, schedule, modes, the creator''s search_path), each after the stream tables it reads';
"#,
    name = "export_stream_tables",
    requires = ["stream_tables_catalog"]
);

extension_sql!(
    "REVOKE EXECUTE ON FUNCTION pgtrickle.row_id_describe(bytea) FROM PUBLIC;",
    name = "revoke_describe",
    finalize
);

extension_sql!(
    r#"
-- Change buffers of trigger capture live in a schema the extension owns: no other role can
-- create it (or a buffer in it) first. pgtrickle.capture_table gives each buffer's owner
-- USAGE; pgtrickle.grant_capture gives a capture role USAGE and CREATE (for rowid-cdc's
-- PostgreSQL sink).
CREATE SCHEMA pgtrickle_changes;
COMMENT ON SCHEMA pgtrickle_changes IS
  'Change buffers (spec/change-buffer.md); owned by the extension pg_trickle_ext';

-- Identity schema messages, format 5 (spec/identity-messages.md): one row per published
-- table, written only by the extension's event triggers (as the extension's owner: PUBLIC
-- may only read it, what the catalogs already show), published by pgtrickle_identity so
-- that a WAL consumer reads each row change at the position of the DDL that made it (and a
-- snapshot reader the schema its snapshot sees).
CREATE TABLE pgtrickle.identity_schemas (
  relid pg_catalog.oid PRIMARY KEY,
  key_index pg_catalog.oid,
  schema pg_catalog.text NOT NULL
);
REVOKE ALL ON TABLE pgtrickle.identity_schemas FROM PUBLIC;
GRANT SELECT ON TABLE pgtrickle.identity_schemas TO PUBLIC;
COMMENT ON TABLE pgtrickle.identity_schemas IS
  'Identity schema of every published table (spec/identity-messages.md format 5); written only by the identity-message event triggers';
CREATE PUBLICATION pgtrickle_identity FOR TABLE pgtrickle.identity_schemas;

REVOKE EXECUTE ON FUNCTION pgtrickle.write_identity_schemas(pg_catalog.oid[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgtrickle.write_published_identity_schemas(pg_catalog.oid[], pg_catalog.oid[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgtrickle.note_table_rewrite(pg_catalog.oid, integer) FROM PUBLIC;

-- The tables publication `pubid` carries, the set pg_get_publication_tables() gives, read
-- from the catalogs alone. That function opens every table it lists (PostgreSQL 16 on, for
-- the column lists), so an event trigger calling it would queue behind any lock waiting on
-- any published table: every DDL of the database would wait for it, and a client holding a
-- published table while its own DDL waits deadlocks (rowid-cdc's snapshot with a replica in
-- the same database did). The rules, as PostgreSQL's pg_publication.c applies them:
-- publishable = table or partitioned table, permanent, not a system object; FOR ALL TABLES =
-- publishable tables, and under publish_via_partition_root the partitioned roots instead of
-- their partitions; a listed or schema-published partitioned table stands for its leaves,
-- or for itself via the root, where a partition whose ancestor is also carried goes.
-- The test `publication_relids_equal_the_servers` compares it with pg_publication_tables.
CREATE FUNCTION pgtrickle.publication_relids(pubid pg_catalog.oid) RETURNS SETOF pg_catalog.oid
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  WITH RECURSIVE
  pub AS (
    SELECT p.puballtables AS alltables, p.pubviaroot AS viaroot
    FROM pg_catalog.pg_publication p WHERE p.oid OPERATOR(pg_catalog.=) pubid
  ),
  -- inlined where it is used (two places): materialized, it read all of pg_class for
  -- every publication, also one that names its tables
  publishable AS NOT MATERIALIZED (
    SELECT c.oid, c.relkind, c.relispartition, c.relnamespace FROM pg_catalog.pg_class c
    WHERE c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[])
      AND c.relpersistence OPERATOR(pg_catalog.=) 'p'
      AND c.oid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid
  ),
  named(relid) AS (
    SELECT pr.prrelid FROM pg_catalog.pg_publication_rel pr
    WHERE pr.prpubid OPERATOR(pg_catalog.=) pubid
    UNION
    SELECT t.oid FROM pg_catalog.pg_publication_namespace pn
    JOIN publishable t ON t.relnamespace OPERATOR(pg_catalog.=) pn.pnnspid
    WHERE pn.pnpubid OPERATOR(pg_catalog.=) pubid
  ),
  -- without publish_via_partition_root, a named partitioned table's partitions, all levels
  below(relid, relkind) AS (
    SELECT c.oid, c.relkind FROM named n
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) n.relid
    CROSS JOIN pub WHERE NOT pub.viaroot AND c.relkind OPERATOR(pg_catalog.=) 'p'
    UNION
    SELECT c.oid, c.relkind FROM below b
    JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) b.relid
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
  ),
  carried(relid) AS (
    SELECT n.relid FROM named n
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) n.relid
    CROSS JOIN pub WHERE pub.viaroot OR c.relkind OPERATOR(pg_catalog.<>) 'p'
    UNION
    SELECT b.relid FROM below b WHERE b.relkind OPERATOR(pg_catalog.<>) 'p'
  ),
  -- under publish_via_partition_root, each carried partition's ancestors
  above(relid, ancestor) AS (
    SELECT c.relid, i.inhparent FROM carried c
    JOIN pg_catalog.pg_inherits i ON i.inhrelid OPERATOR(pg_catalog.=) c.relid
    CROSS JOIN pub WHERE pub.viaroot
    UNION
    SELECT a.relid, i.inhparent FROM above a
    JOIN pg_catalog.pg_class p ON p.oid OPERATOR(pg_catalog.=) a.ancestor AND p.relispartition
    JOIN pg_catalog.pg_inherits i ON i.inhrelid OPERATOR(pg_catalog.=) a.ancestor
  )
  SELECT t.oid FROM publishable t CROSS JOIN pub
  WHERE pub.alltables
    AND ((t.relkind OPERATOR(pg_catalog.=) 'r' AND NOT (t.relispartition AND pub.viaroot))
         OR (t.relkind OPERATOR(pg_catalog.=) 'p' AND pub.viaroot AND NOT t.relispartition))
  UNION
  SELECT c.relid FROM carried c CROSS JOIN pub
  WHERE NOT pub.alltables
    AND NOT EXISTS (
      SELECT 1 FROM above a
      JOIN pg_catalog.pg_class r ON r.oid OPERATOR(pg_catalog.=) a.relid AND r.relispartition
      JOIN carried o ON o.relid OPERATOR(pg_catalog.=) a.ancestor
      WHERE a.relid OPERATOR(pg_catalog.=) c.relid)
$fn$;
COMMENT ON FUNCTION pgtrickle.publication_relids(pg_catalog.oid) IS
  'The tables a publication carries (as pg_get_publication_tables), from the catalogs alone: no lock on any table';

-- The event-trigger functions run as the extension's owner, with a fixed search path and
-- every name qualified: any role's DDL must be able to write the schema, and none may steer
-- what is written. They run at the end of every DDL, so JIT is off for them: the catalog
-- queries are tiny, but a set-returning function's estimate (1000 rows per call, per
-- publication) passes jit_above_cost, and compiling them cost every DDL about a second on a
-- server built with LLVM (measured on PostgreSQL 15, with pg_publication_tables). Their
-- catalog queries take no lock on a table (pgtrickle.publication_relids). A table whose row
-- changes, and a table a publication DDL may publish now, is locked SHARE UPDATE EXCLUSIVE
-- (no writer waits for it; every DDL that can change an identity does) and its schema read
-- again, so that a concurrent key change cannot commit between that read and this DDL's
-- commit unseen (as PostgreSQL's own ALTER PUBLICATION ... ADD TABLE locks its tables); a
-- table whose row stays takes no lock.
-- The tables a DDL may have changed, from inside its ddl_command_end event trigger: tables
-- and the table of an index or constraint it made or altered, the tables a publication DDL
-- may publish now (`publishing`), and tables with a column of a type it changed (or of a
-- type made of one), each partitioned table with its whole tree and each partition with its
-- ancestors. Read from the catalogs alone: no lock on any table.
CREATE FUNCTION pgtrickle.ddl_touched_tables(OUT relid pg_catalog.oid, OUT publishing boolean)
RETURNS SETOF record
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
    WITH RECURSIVE
    cmd AS (SELECT classid, objid FROM pg_catalog.pg_event_trigger_ddl_commands()),
    -- ALTER TYPE / ALTER DOMAIN (a pg_type object), ALTER TYPE ... ADD | DROP | ALTER
    -- ATTRIBUTE of a composite (a pg_class object of relkind c), the row type of a table a
    -- DDL altered (a column of another table can be of it), and every type made of one:
    -- an array of it, a domain over it, a range over it, a multirange of such a range, a
    -- composite with an attribute of it. PostgreSQL records each of these as a dependency on
    -- the part (pg_depend), so the walk goes through pg_depend's index on the referenced
    -- object: its cost follows the types made of the changed one, not the size of pg_type
    -- and pg_attribute. (A built-in type has no dependencies recorded, and no DDL changes
    -- one.)
    changed_type(oid) AS (
      SELECT cmd.objid FROM cmd
      WHERE cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
      UNION
      SELECT c.reltype FROM cmd JOIN pg_catalog.pg_class c
        ON cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND c.oid OPERATOR(pg_catalog.=) cmd.objid
       AND c.reltype OPERATOR(pg_catalog.<>) 0
      UNION
      SELECT CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                  THEN d.objid ELSE c.reltype END
      FROM changed_type ct
      JOIN pg_catalog.pg_depend d
        ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) ct.oid
      LEFT JOIN pg_catalog.pg_class c
        ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND c.oid OPERATOR(pg_catalog.=) d.objid
      WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
         OR (c.relkind OPERATOR(pg_catalog.=) 'c' AND d.objsubid OPERATOR(pg_catalog.>) 0)
    ),
    -- what a publication DDL may publish now
    by_publication(relid) AS (
      -- CREATE / ALTER PUBLICATION: every table the publication now carries
      SELECT pt.relid FROM cmd
      JOIN pg_catalog.pg_publication p
        ON cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_publication'::pg_catalog.regclass
       AND p.oid OPERATOR(pg_catalog.=) cmd.objid
      CROSS JOIN LATERAL pgtrickle.publication_relids(p.oid) pt(relid)
      UNION
      -- ALTER PUBLICATION ... ADD TABLE
      SELECT pr.prrelid FROM cmd JOIN pg_catalog.pg_publication_rel pr
        ON cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_publication_rel'::pg_catalog.regclass
       AND pr.oid OPERATOR(pg_catalog.=) cmd.objid
      UNION
      -- ALTER PUBLICATION ... ADD TABLES IN SCHEMA: the tables of that schema
      SELECT c.oid FROM cmd JOIN pg_catalog.pg_publication_namespace pn
        ON cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_publication_namespace'::pg_catalog.regclass
       AND pn.oid OPERATOR(pg_catalog.=) cmd.objid
      JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) pn.pnnspid
    ),
    -- and their partitions, all levels
    published_now(relid) AS (
      SELECT relid FROM by_publication
      UNION
      SELECT i.inhrelid FROM published_now d
      JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) d.relid
    ),
    touched(relid) AS (
      -- tables, and the table of an index (CREATE INDEX [CONCURRENTLY], ALTER INDEX)
      SELECT CASE WHEN c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['i', 'I']::pg_catalog."char"[])
                  THEN i.indrelid ELSE c.oid END
      FROM cmd JOIN pg_catalog.pg_class c
        ON cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND c.oid OPERATOR(pg_catalog.=) cmd.objid
      LEFT JOIN pg_catalog.pg_index i ON i.indexrelid OPERATOR(pg_catalog.=) c.oid
      UNION
      -- constraints (primary keys, unique constraints)
      SELECT con.conrelid FROM cmd JOIN pg_catalog.pg_constraint con
        ON cmd.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass
       AND con.oid OPERATOR(pg_catalog.=) cmd.objid
      UNION
      SELECT relid FROM by_publication
      UNION
      -- a changed type: tables with a column of it or of a type made of it (a column's
      -- dependency on its type, through pg_depend's index as above)
      SELECT d.objid FROM changed_type ct
      JOIN pg_catalog.pg_depend d
        ON d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) ct.oid
       AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
       AND d.objsubid OPERATOR(pg_catalog.>) 0
    ),
    tables(relid) AS (
      SELECT t.relid FROM touched t JOIN pg_catalog.pg_class c
        ON c.oid OPERATOR(pg_catalog.=) t.relid
       AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[])
    ),
    -- a partitioned table stands for its whole tree (a key added to it reaches every leaf,
    -- ATTACH and DETACH change its leaves); a partition for its ancestors (a leaf's replica
    -- identity decides whether the root's identity holds). Read from pg_inherits, not with
    -- pg_partition_tree(), which locks every partition: see pgtrickle.publication_relids.
    down(relid) AS (
      SELECT relid FROM tables
      UNION
      SELECT i.inhrelid FROM down d
      JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) d.relid
      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid AND c.relispartition
    ),
    up(relid) AS (
      SELECT relid FROM tables
      UNION
      SELECT i.inhparent FROM up u
      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) u.relid AND c.relispartition
      JOIN pg_catalog.pg_inherits i ON i.inhrelid OPERATOR(pg_catalog.=) u.relid
    ),
    expanded(relid) AS (SELECT relid FROM down UNION SELECT relid FROM up)
    SELECT e.relid, EXISTS (SELECT 1 FROM published_now p
                            WHERE p.relid OPERATOR(pg_catalog.=) e.relid)
    FROM expanded e ORDER BY 1
$fn$;
REVOKE EXECUTE ON FUNCTION pgtrickle.ddl_touched_tables() FROM PUBLIC;

CREATE FUNCTION pgtrickle.identity_messages_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
DECLARE
  candidates pg_catalog.oid[];
  publishing pg_catalog.oid[];
BEGIN
  SELECT COALESCE(pg_catalog.array_agg(t.relid ORDER BY t.relid), '{}'),
         COALESCE(pg_catalog.array_agg(t.relid ORDER BY t.relid) FILTER (WHERE t.publishing),
                  '{}')
  INTO candidates, publishing
  FROM pgtrickle.ddl_touched_tables() t;
  -- Which candidates are published, and which published tables have no row yet, is decided
  -- by the function under a snapshot of its own (a publication committed while this DDL
  -- waited for a lock counts); the tables this DDL may publish are locked before their
  -- schema is read.
  PERFORM pgtrickle.write_published_identity_schemas(candidates, publishing);
END
$fn$;

-- A table rewrite (format 5): noted before the rewrite, read by the ddl_command_end that
-- follows in the same transaction (spec/identity-messages.md §4).
CREATE FUNCTION pgtrickle.identity_messages_on_rewrite() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
BEGIN
  PERFORM pgtrickle.note_table_rewrite(pg_catalog.pg_event_trigger_table_rewrite_oid(),
                                       pg_catalog.pg_event_trigger_table_rewrite_reason());
END
$fn$;

CREATE FUNCTION pgtrickle.identity_messages_on_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
DECLARE
  dropped pg_catalog.oid[];
  dropped_index pg_catalog.oid[];
  dropped_column pg_catalog.oid[];
BEGIN
  SELECT pg_catalog.array_agg(DISTINCT objid) INTO dropped
  FROM pg_catalog.pg_event_trigger_dropped_objects()
  WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
    AND objsubid OPERATOR(pg_catalog.=) 0 AND object_type OPERATOR(pg_catalog.=) 'table';
  SELECT pg_catalog.array_agg(DISTINCT objid) INTO dropped_index
  FROM pg_catalog.pg_event_trigger_dropped_objects()
  WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
    AND object_type OPERATOR(pg_catalog.=) 'index';
  SELECT pg_catalog.array_agg(DISTINCT objid) INTO dropped_column
  FROM pg_catalog.pg_event_trigger_dropped_objects()
  WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
    AND objsubid OPERATOR(pg_catalog.>) 0;
  -- A dropped table's row goes: the WAL carries its DELETE, which says "dropped".
  DELETE FROM pgtrickle.identity_schemas s WHERE s.relid OPERATOR(pg_catalog.=) ANY (dropped);
  -- What the DROP touched and still exists: tables whose key came from a dropped index, or
  -- from an index that no longer exists under the OID the row records (REINDEX INDEX
  -- CONCURRENTLY gives the index a new OID and, before PostgreSQL 17, fires no event
  -- trigger), that lost a column (DROP TYPE ... CASCADE), or partitioned tables that may have
  -- lost a leaf.
  PERFORM pgtrickle.write_identity_schemas(ARRAY(
    SELECT s.relid FROM pgtrickle.identity_schemas s
    WHERE s.key_index OPERATOR(pg_catalog.=) ANY (dropped_index)
       OR (s.key_index IS NOT NULL AND NOT EXISTS (
             SELECT 1 FROM pg_catalog.pg_index i
             WHERE i.indexrelid OPERATOR(pg_catalog.=) s.key_index))
       OR s.relid OPERATOR(pg_catalog.=) ANY (dropped_column)
       OR (dropped IS NOT NULL AND EXISTS (
             SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) s.relid
               AND c.relkind OPERATOR(pg_catalog.=) 'p'))
    ORDER BY 1));
END
$fn$;

CREATE FUNCTION pgtrickle.enable_identity_messages() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger
                 WHERE evtname OPERATOR(pg_catalog.=) 'pgtrickle_identity_ddl') THEN
    CREATE EVENT TRIGGER pgtrickle_identity_ddl ON ddl_command_end
      EXECUTE FUNCTION pgtrickle.identity_messages_on_ddl();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger
                 WHERE evtname OPERATOR(pg_catalog.=) 'pgtrickle_identity_drop') THEN
    CREATE EVENT TRIGGER pgtrickle_identity_drop ON sql_drop
      EXECUTE FUNCTION pgtrickle.identity_messages_on_drop();
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger
                 WHERE evtname OPERATOR(pg_catalog.=) 'pgtrickle_identity_rewrite') THEN
    CREATE EVENT TRIGGER pgtrickle_identity_rewrite ON table_rewrite
      EXECUTE FUNCTION pgtrickle.identity_messages_on_rewrite();
  END IF;
  -- Every table published now gets its row (or has it brought up to date).
  PERFORM pgtrickle.write_identity_schemas(ARRAY(
    SELECT DISTINCT r.relid FROM pg_catalog.pg_publication p
    CROSS JOIN LATERAL pgtrickle.publication_relids(p.oid) r(relid) ORDER BY 1));
END
$fn$;
COMMENT ON FUNCTION pgtrickle.enable_identity_messages() IS
  'Writes each published table''s identity schema into pgtrickle.identity_schemas (published by pgtrickle_identity) at the end of every DDL that can change it (superuser; run disable_identity_messages() before DROP EXTENSION)';

CREATE FUNCTION pgtrickle.disable_identity_messages() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
  DROP EVENT TRIGGER IF EXISTS pgtrickle_identity_ddl;
  DROP EVENT TRIGGER IF EXISTS pgtrickle_identity_drop;
  DROP EVENT TRIGGER IF EXISTS pgtrickle_identity_rewrite;
$fn$;
REVOKE EXECUTE ON FUNCTION pgtrickle.enable_identity_messages() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgtrickle.disable_identity_messages() FROM PUBLIC;

-- What a capture role needs beyond REPLICATION (and SELECT on the tables it snapshots):
-- USAGE on pgtrickle is PUBLIC's already; USAGE and CREATE on pgtrickle_changes let
-- rowid-cdc's PostgreSQL sink create and write its buffer there.
CREATE FUNCTION pgtrickle.grant_capture(capture_role pg_catalog.regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  EXECUTE pg_catalog.format('GRANT USAGE, CREATE ON SCHEMA pgtrickle_changes TO %s',
                            capture_role);
END
$fn$;
REVOKE EXECUTE ON FUNCTION pgtrickle.grant_capture(pg_catalog.regrole) FROM PUBLIC;
COMMENT ON FUNCTION pgtrickle.grant_capture(pg_catalog.regrole) IS
  'Grants a capture role (LOGIN REPLICATION) what rowid-cdc needs beyond REPLICATION: USAGE and CREATE on pgtrickle_changes (superuser)';
"#,
    name = "identity_messages",
    requires = [
        pgtrickle::identity_schema,
        pgtrickle::write_identity_schemas,
        pgtrickle::write_published_identity_schemas,
        pgtrickle::note_table_rewrite
    ]
);

extension_sql!(
    r#"
-- Trigger buffers follow their source's columns in the DDL's own transaction
-- (spec/change-buffer.md §1c), and mark a redefinition of its identities or a rewrite of its
-- values with an `R` row (§1d): at the end of every ALTER TABLE and ALTER TYPE, as the
-- extension's owner, who alters each touched source's buffer as that buffer's owner. Table
-- rewrites are noted for it by pgtrickle_capture_rewrite (the function identity messages
-- use; the note is the backend's, for the transaction).
REVOKE EXECUTE ON FUNCTION pgtrickle.follow_source_ddl(pg_catalog.oid[]) FROM PUBLIC;
CREATE FUNCTION pgtrickle.capture_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
BEGIN
  PERFORM pgtrickle.follow_source_ddl(ARRAY(
    SELECT t.relid FROM pgtrickle.ddl_touched_tables() t ORDER BY 1));
END
$fn$;
CREATE EVENT TRIGGER pgtrickle_capture_ddl ON ddl_command_end
  WHEN TAG IN ('ALTER TABLE', 'ALTER TYPE')
  EXECUTE FUNCTION pgtrickle.capture_on_ddl();
CREATE EVENT TRIGGER pgtrickle_capture_rewrite ON table_rewrite
  EXECUTE FUNCTION pgtrickle.identity_messages_on_rewrite();
-- In every session_replication_role: a rewrite not noted is a rewrite not marked.
ALTER EVENT TRIGGER pgtrickle_capture_rewrite ENABLE ALWAYS;
"#,
    name = "capture_ddl",
    requires = [pgtrickle::follow_source_ddl, "identity_messages"]
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    // pgrx's harness calls every test in schema `tests`: one module, several files.
    include!("tests.rs");
    include!("tests_fields.rs");
    include!("tests_capture.rs");
    include!("tests_hardening.rs");
    include!("tests_owner.rs");
    include!("tests_images.rs");
    include!("tests_stream.rs");
    include!("tests_stream_oracle.rs");
    include!("tests_stream_graph.rs");
    include!("tests_stream_rebuild.rs");
    include!("tests_stream_publish.rs");
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
