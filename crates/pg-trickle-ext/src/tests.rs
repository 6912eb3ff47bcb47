// Tests inside PostgreSQL (`cargo pgrx test`): the extension against the codec.
// Included into the `#[pg_schema] mod tests` of lib.rs (pgrx needs an inline module).

use pgrx::prelude::*;
use rowid_codec::{OwnedValue, encode_identity};
use rowid_testkit::hex::to_hex;
use rowid_testkit::sql::quote;
use rowid_vectors::families;

fn hex_of(sql: &str) -> String {
    Spi::get_one::<String>(&format!("SELECT encode(({sql}), 'hex')"))
        .expect("query runs")
        .expect("not NULL")
}

/// Every golden vector's SQL literal, encoded inside the server by the record form and by the
/// argument form, equals the vector's bytes.
#[pg_test]
fn golden_vectors_encode_identically_inside_the_server() {
    let major = pg_sys::PG_VERSION_NUM / 10_000;
    let (mut checked, mut newer, mut unrepresentable, mut no_fields) = (0, 0, 0, 0);
    for family in families() {
        for setup in &family.setup {
            Spi::run(setup).expect("vector setup runs");
        }
        for case in &family.valid {
            if case.flags.contains(&"pg17") && major < 17 {
                newer += 1;
                continue;
            }
            let sqls: Option<Vec<String>> = case.fields.iter().map(|f| f.sql.clone()).collect();
            let Some(sqls) = sqls else {
                unrepresentable += 1;
                continue;
            };
            let values: Vec<_> = case
                .fields
                .iter()
                .map(|f| (f.tag, f.value.as_ref().map(OwnedValue::as_value)))
                .collect();
            let mut expected = Vec::new();
            encode_identity(&mut expected, case.domain, &values).expect("vector encodes");
            let got = hex_of(&format!(
                "pgtrickle.encode_row_id_v2('{}', ROW({}))",
                case.domain.name(),
                sqls.join(", ")
            ));
            assert_eq!(got, to_hex(&expected), "{}: {}", family.file, case.comment);
            // The argument form: the same bytes without the ROW (it needs one field at
            // least: VARIADIC takes one or more arguments).
            if sqls.is_empty() {
                no_fields += 1;
                checked += 1;
                continue;
            }
            let fields = hex_of(&format!(
                "pgtrickle.encode_row_id_v2_fields('{}', {})",
                case.domain.name(),
                sqls.join(", ")
            ));
            assert_eq!(
                fields,
                to_hex(&expected),
                "encode_row_id_v2_fields, {}: {}",
                family.file,
                case.comment
            );
            checked += 1;
        }
    }
    pgrx::notice!(
        "golden vectors: {checked} encoded in PostgreSQL {major} and equal ({no_fields} without \
         fields, record form only); {newer} need a newer major; {unrepresentable} have no SQL \
         literal"
    );
    assert!(checked >= 120, "only {checked} vectors checked");
}

/// `row_probe_v1` inside the server equals the codec's probe for the frozen P.
#[pg_test]
fn probe_matches_the_codec() {
    for len in [0usize, 10, 128, 129, 300, 5000] {
        let id: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut want = Vec::new();
        rowid_codec::probe_v1(&id, &mut want);
        let got = hex_of(&format!(
            "pgtrickle.row_probe_v1('\\x{}'::bytea)",
            to_hex(&id)
        ));
        assert_eq!(got, to_hex(&want), "length {len}");
    }
}

#[pg_test]
#[should_panic(expected = "type has no proven V2 encoder")]
fn unsupported_types_are_rejected() {
    hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1::money))");
}

#[pg_test]
#[should_panic(expected = "unknown identity domain")]
fn unknown_domains_are_rejected() {
    hex_of("pgtrickle.encode_row_id_v2('PRIMARY', ROW(1))");
}

#[pg_test]
#[should_panic(expected = "fields must not be NULL")]
fn null_records_are_rejected() {
    hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', NULL::record)");
}

/// One call site sees records of different types (a typmod change rebuilds the cache).
#[pg_test]
fn call_site_cache_follows_the_record_type() {
    let rows = Spi::get_one::<i64>(
        "SELECT count(DISTINCT pgtrickle.encode_row_id_v2('KEYLESS_ROW', r)) FROM \
         (VALUES (ROW(1)), (ROW('a'::text)), (ROW(1)), (ROW(1, 2))) AS v(r)",
    );
    assert_eq!(rows, Ok(Some(3)));
}

/// Renaming an enum label changes the bytes on the next call (labels are never cached).
#[pg_test]
fn enum_labels_are_read_per_call() {
    Spi::run("CREATE TYPE mood_t AS ENUM ('sad', 'ok')").expect("create type");
    let before = hex_of("pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('sad'::mood_t))");
    Spi::run("ALTER TYPE mood_t RENAME VALUE 'sad' TO 'blue'").expect("rename");
    let after = hex_of("pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('blue'::mood_t))");
    assert_ne!(before, after);
    assert!(after.contains(&to_hex(b"blue")));
}

#[pg_test]
fn describe_is_not_executable_by_public() {
    Spi::run("CREATE ROLE rowid_nobody").expect("role");
    let can = |f: &str| {
        Spi::get_one::<bool>(&format!(
            "SELECT has_function_privilege('rowid_nobody', 'pgtrickle.{f}(bytea)', 'EXECUTE')"
        ))
        .expect("query")
        .expect("not NULL")
    };
    assert!(!can("row_id_describe"));
    assert!(can("row_id_fingerprint"));
    assert!(can("row_probe_v1"));
    let text = Spi::get_one::<String>(
        "SELECT pgtrickle.row_id_describe(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(42, 'ab'::text, NULL::int8)))",
    );
    assert_eq!(text, Ok(Some("SCAN_KEY(int4 42, text \"ab\", int8 NULL)".to_string())));
}

#[pg_test]
#[should_panic(expected = "not a Row Identity V2")]
fn describe_rejects_garbage() {
    Spi::get_one::<String>("SELECT pgtrickle.row_id_describe('\\x0102'::bytea)").ok();
}

