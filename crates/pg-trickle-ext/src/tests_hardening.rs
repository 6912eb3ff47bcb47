// Trigger capture against a hostile caller (issue 20): a role with nothing but INSERT on a
// captured table shadows the functions and operators the trigger's catalog SQL names, spoofs
// a catalog with a temporary table, or names a temporary table like the buffer; squats the
// buffers' schema or a buffer; and the faults of the review (a buffer with dropped
// attributes, ALTER TYPE on a composite key, sources a trigger cannot capture exactly).
// Included into lib.rs's `tests` module after tests_capture.rs (whose helpers it uses).

/// The SQLSTATE and message (`42501: must be ...`) of the error `sql` raises as `role` (the
/// statement runs in a subtransaction, rolled back when it fails), or `None` when it
/// succeeds.
fn error_of(role: Option<&str>, sql: &str) -> Option<String> {
    Spi::run(
        "CREATE TEMP TABLE IF NOT EXISTS test_errors (n serial, msg text);
         GRANT ALL ON pg_temp.test_errors TO PUBLIC;
         GRANT ALL ON SEQUENCE pg_temp.test_errors_n_seq TO PUBLIC;
         DELETE FROM pg_temp.test_errors;",
    )
    .expect("error table");
    let set_role = role.map(|r| format!("SET ROLE {r};")).unwrap_or_default();
    let reset = if role.is_some() { "RESET ROLE;" } else { "" };
    Spi::run(&format!(
        "DO $do$ BEGIN {set_role} EXECUTE {}; {reset}
         EXCEPTION WHEN OTHERS THEN
           INSERT INTO pg_temp.test_errors (msg) VALUES (SQLSTATE || ': ' || SQLERRM);
         END $do$",
        quote(sql)
    ))
    .expect("DO block");
    Spi::get_one::<String>(
        "SELECT (SELECT msg FROM pg_temp.test_errors ORDER BY n DESC LIMIT 1)",
    )
    .expect("errors")
}

/// `src (id int4 PRIMARY KEY, v text)`, captured, with an audit of the identities, and a role
/// `mallory` with INSERT on it only and a schema `evil` of its own. Returns the buffer.
fn mallory_setup(t: &str) -> String {
    let buffer = captured(t, "id int4 PRIMARY KEY, v text");
    Spi::run(&format!(
        "CREATE ROLE mallory;
         GRANT INSERT ON {t} TO mallory;
         GRANT INSERT ON cap_audit TO mallory;
         GRANT USAGE ON SEQUENCE cap_audit_n_seq TO mallory;
         GRANT USAGE ON SCHEMA pgtrickle TO mallory;
         CREATE SCHEMA evil AUTHORIZATION mallory;"
    ))
    .expect("mallory");
    buffer
}

fn mallory_is_superuser() -> bool {
    Spi::get_one::<bool>("SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'")
        .expect("pg_roles")
        .expect("mallory exists")
}

/// The attack of issue 20 item 1: a function named like one the trigger's SQL calls, first on
/// the caller's path, runs as the table's owner (a superuser here) and makes the caller one.
#[pg_test]
fn a_shadowing_function_runs_nothing_as_the_owner() {
    let buffer = mallory_setup("cap_shadow");
    Spi::run(
        "SET ROLE mallory;
         CREATE FUNCTION evil.to_regclass(text) RETURNS regclass LANGUAGE plpgsql AS $$
         BEGIN
           EXECUTE 'ALTER ROLE mallory SUPERUSER';
           RETURN pg_catalog.to_regclass($1);
         END $$;
         CREATE FUNCTION evil.format_type(oid, integer) RETURNS text LANGUAGE plpgsql AS $$
         BEGIN
           EXECUTE 'ALTER ROLE mallory SUPERUSER';
           RETURN pg_catalog.format_type($1, $2);
         END $$;
         SET search_path = evil, pg_catalog, public;
         INSERT INTO public.cap_shadow VALUES (99, 'x');
         RESET search_path;
         RESET ROLE;",
    )
    .expect("the insert itself succeeds");
    assert!(!mallory_is_superuser(), "the caller's function ran as the owner");
    assert_same_changes("cap_shadow", &buffer);
}

