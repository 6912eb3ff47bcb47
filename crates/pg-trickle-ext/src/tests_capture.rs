// Trigger capture inside PostgreSQL: `pgtrickle.capture_table` and `capture_changes` against
// an audit trigger that computes the same changes' identities with `encode_row_id_v2` in the
// same statements, for every scalar key type, an enum, a domain, composite and array keys,
// keyless tables, key-changing updates, TOASTed values, truncates, and a key changed by
// ALTER TABLE between two statements of one transaction. Included into lib.rs's `tests`
// module after tests.rs (whose imports it uses).

/// Creates `t` with the given columns, captures it, and installs an audit trigger that
/// records each change's identities with the record form, using the identity the schema
/// chose: `ROW(key columns)` for SCAN_KEY, the whole row for KEYLESS_ROW. Returns the buffer.
fn captured(t: &str, columns: &str) -> String {
    Spi::run(&format!("CREATE TABLE {t} ({columns})")).expect("table");
    let buffer = Spi::get_one::<String>(&format!("SELECT pgtrickle.capture_table('{t}')"))
        .expect("capture_table")
        .expect("buffer");
    let schema = Spi::get_one::<String>(&format!(
        "SELECT pgtrickle.identity_schema('{t}'::regclass)"
    ))
    .expect("schema")
    .expect("json");
    let v: serde_json_like::Value = serde_json_like::parse(&schema);
    let (old, new) = match v.domain.as_str() {
        "SCAN_KEY" => {
            let cols = |rec: &str| {
                v.key
                    .iter()
                    .map(|k| format!("{rec}.{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            (
                format!("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({}))", cols("OLD")),
                format!("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({}))", cols("NEW")),
            )
        }
        _ => (
            "pgtrickle.encode_row_id_v2('KEYLESS_ROW', OLD)".to_string(),
            "pgtrickle.encode_row_id_v2('KEYLESS_ROW', NEW)".to_string(),
        ),
    };
    Spi::run(&format!(
        "CREATE TABLE IF NOT EXISTS cap_audit (n bigserial, relid oid, op \"char\", old_id bytea, new_id bytea);
         CREATE FUNCTION {t}_audit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO cap_audit (relid, op, old_id, new_id) VALUES (TG_RELID, left(TG_OP, 1),
             CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN {old} END,
             CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN {new} END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER {t}_audit AFTER INSERT OR UPDATE OR DELETE ON {t}
           FOR EACH ROW EXECUTE FUNCTION {t}_audit();
         CREATE FUNCTION {t}_audit_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO cap_audit (relid, op) VALUES (TG_RELID, 'T');
           RETURN NULL;
         END $$;
         CREATE TRIGGER {t}_audit_truncate AFTER TRUNCATE ON {t}
           FOR EACH STATEMENT EXECUTE FUNCTION {t}_audit_truncate();"
    ))
    .expect("audit");
    buffer
}

/// A minimal reading of the identity schema JSON: the domain and the key columns (the
/// extension has no JSON dependency; the test needs two members).
mod serde_json_like {
    pub struct Value {
        pub domain: String,
        pub key: Vec<String>,
    }

    pub fn parse(json: &str) -> Value {
        let domain = json
            .split("\"domain\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string();
        let fields = json.split("\"fields\":[").nth(1).unwrap_or("");
        let key = fields
            .split("\"column\":\"")
            .skip(1)
            .filter_map(|r| r.split('"').next())
            .map(str::to_string)
            .collect();
        Value { domain, key }
    }
}

/// The buffer's changes of `t`, in order, against the audit's: (op, old hex, new hex). `R`
/// rows, which mark a redefinition and carry no identity, are left out
/// (`identity_redefinitions_are_marked_in_the_buffer` tests them).
fn assert_same_changes(t: &str, buffer: &str) {
    let q = |sql: &str| -> Vec<String> {
        Spi::connect(|c| {
            let mut out = Vec::new();
            for row in c.select(sql, None, &[])? {
                out.push(row.get::<String>(1)?.unwrap_or_default());
            }
            Ok::<_, pgrx::spi::SpiError>(out)
        })
        .expect("query")
    };
    let got = q(&format!(
        "SELECT op::text || '|' || coalesce(encode(__pgt_old_row_id, 'hex'), '') || '|' || \
         coalesce(encode(__pgt_row_id, 'hex'), '') FROM {buffer} \
         WHERE source_relid = '{t}'::regclass AND op <> 'R' ORDER BY seq"
    ));
    let want = q(&format!(
        "SELECT op::text || '|' || coalesce(encode(old_id, 'hex'), '') || '|' || \
         coalesce(encode(new_id, 'hex'), '') FROM cap_audit \
         WHERE relid = '{t}'::regclass ORDER BY n"
    ));
    assert!(!want.is_empty(), "{t}: the audit saw changes");
    assert_eq!(got, want, "{t}: trigger capture differs from encode_row_id_v2");
}

/// Inserts two rows, moves one's key, updates a payload, deletes, truncates, inserts again.
fn workload(t: &str, a: &str, b: &str, c: &str) {
    Spi::run(&format!(
        "INSERT INTO {t} (k, v) VALUES ({a}, 1), ({b}, 2);
         UPDATE {t} SET k = {c} WHERE k = {a};
         UPDATE {t} SET v = v + 1 WHERE k = {b};
         DELETE FROM {t} WHERE k = {c};
         TRUNCATE {t};
         INSERT INTO {t} (k, v) VALUES ({a}, 3);"
    ))
    .unwrap_or_else(|e| panic!("{t}: {e}"));
}

#[pg_test]
fn trigger_identities_equal_the_record_form_for_every_key_type() {
    Spi::run(
        "CREATE TYPE cap_mood AS ENUM ('sad', 'ok', 'glad');
         CREATE DOMAIN cap_pos AS int4 CHECK (VALUE > 0);
         CREATE TYPE cap_pair AS (a int4, b text);",
    )
    .expect("types");
    let cases: &[(&str, &str, &str, &str)] = &[
        ("int2", "1::int2", "2::int2", "3::int2"),
        ("int4", "1", "2", "3"),
        ("int8", "10000000000", "2", "-3"),
        ("numeric", "1.50", "2", "-3.25"),
        ("text", "'a'", "'b'", "'ccc'"),
        ("varchar(10)", "'a'", "'b'", "'c'"),
        ("char(4)", "'a'", "'b'", "'c'"),
        ("bytea", "'\\x00'::bytea", "'\\x0000'::bytea", "'\\xff'::bytea"),
        ("uuid", "'00000000-0000-0000-0000-000000000001'", "'00000000-0000-0000-0000-000000000002'", "'ffffffff-0000-0000-0000-000000000000'"),
        ("date", "'2026-12-01'", "'1999-01-01'", "'infinity'"),
        ("time", "'12:00'", "'00:00'", "'23:59:59.999999'"),
        ("timetz", "'12:00+01'", "'12:00+02'", "'00:00Z'"),
        ("timestamp", "'2026-12-01 12:00'", "'-infinity'", "'2000-01-01'"),
        ("timestamptz", "'2026-12-01 12:00Z'", "'2026-12-01 13:00+02'", "'1970-01-01Z'"),
        ("interval", "'1 day'", "'25 hours'", "'1 mon -1 day'"),
        ("bool", "true", "false", "NULL::bool"),
        ("oid", "1::oid", "2::oid", "'4294967295'::oid"),
        ("inet", "'10.0.0.1'", "'::1'", "'10.0.0.1/8'"),
        ("cidr", "'10.0.0.0/8'", "'10.0.0.0/16'", "'::/0'"),
        ("macaddr", "'08:00:2b:01:02:03'", "'08:00:2b:01:02:04'", "'00:00:00:00:00:00'"),
        ("macaddr8", "'08:00:2b:01:02:03:04:05'", "'08:00:2b:01:02:03:04:06'", "'00:00:00:00:00:00:00:00'"),
        ("bit(3)", "B'101'", "B'000'", "B'111'"),
        ("varbit", "B'1'", "B'10'", "B''"),
        ("float8", "1.5", "-0.0", "'NaN'"),
        ("cap_mood", "'sad'", "'ok'", "'glad'"),
        ("cap_pos", "1", "2", "3"),
        ("cap_pair", "ROW(1, 'x')::cap_pair", "ROW(2, 'y')::cap_pair", "ROW(1, NULL)::cap_pair"),
        ("int4[]", "ARRAY[1, 2]", "ARRAY[]::int4[]", "ARRAY[NULL, 1]"),
    ];
    for (i, (ty, a, b, c)) in cases.iter().enumerate() {
        let t = format!("cap_k{i}");
        // bool has two values: the third is a NULL payload key on a keyless table.
        let columns = if *ty == "bool" {
            format!("k {ty}, v int4")
        } else {
            format!("k {ty} PRIMARY KEY, v int4")
        };
        let buffer = captured(&t, &columns);
        if *ty == "bool" {
            Spi::run(&format!(
                "INSERT INTO {t} VALUES ({a}, 1), ({b}, 2), ({c}, 3);
                 UPDATE {t} SET k = NOT k WHERE v = 1;
                 DELETE FROM {t} WHERE v = 2;"
            ))
            .expect("bool workload");
        } else {
            workload(&t, a, b, c);
        }
        assert_same_changes(&t, &buffer);
    }
}

#[pg_test]
fn keyless_and_toasted_rows_are_captured_whole() {
    let buffer = captured("cap_full", "a int4, big text, n int4");
    Spi::run(
        "ALTER TABLE cap_full ALTER COLUMN big SET STORAGE EXTERNAL;
         INSERT INTO cap_full SELECT 1, string_agg(md5(g::text), ''), 0 FROM generate_series(1, 200) g;
         INSERT INTO cap_full VALUES (2, NULL, 0), (2, NULL, 0);
         UPDATE cap_full SET n = n + 1 WHERE a = 1;
         UPDATE cap_full SET big = big || 'x' WHERE a = 1;
         DELETE FROM cap_full WHERE a = 2;",
    )
    .expect("workload");
    let toasted = Spi::get_one::<bool>(
        "SELECT pg_column_size(big) < octet_length(big) OR octet_length(big) > 2000 FROM cap_full",
    )
    .expect("size");
    assert_eq!(toasted, Some(true));
    assert_same_changes("cap_full", &buffer);
}

/// The key moves between two statements of one transaction: each change is encoded under
/// the key in force when it happened (the cached plan is rebuilt on the relcache
/// invalidation the ALTER sends).
#[pg_test]
fn a_key_changed_between_statements_is_followed() {
    let buffer = captured("cap_alter", "a int4 NOT NULL, b text NOT NULL, v int4, PRIMARY KEY (a)");
    Spi::run("INSERT INTO cap_alter VALUES (1, 'x', 0);").expect("insert");
    Spi::run("ALTER TABLE cap_alter DROP CONSTRAINT cap_alter_pkey, ADD PRIMARY KEY (b);")
        .expect("alter");
    Spi::run("INSERT INTO cap_alter VALUES (2, 'y', 0); UPDATE cap_alter SET v = 1;")
        .expect("insert again");
    let ids = Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(
            &format!("SELECT encode(__pgt_row_id, 'hex') FROM {buffer} ORDER BY seq"),
            None,
            &[],
        )? {
            out.push(row.get::<String>(1)?.unwrap_or_default());
        }
        Ok::<_, pgrx::spi::SpiError>(out)
    })
    .expect("rows");
    let want = [
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1))"),
        // The key change's R row (no identity): identities on either side do not compare.
        String::new(),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW('y'::text))"),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW('x'::text))"),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW('y'::text))"),
    ];
    let mut got = ids.clone();
    // The two updates of the last statement come in heap order; compare as a set there.
    got[3..].sort();
    let mut want = want.to_vec();
    want[3..].sort();
    assert_eq!(got, want);
}