/// The same values give the same bytes whatever the session's formatting settings.
#[pg_test]
fn identities_do_not_depend_on_settings() {
    for family in families() {
        for setup in &family.setup {
            Spi::run(setup).expect("vector setup runs");
        }
    }
    let exprs: Vec<String> = families()
        .iter()
        .flat_map(|f| f.valid.clone())
        .filter(|c| !c.flags.contains(&"pg17"))
        .filter_map(|c| {
            let sqls: Option<Vec<String>> = c.fields.iter().map(|f| f.sql.clone()).collect();
            Some(format!(
                "encode(pgtrickle.encode_row_id_v2('{}', ROW({})), 'hex')",
                c.domain.name(),
                sqls?.join(", ")
            ))
        })
        .collect();
    let all = format!("SELECT array_to_string(ARRAY[{}], ',')", exprs.join(", "));
    let baseline = Spi::get_one::<String>(&all).expect("query").expect("not NULL");
    let settings = [
        "SET DateStyle = 'SQL, DMY'",
        "SET DateStyle = 'German'",
        "SET IntervalStyle = 'sql_standard'",
        "SET IntervalStyle = 'iso_8601'",
        "SET TimeZone = 'Asia/Kathmandu'",
        "SET TimeZone = 'America/St_Johns'",
        "SET bytea_output = 'escape'",
        "SET extra_float_digits = -3",
        "SET extra_float_digits = 3",
        "SET lc_numeric = 'C.UTF-8'",
        "SET lc_time = 'C.UTF-8'",
        "SET search_path = public, pg_catalog",
    ];
    for set in settings {
        Spi::run(set).expect("setting applies");
        let again = Spi::get_one::<String>(&all).expect("query").expect("not NULL");
        assert_eq!(again, baseline, "identities changed after {set}");
    }
    assert!(exprs.len() >= 120);
}

fn nest(levels: usize) -> String {
    let mut id = hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1))");
    for _ in 0..levels {
        id = hex_of(&format!(
            "pgtrickle.encode_row_id_v2('JOIN_KEY', ROW('\\x{id}'::bytea::pgtrickle.row_id))"
        ));
    }
    id
}

#[pg_test]
fn nesting_up_to_the_depth_limit_works() {
    let id = nest(31);
    let depth = Spi::get_one::<String>(&format!("SELECT pgtrickle.row_id_describe('\\x{id}'::bytea)"))
        .expect("query")
        .expect("not NULL")
        .matches("JOIN_KEY(").count();
    assert_eq!(depth, 31);
}

#[pg_test]
#[should_panic(expected = "MAX_DEPTH")]
fn nesting_beyond_the_depth_limit_is_an_error() {
    nest(32);
}

#[pg_test]
#[should_panic(expected = "unknown row identity version byte 0x01")]
fn invalid_child_identities_are_rejected() {
    hex_of("pgtrickle.encode_row_id_v2('JOIN_KEY', ROW('\\x01'::bytea::pgtrickle.row_id))");
}

/// Out-of-line and compressed values are detoasted and encode like the same value inline.
#[pg_test]
fn toasted_values_encode_like_inline_ones() {
    Spi::run(
        "CREATE TABLE big (id int, t text, b bytea);
         ALTER TABLE big ALTER COLUMN t SET STORAGE EXTERNAL;
         INSERT INTO big VALUES (1, repeat('abcdefgh', 20000), NULL),
                                (2, repeat('z', 1000000), decode(repeat('00ff', 50000), 'hex'))",
    )
    .expect("setup");
    for id in [1, 2] {
        let stored = hex_of(&format!(
            "(SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(t, b)) FROM big WHERE id = {id})"
        ));
        let inline = hex_of(&format!(
            "(SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(t || '', b || ''::bytea)) FROM big WHERE id = {id})"
        ));
        assert_eq!(stored, inline);
    }
    let len = Spi::get_one::<i32>(
        "SELECT length(pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(t))) FROM big WHERE id = 2",
    );
    assert_eq!(len, Ok(Some(7 + 2 + 1_000_000 + 2)));
}

fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmHWM")
}

/// 10^6 encodes in one query: the backend's peak memory does not grow with the row count.
#[pg_test]
fn memory_stays_flat_over_a_million_rows() {
    let run = |n: u64| {
        Spi::get_one::<i64>(&format!(
            "SELECT count(DISTINCT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(g, g::text, g::numeric / 7))) \
             FROM generate_series(1, {n}) g"
        ))
        .expect("query")
    };
    assert_eq!(run(100_000), Some(100_000));
    let before = peak_rss_kb();
    // count(DISTINCT) keeps the identities (tens of MB), so measure a plain scan instead.
    let total = Spi::get_one::<i64>(
        "SELECT sum(length(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(g, g::text, g::numeric / 7)))) \
         FROM generate_series(1, 1000000) g",
    )
    .expect("query");
    assert!(total.is_some_and(|t| t > 30_000_000));
    let growth = peak_rss_kb().saturating_sub(before);
    pgrx::notice!("peak RSS growth over 10^6 encodes: {growth} kB");
    assert!(growth < 16 * 1024, "peak RSS grew by {growth} kB");
}

/// Forced equal probes for distinct identities: the probe index finds both candidates, the
/// full-identity recheck keeps only the exact row for UPDATE and DELETE.
#[pg_test]
fn forced_probe_collisions_match_only_the_exact_row() {
    Spi::run(
        "CREATE TABLE st (__pgt_row_id bytea NOT NULL, v int);
         CREATE INDEX st_probe ON st USING btree (pgtrickle.row_probe_forced_v1(__pgt_row_id));
         INSERT INTO st SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(repeat('k', 300) || x)), 0
         FROM unnest(ARRAY['a', 'b']) x;
         CREATE TABLE delta AS SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(repeat('k', 300) || 'a')) AS __pgt_row_id;
         ANALYZE st;",
    )
    .expect("setup");
    let probes = Spi::get_one::<i64>("SELECT count(DISTINCT pgtrickle.row_probe_forced_v1(__pgt_row_id)) FROM st");
    assert_eq!(probes, Ok(Some(1)), "the two identities must share a probe");
    let predicate = rowid_registry::sql::match_predicate(rowid_registry::IndexClass::ProbeExpression, "t", "d")
        .replace(rowid_registry::sql::PROBE_FN, "pgtrickle.row_probe_forced_v1");
    Spi::run("SET enable_seqscan = off").expect("set");
    let explain: Vec<String> = Spi::connect_mut(|c| {
        c.update(&format!("EXPLAIN UPDATE st AS t SET v = 1 FROM delta AS d WHERE {predicate}"), None, &[])
            .expect("explain")
            .map(|row| row.get::<String>(1).ok().flatten().unwrap_or_default())
            .collect()
    });
    assert!(explain.iter().any(|l| l.contains("st_probe")), "{explain:?}");
    Spi::run(&format!("UPDATE st AS t SET v = 1 FROM delta AS d WHERE {predicate}")).expect("update");
    let updated = Spi::get_one::<i64>("SELECT count(*) FROM st WHERE v = 1");
    assert_eq!(updated, Ok(Some(1)));
    Spi::run(&format!("DELETE FROM st AS t USING delta AS d WHERE {predicate}")).expect("delete");
    let left = Spi::get_one::<i64>("SELECT count(*) FROM st WHERE v = 0");
    assert_eq!(left, Ok(Some(1)), "the colliding row must survive");
    let gone = Spi::get_one::<i64>("SELECT count(*) FROM st");
    assert_eq!(gone, Ok(Some(1)));
}