/// The same with an operator: `oid = integer` in the catalog SQL resolves to the caller's
/// `evil.=` when `evil` comes first.
#[pg_test]
fn a_shadowing_operator_runs_nothing_as_the_owner() {
    let buffer = mallory_setup("cap_shadow_op");
    Spi::run(
        "SET ROLE mallory;
         CREATE FUNCTION evil.oideq(oid, oid) RETURNS boolean LANGUAGE plpgsql AS $$
         BEGIN
           EXECUTE 'ALTER ROLE mallory SUPERUSER';
           RETURN pg_catalog.oideq($1, $2);
         END $$;
         CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.oideq);
         SET search_path = evil, pg_catalog, public;
         INSERT INTO public.cap_shadow_op VALUES (99, 'x');
         RESET search_path;
         RESET ROLE;",
    )
    .expect("the insert itself succeeds");
    assert!(!mallory_is_superuser(), "the caller's operator ran as the owner");
    assert_same_changes("cap_shadow_op", &buffer);
}

/// A temporary table named `pg_index`, first on the path, claims the key is `v`: the identity
/// must still be the real key's.
#[pg_test]
fn a_temporary_catalog_does_not_change_identities() {
    let buffer = mallory_setup("cap_spoof");
    let buffer_oid = Spi::get_one::<pg_sys::Oid>(&format!("SELECT '{buffer}'::regclass::oid"))
        .expect("oid")
        .map(u32::from)
        .unwrap_or(0);
    Spi::run(&format!(
        "SET ROLE mallory;
         CREATE TEMP TABLE pg_index AS SELECT * FROM pg_catalog.pg_index
           WHERE indrelid = 'public.cap_spoof'::regclass;
         UPDATE pg_temp.pg_index SET indkey = '2';
         CREATE TEMP TABLE pg_attribute AS
           SELECT attrelid, attname, atttypid, attnum, attnotnull, atttypmod, attcollation,
                  attisdropped, attgenerated
           FROM pg_catalog.pg_attribute
           WHERE attrelid IN ('public.cap_spoof'::regclass, {buffer_oid}::oid);
         SET search_path = pg_temp, pg_catalog, public;
         INSERT INTO public.cap_spoof VALUES (7, 'spoofed');
         RESET search_path;
         RESET ROLE;"
    ))
    .expect("insert");
    assert_same_changes("cap_spoof", &buffer);
}

/// A temporary table named like the buffer, first on the path, receives nothing: the
/// trigger writes the buffer capture_table made.
#[pg_test]
fn a_temporary_table_named_like_the_buffer_receives_nothing() {
    let buffer = mallory_setup("cap_tempbuf");
    let name = buffer.rsplit('.').next().unwrap_or_default().replace('"', "");
    Spi::run(&format!(
        "SET ROLE mallory;
         CREATE TEMP TABLE {name} (LIKE pg_catalog.pg_class);
         SET search_path = pg_temp, pg_catalog, public;
         INSERT INTO public.cap_tempbuf VALUES (1, 'a');
         RESET search_path;
         RESET ROLE;"
    ))
    .expect("insert");
    assert_eq!(
        Spi::get_one::<i64>(&format!("SELECT count(*) FROM pg_temp.{name}")).expect("count"),
        Some(0)
    );
    assert_same_changes("cap_tempbuf", &buffer);
}

/// The buffers' schema belongs to the extension: a role allowed to create schemas cannot
/// create it first, and cannot create a table in it.
#[pg_test]
fn the_buffer_schema_cannot_be_squatted() {
    let owner = Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_depend d JOIN pg_namespace n ON n.oid = d.objid
         JOIN pg_extension e ON e.oid = d.refobjid
         WHERE d.classid = 'pg_namespace'::regclass AND d.deptype = 'e'
           AND n.nspname = 'pgtrickle_changes' AND e.extname = 'pg_trickle_ext')",
    )
    .expect("query");
    assert_eq!(owner, Some(true), "pgtrickle_changes is a member of the extension");
    Spi::run(
        "CREATE ROLE squatter;
         DO $$ BEGIN
           EXECUTE format('GRANT CREATE ON DATABASE %I TO squatter', current_database());
         END $$;",
    )
    .expect("squatter");
    let e = error_of(Some("squatter"), "CREATE TABLE pgtrickle_changes.changes_1 (x int)");
    assert!(
        e.as_deref().is_some_and(|e| e.contains("permission denied for schema")),
        "{e:?}"
    );
    let e = error_of(Some("squatter"), "CREATE SCHEMA pgtrickle_changes");
    assert!(e.as_deref().is_some_and(|e| e.contains("already exists")), "{e:?}");
}