#[pg_test]
fn buffers_number_changes_per_transaction_and_hide_identities_from_public() {
    let buffer = captured("cap_seq", "k int8 PRIMARY KEY, v int4");
    let other = captured("cap_seq2", "k int8 PRIMARY KEY, v int4");
    Spi::run("INSERT INTO cap_seq VALUES (1, 0), (2, 0); INSERT INTO cap_seq2 VALUES (1, 0);")
        .expect("inserts");
    let seqs = Spi::get_one::<String>(&format!(
        "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM \
         (SELECT seq FROM {buffer} UNION ALL SELECT seq FROM {other}) s"
    ))
    .expect("seq");
    assert_eq!(seqs.as_deref(), Some("1,2,3"), "one count per transaction, across tables");
    let same_xid = Spi::get_one::<bool>(&format!(
        "SELECT bool_and(xid = txid_current() % 4294967296) AND count(*) = 2 FROM {buffer}"
    ))
    .expect("xid");
    assert_eq!(same_xid, Some(true));
    // A role that may write the source appends its changes without any right on the buffer,
    // and cannot read them.
    Spi::run(
        "CREATE ROLE cap_writer; GRANT INSERT, UPDATE, DELETE, SELECT ON cap_seq TO cap_writer;
         GRANT INSERT ON cap_audit TO cap_writer; GRANT USAGE ON SEQUENCE cap_audit_n_seq TO cap_writer;
         GRANT USAGE ON SCHEMA pgtrickle TO cap_writer;
         SET ROLE cap_writer; INSERT INTO cap_seq VALUES (3, 0); RESET ROLE;",
    )
    .expect("write as another role");
    let rights = Spi::get_one::<bool>(&format!(
        "SELECT has_table_privilege('cap_writer', '{buffer}', 'SELECT') \
         OR has_table_privilege('cap_writer', '{buffer}', 'INSERT') \
         OR has_table_privilege('public', '{buffer}', 'SELECT')"
    ))
    .expect("privileges");
    assert_eq!(rights, Some(false));
    assert_eq!(
        Spi::get_one::<i64>(&format!("SELECT count(*) FROM {buffer}")).expect("count"),
        Some(3)
    );
}