/// Session A warms a call site (a PL/pgSQL simple expression keeps its executor state, and
/// so the encoder's fn_extra cache, for the whole transaction); session B renames the label
/// in use and commits; session A's next call through the same warm call site must produce
/// the new label's bytes, never stale ones.
#[pg_test]
fn enum_rename_in_another_backend_reaches_a_warm_call_site() {
    Spi::run("CREATE EXTENSION IF NOT EXISTS dblink").expect("dblink");
    let conn = Spi::get_one::<String>(
        "SELECT format('host=%s port=%s dbname=%s user=%s', \
         split_part(current_setting('unix_socket_directories'), ',', 1), \
         current_setting('port'), current_database(), current_user)",
    )
    .expect("query")
    .expect("not NULL");
    let in_b = |sql: &str| {
        Spi::run(&format!(
            "SELECT dblink_exec({}, {})",
            quote(&conn),
            quote(sql)
        ))
        .expect("session B statement");
    };
    in_b("DROP TABLE IF EXISTS rename_moods; DROP TYPE IF EXISTS rename_mood");
    in_b("CREATE TYPE rename_mood AS ENUM ('sad', 'ok')");
    in_b("CREATE TABLE rename_moods (m rename_mood); INSERT INTO rename_moods VALUES ('sad')");
    Spi::run(
        "CREATE FUNCTION enc_mood(m rename_mood) RETURNS text LANGUAGE plpgsql AS \
         $$ BEGIN RETURN encode(pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(m)), 'hex'); END $$",
    )
    .expect("function");
    let call = || {
        Spi::get_one::<String>("SELECT enc_mood(m) FROM rename_moods")
            .expect("query")
            .expect("not NULL")
    };
    let warm = call();
    assert_eq!(warm, call(), "the call site is warm and stable");
    assert!(warm.contains(&to_hex(b"sad")));
    in_b("ALTER TYPE rename_mood RENAME VALUE 'sad' TO 'blue'");
    let after = call();
    // No cleanup from session B here: it would wait for this transaction's locks. The next
    // run drops the objects before creating them.
    assert!(after.contains(&to_hex(b"blue")), "stale bytes after a committed rename: {after}");
    assert_ne!(after, warm);
}

/// (identity, index name, max bytes, index class, DDL, passed-over reasons)
type SourcePlan = (String, Option<String>, Option<i64>, String, String, String);

fn source_plan(rel: &str, mode: &str) -> SourcePlan {
    Spi::connect(|c| {
        let row = c
            .select(
                &format!(
                    "SELECT identity, index_name, max_identity_bytes, index_class, index_ddl, \
                     array_to_string(passed_over, ' | ') \
                     FROM pgtrickle.validate_source_identity('{rel}'::regclass, '{mode}')"
                ),
                None,
                &[],
            )?
            .first();
        Ok::<_, pgrx::spi::SpiError>((
            row.get::<String>(1)?.unwrap_or_default(),
            row.get::<String>(2)?,
            row.get::<i64>(3)?,
            row.get::<String>(4)?.unwrap_or_default(),
            row.get::<String>(5)?.unwrap_or_default(),
            row.get::<String>(6)?.unwrap_or_default(),
        ))
    })
    .expect("validate_source_identity")
}

/// Source relations through the real catalogs: the chosen key, the keyless fallback with
/// every passed-over index and its reason, and the planned index.
#[pg_test]
fn source_identities_are_validated_from_the_catalogs() {
    Spi::run(
        "CREATE TABLE s_int (id int8 PRIMARY KEY, v text);
         CREATE TABLE s_text (k text PRIMARY KEY);
         CREATE TABLE s_nullable (a int8, b int8, UNIQUE (a));
         CREATE TABLE s_nnd (a int8, UNIQUE NULLS NOT DISTINCT (a));
         CREATE TABLE s_partial (a int8 NOT NULL); CREATE UNIQUE INDEX s_partial_a ON s_partial (a) WHERE a > 0;
         CREATE TABLE s_expr (a text NOT NULL); CREATE UNIQUE INDEX s_expr_a ON s_expr (lower(a));
         CREATE TABLE s_defer (a int8 NOT NULL, CONSTRAINT s_defer_a UNIQUE (a) DEFERRABLE);
         CREATE TABLE s_ops (a text NOT NULL); CREATE UNIQUE INDEX s_ops_a ON s_ops (a text_pattern_ops);",
    )
    .expect("setup");
    let (identity, index, bytes, class, ddl, _) = source_plan("s_int", "immediate");
    assert_eq!((identity.as_str(), index.as_deref(), bytes, class.as_str()), ("SCAN_KEY", Some("public.s_int_pkey"), Some(17), "direct_unique"));
    assert!(ddl.starts_with("CREATE UNIQUE INDEX"), "{ddl}");
    let (identity, _, bytes, class, ddl, _) = source_plan("s_text", "refresh");
    assert_eq!((identity.as_str(), bytes, class.as_str()), ("SCAN_KEY", None, "probe_expression"));
    assert!(ddl.contains("pgtrickle.row_probe_v1") && !ddl.contains("UNIQUE"), "{ddl}");
    let (identity, _, _, _, _, _) = source_plan("s_nnd", "refresh");
    assert_eq!(identity, "SCAN_KEY");
    for (rel, reason, class) in [
        ("s_nullable", "nullable key column(s) a", "direct_non_unique"),
        ("s_partial", "partial index", "direct_non_unique"),
        ("s_expr", "expression index", "probe_expression"),
        ("s_defer", "deferrable", "direct_non_unique"),
        ("s_ops", "text_pattern_ops", "probe_expression"),
    ] {
        let (identity, index, _, got_class, _, passed) = source_plan(rel, "refresh");
        assert_eq!((identity.as_str(), index, got_class.as_str()), ("KEYLESS_ROW", None, class), "{rel}");
        assert!(passed.contains(reason), "{rel}: {passed}");
    }
}