/// A table placed in the schema under a buffer's name before capture_table (here by a
/// superuser, as a role with CREATE there could) is not adopted: the buffer is found by its
/// dependency on the source, and a new one takes another name.
#[pg_test]
fn a_table_named_like_a_buffer_is_not_adopted() {
    Spi::run("CREATE TABLE cap_preexisting (k int8 PRIMARY KEY)").expect("table");
    let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'cap_preexisting'::regclass::oid")
        .expect("oid")
        .map(u32::from)
        .unwrap_or(0);
    let squatted =
        rowid_registry::sql::QualifiedName::new("pgtrickle_changes", &format!("changes_{oid}"));
    Spi::run(&rowid_registry::buffer::create_table(&squatted, &[]).join("; ")).expect("squat");
    let buffer = Spi::get_one::<String>("SELECT pgtrickle.capture_table('cap_preexisting')")
        .expect("capture_table")
        .expect("buffer");
    assert_eq!(buffer, format!("\"pgtrickle_changes\".\"changes_{oid}_1\""));
    Spi::run("INSERT INTO cap_preexisting VALUES (1)").expect("insert");
    assert_eq!(
        Spi::get_one::<i64>(&format!("SELECT count(*) FROM {}", squatted.quoted()))
            .expect("count"),
        Some(0),
        "the table named like the buffer received a change"
    );
}

/// Dropping the source drops its buffer (a pg_depend entry), so an OID reused by a later
/// table never finds an old buffer.
#[pg_test]
fn dropping_the_source_drops_its_buffer() {
    let buffer = captured("cap_drop", "k int8 PRIMARY KEY");
    Spi::run("INSERT INTO cap_drop VALUES (1); DROP TABLE cap_drop CASCADE;").expect("drop");
    assert_eq!(
        Spi::get_one::<bool>(&format!("SELECT to_regclass('{buffer}') IS NULL")).expect("q"),
        Some(true),
        "the buffer outlived its source"
    );
}

/// A buffer that grants a write right to another role is refused by the trigger and by
/// readers; so is one with a trigger, or with another owner than the source's.
#[pg_test]
fn buffers_others_can_write_are_refused() {
    for (i, change) in [
        "CREATE ROLE cap_other{i}; GRANT INSERT ON {b} TO cap_other{i}",
        "CREATE FUNCTION cap_noop{i}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
         CREATE TRIGGER t AFTER INSERT ON {b} FOR EACH ROW EXECUTE FUNCTION cap_noop{i}()",
        "CREATE ROLE cap_other{i}; ALTER TABLE {b} OWNER TO cap_other{i}",
    ]
    .iter()
    .enumerate()
    {
        let t = format!("cap_writers{i}");
        let buffer = captured(&t, "k int8 PRIMARY KEY");
        Spi::run(&change.replace("{b}", &buffer).replace("{i}", &i.to_string()))
            .expect("change");
        let reader = error_of(
            None,
            &format!("SELECT pgtrickle.check_change_buffer('{buffer}')"),
        );
        assert!(
            reader.as_deref().is_some_and(|e| e.contains("is refused")),
            "{change}: a reader accepted it: {reader:?}"
        );
        let writer = error_of(None, &format!("INSERT INTO {t} VALUES (1)"));
        assert!(
            writer.as_deref().is_some_and(|e| e.contains("is refused")),
            "{change}: the trigger wrote it: {writer:?}"
        );
    }
}

/// The heap path builds its row per attribute of the buffer as it is now: a buffer whose
/// last column was dropped and added again (a dropped attribute in the middle) gets every
/// value in its own column.
#[pg_test]
fn buffers_with_dropped_attributes_get_their_values() {
    let buffer = captured("cap_dropped", "k int8 PRIMARY KEY");
    Spi::run(&format!(
        "ALTER TABLE {buffer} DROP COLUMN unchanged_toast, DROP COLUMN new_k, DROP COLUMN old_k;
         ALTER TABLE {buffer} ADD COLUMN unchanged_toast text[], ADD COLUMN new_k bigint,
           ADD COLUMN old_k bigint;
         COMMENT ON COLUMN {buffer}.new_k IS 'new image of source column 1';
         COMMENT ON COLUMN {buffer}.old_k IS 'old image of source column 1';
         INSERT INTO cap_dropped VALUES (1), (2);
         DELETE FROM cap_dropped WHERE k = 1;"
    ))
    .expect("workload");
    let ok = Spi::get_one::<bool>(&format!(
        "SELECT bool_and(row_identity_version = 2 AND row_probe_version = 1
                         AND unidentified IS NULL AND unchanged_toast IS NULL
                         AND commit_lsn IS NULL
                         AND (op <> 'I' OR new_k IS NOT NULL)
                         AND (op <> 'D' OR old_k = 1)) AND count(*) = 3
         FROM {buffer}"
    ))
    .expect("query");
    assert_eq!(ok, Some(true));
    assert_same_changes("cap_dropped", &buffer);
}