#[pg_test]
fn change_buffers_are_checked_before_reading() {
    let buffer = captured("cap_chk", "k int8 PRIMARY KEY");
    assert_eq!(
        Spi::get_one::<bool>(&format!("SELECT pgtrickle.check_change_buffer('{buffer}')")),
        Ok(Some(true))
    );
}

#[pg_test]
#[should_panic(expected = "holds changes written with row_identity_version 3")]
fn buffers_of_other_versions_are_refused() {
    let buffer = captured("cap_v3", "k int8 PRIMARY KEY");
    Spi::run(&format!(
        "ALTER TABLE {buffer} DROP CONSTRAINT changes_{oid}_row_identity_version_check;
         INSERT INTO {buffer} (xid, seq, source_relid, op, __pgt_row_id, row_identity_version)
         VALUES (1, 1, 1, 'I', '\\x02', 3);",
        oid = Spi::get_one::<pg_sys::Oid>("SELECT 'cap_v3'::regclass::oid")
            .expect("oid")
            .map(u32::from)
            .unwrap_or(0)
    ))
    .expect("a row of another version");
    Spi::run(&format!("SELECT pgtrickle.check_change_buffer('{buffer}')")).expect("refused");
}

#[pg_test]
#[should_panic(expected = "is not a Row Identity V2 change buffer")]
fn tables_that_are_not_buffers_are_refused() {
    Spi::run("CREATE TABLE cap_not (xid bigint)").expect("table");
    Spi::run("SELECT pgtrickle.check_change_buffer('cap_not')").expect("refused");
}