#[pg_test]
#[should_panic(expected = "unique unbounded identity in IMMEDIATE mode")]
fn immediate_mode_rejects_unique_unbounded_identities() {
    Spi::run("CREATE TABLE s_text2 (k text PRIMARY KEY)").expect("setup");
    source_plan("s_text2", "immediate");
}

#[pg_test]
fn identity_fields_are_validated() {
    let row = Spi::get_two::<i64, String>(
        "SELECT max_identity_bytes, index_class FROM pgtrickle.validate_identity_fields(\
         'GROUP_KEY', ARRAY['int8'::regtype, 'varchar'::regtype]::oid[], ARRAY[-1, 68])",
    );
    assert_eq!(row, Ok((Some(7 + 10 + 260), Some("direct_unique".to_string()))));
}

#[pg_test]
#[should_panic(expected = "money output and arithmetic depend on lc_monetary")]
fn identity_fields_reject_unsupported_types() {
    Spi::run("SELECT * FROM pgtrickle.validate_identity_fields('GROUP_KEY', ARRAY['money'::regtype]::oid[])")
        .expect("rejected");
}

/// Validates `rel` (created by `setup`) with `require_key => true`.
fn require_key(setup: &str, rel: &str) {
    Spi::run(setup).expect("setup");
    Spi::run(&format!(
        "SELECT * FROM pgtrickle.validate_source_identity('{rel}'::regclass, require_key => true)"
    ))
    .expect("validated");
}

#[pg_test]
#[should_panic(expected = "nullable key column(s) a")]
fn required_key_rejects_nullable_nulls_distinct_indexes() {
    require_key("CREATE TABLE r1 (a int8, UNIQUE (a))", "r1");
}

#[pg_test]
#[should_panic(expected = "partial index")]
fn required_key_rejects_partial_indexes() {
    require_key(
        "CREATE TABLE r2 (a int8 NOT NULL); CREATE UNIQUE INDEX r2_a ON r2 (a) WHERE a > 0",
        "r2",
    );
}

#[pg_test]
#[should_panic(expected = "expression index")]
fn required_key_rejects_expression_indexes() {
    require_key(
        "CREATE TABLE r3 (a text NOT NULL); CREATE UNIQUE INDEX r3_a ON r3 (lower(a))",
        "r3",
    );
}

#[pg_test]
#[should_panic(expected = "deferrable constraint")]
fn required_key_rejects_deferrable_constraints() {
    require_key(
        "CREATE TABLE r4 (a int8 NOT NULL, CONSTRAINT r4_a UNIQUE (a) DEFERRABLE)",
        "r4",
    );
}

#[pg_test]
#[should_panic(expected = "no primary key or unique index")]
fn required_key_rejects_relations_without_keys() {
    require_key("CREATE TABLE r5 (a int8)", "r5");
}

/// Bounded unique storage: the direct UNIQUE index makes `ON CONFLICT (__pgt_row_id)`
/// authoritative; the registry's upsert updates the existing row in place.
#[pg_test]
fn bounded_unique_storage_upserts_on_the_row_id() {
    Spi::run(
        "CREATE TABLE src (id int8 PRIMARY KEY, v text);
         INSERT INTO src VALUES (1, 'a'), (2, 'b');
         CREATE TABLE st_src (__pgt_row_id bytea NOT NULL, v text);",
    )
    .expect("setup");
    let ddl = Spi::get_one::<String>("SELECT index_ddl FROM pgtrickle.validate_source_identity('src'::regclass)")
        .expect("query")
        .expect("ddl")
        .replace("\"src_storage\"", "st_src");
    assert!(ddl.starts_with("CREATE UNIQUE INDEX"), "{ddl}");
    Spi::run(&ddl).expect("index");
    Spi::run("INSERT INTO st_src SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), v FROM src")
        .expect("load");
    Spi::run(
        "UPDATE src SET v = 'a2' WHERE id = 1;
         CREATE TEMP TABLE d AS SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)) AS __pgt_row_id, v FROM src WHERE id = 1",
    )
    .expect("delta");
    let table = rowid_registry::sql::QualifiedName { schema: None, name: "st_src".into() };
    let upsert = rowid_registry::sql::upsert(rowid_registry::IndexClass::DirectUnique, &table, "d", &["v"])
        .expect("bounded unique upsert");
    Spi::run(&upsert).expect("upsert");
    assert_eq!(Spi::get_one::<i64>("SELECT count(*) FROM st_src"), Ok(Some(2)));
    assert_eq!(
        Spi::get_one::<String>(
            "SELECT v FROM st_src WHERE __pgt_row_id = pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1::int8))"
        ),
        Ok(Some("a2".to_string()))
    );
}

/// Non-deterministic collations are rejected in records and in field validation. Needs ICU,
/// which the system PostgreSQL 15 has and the PyPI PostgreSQL 18 build lacks
/// (`--without-icu`), so this test exists in PostgreSQL 15 builds only; the rule itself is
/// also tested in rowid-registry.
#[cfg(feature = "pg15")]
#[pg_test]
#[should_panic(expected = "collation \"ci_und\": non-deterministic collation")]
fn nondeterministic_collations_are_rejected() {
    Spi::run(
        "CREATE COLLATION ci_und (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
    )
    .expect("collation");
    hex_of("pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('A'::text COLLATE ci_und))");
}

/// A record nested inside the identity record is a structural field: rejected with its
/// position and type, never encoded by another rule.
#[pg_test]
#[should_panic(
    expected = "identity field \"field 2 (f2)\" of type record: anonymous structural type: an anonymous record"
)]
fn nested_records_are_rejected_with_context() {
    hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1, ROW(2, 3)))");
}

/// A named composite with a dropped attribute: the dropped column is skipped, the others
/// encode at their own positions.
#[pg_test]
fn dropped_attributes_are_skipped() {
    Spi::run("CREATE TYPE three AS (a int4, b int4, c text); ALTER TYPE three DROP ATTRIBUTE b")
        .expect("type");
    let named = hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1, 'x')::three)");
    let anonymous = hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1, 'x'::text))");
    assert_eq!(named, anonymous);
}