/// ALTER TYPE on a composite type the key uses: the cached plan's readers are rebuilt, and
/// the new attribute is part of the identity.
#[pg_test]
fn alter_type_on_a_composite_key_is_followed() {
    Spi::run("CREATE TYPE cap_pt AS (a int4, b text);").expect("type");
    let buffer = captured("cap_comp", "k cap_pt PRIMARY KEY, v int4");
    Spi::run("INSERT INTO cap_comp VALUES (ROW(1, 'x'), 0);").expect("warm");
    Spi::run("ALTER TYPE cap_pt ADD ATTRIBUTE c int8;").expect("alter");
    Spi::run(
        "INSERT INTO cap_comp VALUES (ROW(2, 'y', 7), 0);
         UPDATE cap_comp SET v = 1 WHERE (k).a = 1;",
    )
    .expect("after the alter");
    assert_same_changes("cap_comp", &buffer);
}

#[pg_test]
#[should_panic(expected = "is partitioned")]
fn partitioned_sources_are_refused_by_name() {
    Spi::run(
        "CREATE TABLE cap_parted (k int8 PRIMARY KEY) PARTITION BY RANGE (k);
         SELECT pgtrickle.capture_table('cap_parted');",
    )
    .expect("refused");
}

#[pg_test]
#[should_panic(expected = "has inheritance children (public.cap_child)")]
fn inheritance_parents_are_refused_by_name() {
    Spi::run(
        "CREATE TABLE cap_parent (k int8 PRIMARY KEY);
         CREATE TABLE cap_child () INHERITS (cap_parent);
         SELECT pgtrickle.capture_table('cap_parent');",
    )
    .expect("refused");
}

#[pg_test]
#[should_panic(expected = "is unlogged")]
fn unlogged_sources_are_refused_by_name() {
    Spi::run(
        "CREATE UNLOGGED TABLE cap_unlogged (k int8 PRIMARY KEY);
         SELECT pgtrickle.capture_table('cap_unlogged');",
    )
    .expect("refused");
}

#[pg_test]
#[should_panic(expected = "is temporary")]
fn temporary_sources_are_refused_by_name() {
    Spi::run(
        "CREATE TEMP TABLE cap_temp (k int8 PRIMARY KEY);
         SELECT pgtrickle.capture_table('cap_temp');",
    )
    .expect("refused");
}

/// Only a role with the owner's privileges captures a table; the owner (not a superuser)
/// can, and its buffer is its own.
#[pg_test]
fn only_the_owner_captures_a_table() {
    Spi::run(
        "CREATE ROLE cap_app; CREATE ROLE cap_stranger;
         CREATE TABLE cap_owned (k int8 PRIMARY KEY); ALTER TABLE cap_owned OWNER TO cap_app;
         GRANT ALL ON cap_owned TO cap_stranger;",
    )
    .expect("roles");
    let stranger = error_of(
        Some("cap_stranger"),
        "SELECT pgtrickle.capture_table('cap_owned')",
    );
    // insufficient_privilege (it was reported as feature_not_supported until the stream
    // tables' WAL work mapped errors::refused's SQLSTATEs).
    assert!(
        stranger
            .as_deref()
            .is_some_and(|e| e.starts_with("42501: ") && e.contains("must be the owner of")),
        "{stranger:?}"
    );
    Spi::run("SET ROLE cap_app").expect("role");
    let buffer = Spi::get_one::<String>("SELECT pgtrickle.capture_table('cap_owned')")
        .expect("capture as the owner")
        .expect("buffer");
    Spi::run("INSERT INTO cap_owned VALUES (1); RESET ROLE").expect("insert as the owner");
    assert_eq!(
        Spi::get_one::<String>(&format!(
            "SELECT relowner::regrole::text FROM pg_class WHERE oid = '{buffer}'::regclass"
        ))
        .expect("owner")
        .as_deref(),
        Some("cap_app")
    );
    assert_eq!(
        Spi::get_one::<i64>(&format!("SELECT count(*) FROM {buffer}")).expect("count"),
        Some(1)
    );
}

/// Generated columns are not part of a keyless identity (pgoutput does not publish them):
/// the trigger's identity is the one over the other columns.
#[pg_test]
fn keyless_identities_leave_generated_columns_out() {
    let buffer = captured(
        "cap_gen",
        "a int4, b text, c int8 GENERATED ALWAYS AS (a * 2) STORED",
    );
    Spi::run("INSERT INTO cap_gen (a, b) VALUES (1, 'x');").expect("insert");
    let got = Spi::get_one::<String>(&format!(
        "SELECT encode(__pgt_row_id, 'hex') FROM {buffer}"
    ))
    .expect("row");
    assert_eq!(
        got,
        Some(hex_of(
            "pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(1::int4, 'x'::text))"
        ))
    );
}