#[pg_test]
#[should_panic(expected = "money output and arithmetic depend on lc_monetary")]
fn sources_without_an_identity_are_refused_by_name() {
    Spi::run("CREATE TABLE cap_money (m money)").expect("table");
    Spi::run("SELECT pgtrickle.capture_table('cap_money')").expect("refused");
}

#[pg_test]
#[should_panic(expected = "must be an AFTER trigger")]
fn capture_changes_refuses_before_triggers() {
    Spi::run(
        "CREATE TABLE cap_before (k int8 PRIMARY KEY);
         CREATE TRIGGER b BEFORE INSERT ON cap_before FOR EACH ROW
           EXECUTE FUNCTION pgtrickle.capture_changes('x');
         INSERT INTO cap_before VALUES (1);",
    )
    .expect("refused");
}

/// A reader indexed the buffer: the trigger writes through the executor (which maintains the
/// index), with the same rows.
#[pg_test]
fn indexed_buffers_are_written_through_the_executor() {
    let buffer = captured("cap_idx", "k int8 PRIMARY KEY, v int4");
    Spi::run("INSERT INTO cap_idx VALUES (1, 0);").expect("heap path");
    Spi::run(&format!("CREATE INDEX cap_idx_seq ON {buffer} (xid, seq);")).expect("index");
    workload("cap_idx", "10", "20", "30");
    assert_same_changes("cap_idx", &buffer);
    let via_index = Spi::get_one::<i64>(&format!(
        "SELECT count(*) FROM {buffer} WHERE xid = txid_current() % 4294967296"
    ))
    .expect("count");
    assert_eq!(via_index, Some(8));
}