/// Structural values stored out of line (TOAST) encode like the same values built inline.
#[pg_test]
fn toasted_structures_encode_like_inline_ones() {
    Spi::run(
        "CREATE TABLE big_s (id int, a int4[], j jsonb);
         ALTER TABLE big_s ALTER COLUMN a SET STORAGE EXTERNAL;
         INSERT INTO big_s SELECT 1, array_agg(g), jsonb_object_agg(g::text, g)
           FROM generate_series(1, 20000) g",
    )
    .expect("setup");
    let stored = hex_of("(SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(a, j)) FROM big_s)");
    let inline = hex_of(
        "(SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(array_agg(g), jsonb_object_agg(g::text, g))) \
         FROM generate_series(1, 20000) g)",
    );
    assert_eq!(stored, inline);
}

/// A composite with a dropped attribute inside an array encodes like a composite without it.
#[pg_test]
fn dropped_attributes_inside_structures_are_skipped() {
    Spi::run(
        "CREATE TYPE tri AS (a int4, b int4, c text); ALTER TYPE tri DROP ATTRIBUTE b;
         CREATE TYPE duo AS (a int4, c text)",
    )
    .expect("types");
    let dropped = hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(ARRAY[ROW(1, 'x')::tri, NULL]))");
    let plain = hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(ARRAY[ROW(1, 'x')::duo, NULL]))");
    assert_eq!(dropped, plain);
}

/// Enum labels inside structures are read per call, like top-level enum fields.
#[pg_test]
fn enum_labels_inside_structures_are_current() {
    Spi::run(
        "CREATE TYPE mood_s AS ENUM ('sad', 'ok');
         CREATE TABLE moods (m mood_s[]);
         INSERT INTO moods VALUES (ARRAY['sad'::mood_s])",
    )
    .expect("setup");
    let q = "(SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(m)) FROM moods)";
    let before = hex_of(q);
    Spi::run("ALTER TYPE mood_s RENAME VALUE 'sad' TO 'blue'").expect("rename");
    let after = hex_of(q);
    assert_ne!(before, after);
    assert!(after.contains(&to_hex(b"blue")), "{after}");
}

/// A jsonb document nested deeper than MAX_DEPTH is an error, never another encoding.
#[pg_test]
#[should_panic(expected = "pgtrickle.encode_row_id_v2 (f1): resource limit MAX_DEPTH exceeded")]
fn deep_jsonb_exceeds_the_depth_limit() {
    let doc = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    hex_of(&format!("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW('{doc}'::jsonb))"));
}

/// An unsupported element type is rejected, naming the nesting position.
#[pg_test]
#[should_panic(expected = "element type money of money[]")]
fn unsupported_element_types_are_rejected_with_context() {
    hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(ARRAY[1::money]))");
}

/// Bounded structural identities (an int4range) index directly; jsonb is unbounded.
#[pg_test]
fn structural_fields_are_validated() {
    let range = Spi::get_two::<i64, String>(
        "SELECT max_identity_bytes, index_class FROM pgtrickle.validate_identity_fields(\
         'GROUP_KEY', ARRAY['int4range'::regtype]::oid[])",
    );
    // header 7 + tag, state, subtype tag, state, 2 x (marker, 4 bytes, inclusivity)
    assert_eq!(range, Ok((Some(7 + 4 + 12), Some("direct_unique".to_string()))));
    let doc = Spi::get_two::<i64, String>(
        "SELECT max_identity_bytes, index_class FROM pgtrickle.validate_identity_fields(\
         'GROUP_KEY', ARRAY['jsonb'::regtype]::oid[], uniqueness => 'multiset')",
    );
    assert_eq!(doc.map(|(bytes, _)| bytes), Ok(None));
}

/// The identity schema message `query` returns, parsed back with the registry's strict
/// reader.
fn schema_from(query: &str) -> rowid_registry::schema_message::RelationSchema {
    use rowid_registry::schema_message::SchemaMessage;
    let json = Spi::get_one::<String>(query).expect("runs").expect("not NULL");
    match SchemaMessage::parse(json.as_bytes()).expect("a valid identity schema message") {
        SchemaMessage::Schema(s) => s,
        other => panic!("{other:?}"),
    }
}

/// The identity schema message of a table, as `pgtrickle.identity_schema` computes it.
fn identity_schema_of(table: &str) -> rowid_registry::schema_message::RelationSchema {
    schema_from(&format!("SELECT pgtrickle.identity_schema('{table}'::regclass)"))
}

/// identity_schema gives the key validate_source_identity chooses, with the shapes of user
/// types resolved, the columns pgoutput publishes and the replica identity.
#[pg_test]
fn identity_schema_messages_describe_the_key() {
    use rowid_codec::structure::Shape;
    use rowid_codec::{Domain, TypeTag};
    use rowid_registry::schema_message::ReplicaIdentity;
    Spi::run(
        "CREATE TYPE im_mood AS ENUM ('sad', 'happy');
         CREATE DOMAIN im_pos AS int4 CHECK (VALUE > 0);
         CREATE TABLE im_keyed (region text COLLATE \"C\", id im_pos, mood im_mood[],
                                note text, g int GENERATED ALWAYS AS (1) STORED,
                                PRIMARY KEY (region, id));
         CREATE TABLE im_keyless (a int8, b text);
         ALTER TABLE im_keyless REPLICA IDENTITY FULL;",
    )
    .expect("setup");
    let s = identity_schema_of("im_keyed");
    let namespace = Spi::get_one::<String>(
        "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'im_keyed'::regclass",
    )
    .expect("runs")
    .expect("a schema");
    assert_eq!((s.namespace.as_str(), s.relname.as_str()), (namespace.as_str(), "im_keyed"));
    assert_eq!(s.replica_identity, ReplicaIdentity::Default);
    assert_eq!(s.primary_key, ["region", "id"]);
    let cols: Vec<&str> = s.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cols, ["region", "id", "mood", "note"], "generated columns are not published");
    assert!(s.columns[0].not_null && !s.columns[3].not_null);
    // Format 3: each column's type name (qualified under the locked path, whatever the
    // caller's) and the shape its image values are read with, a domain's its base's.
    let types: Vec<(Option<&str>, Option<&Shape>)> = s
        .columns
        .iter()
        .map(|c| (c.type_name.as_deref(), c.shape.as_ref()))
        .collect();
    let (im_pos, im_mood) = (format!("{namespace}.im_pos"), format!("{namespace}.im_mood[]"));
    assert_eq!(
        types,
        [
            (Some("text"), Some(&Shape::Scalar(TypeTag::Text))),
            (Some(im_pos.as_str()), Some(&Shape::Scalar(TypeTag::Int4))),
            (
                Some(im_mood.as_str()),
                Some(&Shape::Array(Box::new(Shape::Scalar(TypeTag::Enum))))
            ),
            (Some("text"), Some(&Shape::Scalar(TypeTag::Text))),
        ]
    );
    let def = s.identity.expect("a key");
    assert_eq!((def.domain, def.primary), (Domain::ScanKey, true));
    assert_eq!(def.index.as_deref(), Some("public.im_keyed_pkey"));
    let domain_oid = Spi::get_one::<pg_sys::Oid>("SELECT 'im_pos'::regtype::oid")
        .expect("runs")
        .expect("oid");
    assert_eq!(def.fields[1].type_oid, u32::from(domain_oid), "a domain's own OID, as pgoutput sends");
    assert_eq!(def.fields[1].shape, Shape::Scalar(TypeTag::Int4));

    let s = identity_schema_of("im_keyless");
    assert_eq!(s.replica_identity, ReplicaIdentity::Full);
    let def = s.identity.expect("keyless");
    assert_eq!(def.domain, Domain::KeylessRow);
    assert_eq!(def.fields.len(), 2);
}

/// A table with no usable identity carries the registry's refusal, and a non-table is an
/// error naming the function.
#[pg_test]
fn identity_schema_messages_carry_refusals() {
    // No index, and a column type without a proven encoder: neither a key nor a keyless
    // identity.
    Spi::run("CREATE TABLE im_point (x int8, y point);").expect("setup");
    let s = identity_schema_of("im_point");
    // The point column has no image shape either: its values travel as their send form.
    assert_eq!(s.columns[1].type_name.as_deref(), Some("point"));
    assert_eq!(s.columns[1].shape, None);
    let refusal = s.identity.expect_err("no identity");
    assert_eq!(refusal.sqlstate, "0A000");
    assert!(refusal.message.contains("point"), "{}", refusal.message);
}

#[pg_test]
#[should_panic(expected = "pgtrickle.identity_schema: OID")]
fn identity_schema_of_a_non_table_is_an_error() {
    Spi::run("CREATE SEQUENCE im_seq;").expect("setup");
    let _ = identity_schema_of("im_seq");
}

/// The row the identity-message event triggers wrote for `table`, parsed back.
fn written_schema_of(table: &str) -> rowid_registry::schema_message::RelationSchema {
    schema_from(&format!(
        "SELECT schema FROM pgtrickle.identity_schemas WHERE relid = '{table}'::regclass"
    ))
}

/// Issue 36 item 14, format 7: `ADD COLUMN ... DEFAULT` of a type without a binary send
/// function (`aclitem`; an array or a composite holding one) on a published table. The event
/// trigger took `array_send(attmissingval)`, which raised and failed the user's DDL. The DDL
/// succeeds; each such column says its rows hold a value the message cannot carry
/// (`missing_without_send_form`), and the other columns' missing values are still carried.
#[pg_test]
fn a_default_of_a_type_without_a_send_function_fails_no_ddl() {
    Spi::run(
        "SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE im_acl_pair AS (n int4, a aclitem);
         CREATE TABLE im_acl (id int8 PRIMARY KEY);
         CREATE PUBLICATION im_acl FOR TABLE im_acl;
         INSERT INTO im_acl VALUES (1);
         ALTER TABLE im_acl ADD COLUMN a aclitem DEFAULT 'postgres=r/postgres',
                            ADD COLUMN l aclitem[] DEFAULT '{postgres=r/postgres}',
                            ADD COLUMN p im_acl_pair DEFAULT ROW(1, 'postgres=r/postgres'),
                            ADD COLUMN c int4 DEFAULT 7,
                            ADD COLUMN z aclitem;",
    )
    .expect("the DDL succeeds");
    let s = written_schema_of("im_acl");
    let missing: Vec<(&str, Option<&[u8]>, bool)> = s
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.missing.as_deref(), c.missing_without_send_form))
        .collect();
    assert_eq!(
        missing,
        [
            ("id", None, false),
            ("a", None, true),
            ("l", None, true),
            ("p", None, true),
            ("c", Some(&[0u8, 0, 0, 7][..]), false),
            ("z", None, false),
        ],
        "no default: NULL, nothing missing"
    );
}