/// A table `name` of `n` int4 columns `c1` (its primary key) to `cN`.
fn wide_table(name: &str, n: u32) {
    Spi::run(&format!(
        "DO $$ BEGIN EXECUTE (SELECT format('CREATE TABLE {name} (%s)', \
           string_agg(format('c%s int4%s', g, CASE WHEN g = 1 THEN ' PRIMARY KEY' ELSE '' END), \
                      ', ' ORDER BY g)) FROM generate_series(1, {n}) g); END $$"
    ))
    .expect("wide table");
}

/// A source of more columns than a buffer can hold (the fixed columns and two per source
/// column, within PostgreSQL's 1600) is refused by `capture_table` naming the limit, not by
/// the buffer's `CREATE TABLE`.
#[pg_test]
#[should_panic(expected = "its 794 columns need 1602 buffer columns")]
fn a_source_too_wide_for_a_buffer_is_refused_by_name() {
    wide_table("cap_wide", 794);
    Spi::run("SELECT pgtrickle.capture_table('cap_wide')").expect("refused");
}

/// Dropped columns keep their numbers: after enough DROP and ADD COLUMN a buffer reaches
/// PostgreSQL's 1600 columns while its source has room. The DDL is refused saying so and what
/// to do; it said to consume the changes and run the DDL again, which could never help.
#[pg_test]
#[should_panic(expected = "counts the columns dropped from the buffer too")]
fn a_buffer_full_of_dropped_columns_says_what_to_do() {
    wide_table("cap_full", 790);
    Spi::run("SELECT pgtrickle.capture_table('cap_full')").expect("captured");
    Spi::run(
        "ALTER TABLE cap_full DROP COLUMN c2, DROP COLUMN c3, DROP COLUMN c4, DROP COLUMN c5, \
         ADD COLUMN z1 int4, ADD COLUMN z2 int4, ADD COLUMN z3 int4, ADD COLUMN z4 int4",
    )
    .expect("refused");
}

/// Makes the buffer of a new source `table` one of format 3 (its constraint on `op` admits
/// no `R` row).
fn format_3_buffer(table: &str) -> String {
    let buffer = captured(table, "k int8 PRIMARY KEY");
    let oid = Spi::get_one::<pg_sys::Oid>(&format!("SELECT '{table}'::regclass::oid"))
        .expect("oid")
        .map(u32::from)
        .unwrap_or(0);
    Spi::run(&format!(
        "ALTER TABLE {buffer} DROP CONSTRAINT changes_{oid}_op_check,
           ADD CHECK (op IN ('I', 'U', 'D', 'T', 'X'))"
    ))
    .expect("format 3's constraint");
    buffer
}

/// Issue 36 item 5: a buffer of format 3 (its readers know no `R` row) is refused by the
/// trigger, naming the missing constraint and what to do.
#[pg_test]
#[should_panic(expected = "is missing (a buffer of format 3 or before")]
fn buffers_of_format_3_are_refused_by_the_trigger() {
    format_3_buffer("cap_f3t");
    Spi::run("INSERT INTO cap_f3t VALUES (1)").expect("refused");
}

/// ... and by the reader's check.
#[pg_test]
#[should_panic(expected = "is missing (a buffer of format 3 or before")]
fn buffers_of_format_3_are_refused_by_the_reader() {
    let buffer = format_3_buffer("cap_f3r");
    Spi::run(&format!(
        "SELECT pgtrickle.check_change_buffer('{buffer}'::regclass)"
    ))
    .expect("refused");
}

#[pg_test]
#[should_panic(expected = "pins versions other than row_identity_version 2")]
fn buffers_pinned_to_other_versions_are_refused_by_the_trigger() {
    let buffer = captured("cap_pin", "k int8 PRIMARY KEY");
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'cap_pin'::regclass::oid")
        .expect("oid")
        .map(u32::from)
        .unwrap_or(0);
    Spi::run(&format!(
        "ALTER TABLE {buffer} DROP CONSTRAINT changes_{oid}_row_identity_version_check,
           ADD CHECK (row_identity_version = 3);
         INSERT INTO cap_pin VALUES (1);"
    ))
    .expect("refused");
}