/// Format 5: what rows stored before a column hold (`missing`, from `attmissingval`), and
/// whether a DDL rewrote the table's values (`rewritten`, noted by the `table_rewrite` event
/// trigger), in the rows the event triggers write. A pgrx test is one transaction, so every
/// rewrite below is noted for the rest of it: the tables are checked in the order that keeps
/// each claim apart.
#[pg_test]
fn identity_schema_rows_carry_missing_values_and_rewrites() {
    use rowid_registry::schema_message::Rewrite;
    Spi::run(
        "SELECT pgtrickle.enable_identity_messages();
         CREATE TABLE im_add (id int8 PRIMARY KEY, v int4);
         CREATE TABLE im_same (id int8 PRIMARY KEY, v int4);
         -- A rewrite for persistence (reason 1; a published table cannot be unlogged).
         CREATE UNLOGGED TABLE im_logged (id int8 PRIMARY KEY);
         INSERT INTO im_logged VALUES (1);
         ALTER TABLE im_logged SET LOGGED;
         CREATE PUBLICATION im_rw FOR TABLE im_add, im_same, im_logged;
         INSERT INTO im_add VALUES (1, 1);
         INSERT INTO im_same VALUES (1, 1);
         ALTER TABLE im_add ADD COLUMN c int4 NOT NULL DEFAULT 5, ADD COLUMN t text DEFAULT '',
                            ADD COLUMN n int4;",
    )
    .expect("setup");
    let s = written_schema_of("im_add");
    let missing: Vec<(&str, Option<&[u8]>)> = s
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.missing.as_deref()))
        .collect();
    assert_eq!(
        missing,
        [
            ("id", None),
            ("v", None),
            ("c", Some(&[0u8, 0, 0, 5][..])),
            ("t", Some(&[][..])),
            ("n", None)
        ],
        "int4 5 and an empty text as their send forms; no default: NULL, no missing value"
    );
    assert_eq!(s.rewritten, Rewrite::Kept, "a constant default rewrites nothing");
    assert_eq!(written_schema_of("im_logged").rewritten, Rewrite::Kept, "SET LOGGED copies values");
    // The shape stays, every value changes: the row is written although its schema is the
    // same, and says so.
    let before = Spi::get_one::<String>(
        "SELECT schema FROM pgtrickle.identity_schemas WHERE relid = 'im_same'::regclass",
    )
    .expect("runs")
    .expect("a row");
    Spi::run("ALTER TABLE im_same ALTER COLUMN v TYPE int4 USING v + 1;").expect("retype");
    let after = written_schema_of("im_same");
    let xid = Spi::get_one::<i64>("SELECT pg_current_xact_id()::text::int8")
        .expect("runs")
        .expect("an xid");
    assert_eq!(after.rewritten, Rewrite::By(u64::try_from(xid).expect("an xid is positive")), "this transaction rewrote it");
    assert!(before.contains("\"rewritten\":false"), "{before}");
    // A volatile default: the table is rewritten, and no missing value is kept.
    Spi::run("ALTER TABLE im_add ADD COLUMN r float8 DEFAULT random();").expect("add");
    let s = written_schema_of("im_add");
    assert_eq!(s.rewritten, Rewrite::By(u64::try_from(xid).expect("an xid is positive")));
    assert!(s.columns.iter().all(|c| c.missing.is_none()), "a rewrite stores every value");
    // Only the event trigger may note a rewrite: PUBLIC cannot call the function.
    assert_eq!(
        Spi::get_one::<bool>(
            "SELECT has_function_privilege('public', \
             'pgtrickle.note_table_rewrite(oid, integer)', 'EXECUTE')"
        ),
        Ok(Some(false))
    );
    // The capture's rewrite trigger notes rewrites too; without either, nothing can be
    // known.
    Spi::run("DROP EVENT TRIGGER pgtrickle_identity_rewrite;").expect("drop");
    assert_eq!(identity_schema_of("im_logged").rewritten, Rewrite::Kept);
    Spi::run("ALTER EVENT TRIGGER pgtrickle_capture_rewrite DISABLE;").expect("disable");
    assert_eq!(identity_schema_of("im_logged").rewritten, Rewrite::Unknown);
}

/// The rewrite note against its owner's caller: a role owning a published table puts a
/// schema of its own before `pg_catalog` on its path, with functions named like the ones the
/// `table_rewrite` trigger's function calls (the rewritten table's OID, the note); its
/// rewrite is still noted (the function runs with its path locked, every name qualified),
/// and the role stays what it was. Every SECURITY DEFINER function of the extension has its
/// search path pinned.
#[pg_test]
fn a_shadowing_role_cannot_hide_a_rewrite() {
    use rowid_registry::schema_message::Rewrite;
    Spi::run(
        "SELECT pgtrickle.enable_identity_messages();
         CREATE ROLE rw_mallory;
         GRANT CREATE ON SCHEMA public TO rw_mallory;
         CREATE SCHEMA rw_evil AUTHORIZATION rw_mallory;
         SET ROLE rw_mallory;
         CREATE FUNCTION rw_evil.pg_event_trigger_table_rewrite_oid() RETURNS oid
           LANGUAGE sql AS 'SELECT 0::oid';
         CREATE FUNCTION rw_evil.note_table_rewrite(oid, integer) RETURNS void
           LANGUAGE sql AS 'SELECT';
         CREATE TABLE public.rw_t (id int8 PRIMARY KEY, v int4);
         INSERT INTO public.rw_t VALUES (1, 1);
         RESET ROLE;
         CREATE PUBLICATION rw_pub FOR TABLE public.rw_t;
         SET ROLE rw_mallory;
         SET search_path = rw_evil, pg_catalog, public;
         ALTER TABLE public.rw_t ADD COLUMN r float8 DEFAULT random();
         RESET search_path;
         RESET ROLE;",
    )
    .expect("the attack runs");
    let xid = Spi::get_one::<i64>("SELECT pg_current_xact_id()::text::int8")
        .expect("runs")
        .expect("an xid");
    assert_eq!(
        written_schema_of("rw_t").rewritten,
        Rewrite::By(u64::try_from(xid).expect("an xid is positive")),
        "the rewrite is noted whatever the caller's path"
    );
    assert_eq!(
        Spi::get_one::<bool>("SELECT rolsuper FROM pg_roles WHERE rolname = 'rw_mallory'"),
        Ok(Some(false))
    );
    assert_eq!(
        extension_functions(
            "p.prosecdef AND NOT COALESCE(p.proconfig, '{}') \
             @> ARRAY['search_path=pg_catalog, pg_temp']"
        ),
        None,
        "SECURITY DEFINER without a pinned search path"
    );
    assert_eq!(
        Spi::get_one::<bool>(
            "SELECT prosecdef FROM pg_proc \
             WHERE oid = 'pgtrickle.identity_messages_on_rewrite()'::regprocedure"
        ),
        Ok(Some(true)),
        "the rewrite trigger's function is among those checked"
    );
}

/// The extension's functions (`pg_proc p`) for which `filter` holds, as their signatures in
/// order, comma-separated; `None` when there is none.
fn extension_functions(filter: &str) -> Option<String> {
    Spi::get_one::<String>(&format!(
        "SELECT string_agg(p.oid::regprocedure::text, ', '
                           ORDER BY p.oid::regprocedure::text) FROM pg_proc p
         JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
          AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
         JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_trickle_ext'
         WHERE {filter}"
    ))
    .expect("runs")
}

/// Every event-trigger function of the extension runs with JIT off: they run at the end of
/// every DDL, and the planner's estimate for a set-returning function (there:
/// `pg_publication_tables`) passes `jit_above_cost`, so on a server built with LLVM each DDL
/// paid about a second of compilation.
#[pg_test]
fn event_trigger_functions_run_without_jit() {
    let event_trigger = "p.prorettype = 'event_trigger'::regtype";
    assert_eq!(
        extension_functions(&format!(
            "{event_trigger} AND NOT COALESCE(p.proconfig, '{{}}') @> ARRAY['jit=off']"
        )),
        None,
        "event-trigger functions with JIT on"
    );
    assert_eq!(
        extension_functions(event_trigger).as_deref(),
        Some(
            "pgtrickle.capture_on_ddl(), pgtrickle.identity_messages_on_ddl(), \
             pgtrickle.identity_messages_on_drop(), pgtrickle.identity_messages_on_rewrite(), \
             pgtrickle.keep_identities_private()"
        ),
        "the functions checked"
    );
}

/// `pgtrickle.publication_relids` (the event triggers' lock-free reading of what a
/// publication carries) gives, for every publication, the tables the server's
/// `pg_publication_tables` gives: FOR ALL TABLES, FOR TABLE and FOR TABLES IN SCHEMA, each
/// with and without publish_via_partition_root, over partitions in two levels and two
/// schemas, a partition listed with its root, regular inheritance, and unlogged and temporary
/// tables (never published).
#[pg_test]
fn publication_relids_equal_the_servers() {
    Spi::run(
        "CREATE SCHEMA pr_a; CREATE SCHEMA pr_b;
         CREATE TABLE pr_a.plain (id int);
         CREATE UNLOGGED TABLE pr_a.unlogged (id int);
         CREATE TEMP TABLE pr_temp (id int);
         CREATE TABLE pr_a.inh_parent (id int);
         CREATE TABLE pr_a.inh_child () INHERITS (pr_a.inh_parent);
         CREATE TABLE pr_a.root (id int) PARTITION BY RANGE (id);
         CREATE TABLE pr_a.leaf1 PARTITION OF pr_a.root FOR VALUES FROM (0) TO (10);
         CREATE TABLE pr_b.leaf2 PARTITION OF pr_a.root FOR VALUES FROM (10) TO (20);
         CREATE TABLE pr_a.mid PARTITION OF pr_a.root FOR VALUES FROM (20) TO (40)
           PARTITION BY RANGE (id);
         CREATE TABLE pr_b.leaf3 PARTITION OF pr_a.mid FOR VALUES FROM (20) TO (30);
         CREATE TABLE pr_a.leaf4 PARTITION OF pr_a.mid FOR VALUES FROM (30) TO (40);
         CREATE TABLE pr_b.root2 (id int) PARTITION BY LIST (id);
         CREATE TABLE pr_a.leaf5 PARTITION OF pr_b.root2 FOR VALUES IN (1);
         CREATE PUBLICATION pr_all FOR ALL TABLES;
         CREATE PUBLICATION pr_all_root FOR ALL TABLES WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_tables FOR TABLE pr_a.plain, pr_a.root, pr_a.inh_parent;
         CREATE PUBLICATION pr_tables_root FOR TABLE pr_a.plain, pr_a.root
           WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_leaf_and_root FOR TABLE pr_a.root, pr_a.leaf1, pr_a.mid;
         CREATE PUBLICATION pr_leaf_and_root_via FOR TABLE pr_a.leaf1, pr_a.mid, pr_b.leaf3,
           pr_b.root2 WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_mid_via FOR TABLE pr_a.mid WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_schema FOR TABLES IN SCHEMA pr_a;
         CREATE PUBLICATION pr_schema_root FOR TABLES IN SCHEMA pr_a
           WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_schema_b_root FOR TABLES IN SCHEMA pr_b
           WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_mixed FOR TABLE pr_a.root, TABLES IN SCHEMA pr_b;
         CREATE PUBLICATION pr_mixed_root FOR TABLE pr_a.leaf4, TABLES IN SCHEMA pr_b
           WITH (publish_via_partition_root);
         CREATE PUBLICATION pr_empty;",
    )
    .expect("the publications");
    let sets = |query: &str| -> Vec<(String, String)> {
        Spi::connect(|client| {
            client
                .select(query, None, &[])
                .expect("runs")
                .map(|row| {
                    let text = |n: usize| {
                        row.get::<String>(n)
                            .expect("text")
                            .unwrap_or_default()
                    };
                    (text(1), text(2))
                })
                .collect()
        })
    };
    let ours = sets(
        "SELECT p.pubname::text, coalesce(string_agg(r.relid::regclass::text, ', '
                 ORDER BY r.relid::regclass::text), '')
         FROM pg_publication p LEFT JOIN LATERAL pgtrickle.publication_relids(p.oid) r(relid)
           ON true
         WHERE p.pubname LIKE 'pr\\_%' GROUP BY 1 ORDER BY 1",
    );
    let servers = sets(
        "SELECT p.pubname::text, coalesce(string_agg(t.relid::regclass::text, ', '
                 ORDER BY t.relid::regclass::text), '')
         FROM pg_publication p LEFT JOIN LATERAL (
           SELECT (quote_ident(schemaname) || '.' || quote_ident(tablename))::regclass AS relid
           FROM pg_publication_tables WHERE pubname = p.pubname) t ON true
         WHERE p.pubname LIKE 'pr\\_%' GROUP BY 1 ORDER BY 1",
    );
    assert_eq!(servers.len(), 13, "{servers:?}");
    assert_eq!(ours, servers);
    // The cases above cover what they claim: the root stands for its leaves, or for itself.
    let of = |name: &str| {
        servers
            .iter()
            .find(|(p, _)| p == name)
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        of("pr_leaf_and_root_via"),
        "pr_a.leaf1, pr_a.mid, pr_b.root2"
    );
    // (FOR TABLE without ONLY adds the inheritance children too.)
    assert_eq!(
        of("pr_tables"),
        "pr_a.inh_child, pr_a.inh_parent, pr_a.leaf1, pr_a.leaf4, pr_a.plain, pr_b.leaf2, \
         pr_b.leaf3"
    );
}

/// enable_identity_messages installs its three event triggers once; disable removes them.
#[pg_test]
fn identity_message_triggers_are_installed_and_removed() {
    let count = || {
        Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'pgtrickle_identity_%'",
        )
        .expect("runs")
        .expect("count")
    };
    Spi::run("SELECT pgtrickle.enable_identity_messages(); SELECT pgtrickle.enable_identity_messages();")
        .expect("enable twice");
    assert_eq!(count(), 3);
    // DDL with the triggers in place runs (the message itself is checked from the WAL by
    // rowid-cdc's tests against a logical slot).
    Spi::run(
        "CREATE PUBLICATION im_pub FOR ALL TABLES;
         CREATE TABLE im_ddl (id int8 PRIMARY KEY);
         ALTER TABLE im_ddl DROP CONSTRAINT im_ddl_pkey;
         DROP TABLE im_ddl;",
    )
    .expect("DDL with the triggers");
    Spi::run("SELECT pgtrickle.disable_identity_messages();").expect("disable");
    assert_eq!(count(), 0);
}
