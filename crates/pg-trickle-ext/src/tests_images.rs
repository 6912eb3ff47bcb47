// Row images in trigger buffers (spec/change-buffer.md format 3): every change's new_ and
// old_ columns against the rows a plain PL/pgSQL audit trigger saw (compared in the server
// with IS NOT DISTINCT FROM), and a source's DDL followed in its own transaction: ADD, DROP,
// RENAME COLUMN and ALTER COLUMN TYPE, with the values already buffered kept under their
// column's new name. Included into lib.rs's `tests` module after tests.rs.

/// The buffer's image columns as `name type, ...` (after the fourteen fixed columns).
fn image_columns(buffer: &str) -> String {
    Spi::get_one::<String>(&format!(
        "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
         FROM pg_attribute WHERE attrelid = '{buffer}'::regclass AND attnum > 14
           AND NOT attisdropped"
    ))
    .expect("columns")
    .unwrap_or_default()
}

/// A table of many types, captured, with an audit trigger keeping OLD and NEW as rows of the
/// table's own type. Returns the buffer.
fn imaged(t: &str) -> String {
    Spi::run(&format!(
        "CREATE TYPE {t}_mood AS ENUM ('sad', 'ok');
         CREATE TYPE {t}_pair AS (a int4, b text);
         CREATE DOMAIN {t}_pos AS int4 NOT NULL CHECK (VALUE > 0);
         CREATE TABLE {t} (k int8 PRIMARY KEY, note text, amount numeric, at timestamptz,
           doc jsonb, tags int4[], mood {t}_mood, pair {t}_pair, pos {t}_pos, blob bytea,
           twice int8 GENERATED ALWAYS AS (k * 2) STORED);
         CREATE TABLE {t}_audit (n bigserial, op text, o {t}, nw {t});
         CREATE FUNCTION {t}_audit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO {t}_audit (op, o, nw) VALUES (left(TG_OP, 1),
             CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN OLD END,
             CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN NEW END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER {t}_audit AFTER INSERT OR UPDATE OR DELETE ON {t}
           FOR EACH ROW EXECUTE FUNCTION {t}_audit();"
    ))
    .expect("table");
    Spi::get_one::<String>(&format!("SELECT pgtrickle.capture_table('{t}')"))
        .expect("capture_table")
        .expect("buffer")
}

/// Every trigger-buffer row's images equal the rows the audit trigger saw: the new_ columns
/// NEW, the old_ columns OLD (a trigger has whole rows: old_image F), NULL where the
/// operation has no such row; domains stored as their base type, generated columns absent.
#[pg_test]
fn trigger_buffers_hold_the_rows_the_change_saw() {
    let t = "cap_img";
    let buffer = imaged(t);
    assert_eq!(
        image_columns(&buffer),
        "new_k bigint, old_k bigint, new_note text, old_note text, new_amount numeric, \
         old_amount numeric, new_at timestamp with time zone, old_at timestamp with time zone, \
         new_doc jsonb, old_doc jsonb, new_tags integer[], old_tags integer[], \
         new_mood cap_img_mood, old_mood cap_img_mood, new_pair cap_img_pair, \
         old_pair cap_img_pair, new_pos integer, old_pos integer, new_blob bytea, old_blob bytea"
    );
    Spi::run(&format!(
        "INSERT INTO {t} (k, note, amount, at, doc, tags, mood, pair, pos, blob) VALUES
           (1, 'one', '-0.000100', '2026-12-02 10:11:12.345678+05', '{{\"a\": [1, 2.50]}}',
            '[0:1]={{7,NULL}}', 'ok', ROW(1, 'x'), 3, '\\x00ff'),
           (2, NULL, 'NaN', '-infinity', 'null', '{{}}', NULL, ROW(NULL, NULL), 1, NULL),
           (3, repeat('toast ', 40000), 1e30, now(), '[]', NULL, 'sad', NULL, 2,
            (SELECT string_agg(md5(i::text), '')::bytea FROM generate_series(1, 5000) i));
         UPDATE {t} SET note = 'uno', amount = amount * 2 WHERE k = 1;
         UPDATE {t} SET k = 30 WHERE k = 3;
         UPDATE {t} SET pos = 9 WHERE k = 30;
         DELETE FROM {t} WHERE k = 2;
         TRUNCATE {t};"
    ))
    .expect("workload");
    let cols = "k, note, amount, at, doc, tags, mood, pair, pos, blob";
    let side = |prefix: &str| {
        cols.split(", ")
            .map(|c| format!("b.{prefix}{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let audit_side = |rec: &str| {
        cols.split(", ")
            .map(|c| format!("(a.{rec}).{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (new_b, old_b, new_a, old_a) = (side("new_"), side("old_"), audit_side("nw"), audit_side("o"));
    let differing = Spi::get_one::<i64>(&format!(
        "WITH b AS (SELECT row_number() OVER (ORDER BY xid, seq) AS i, * FROM {buffer}
                    WHERE op <> 'T'),
              a AS (SELECT row_number() OVER (ORDER BY n) AS i, op, o, nw FROM {t}_audit)
         SELECT count(*) FROM b FULL JOIN a USING (i)
         WHERE b.op IS DISTINCT FROM a.op::\"char\"
            OR ROW({new_b}) IS DISTINCT FROM ROW({new_a})
            OR ROW({old_b}) IS DISTINCT FROM ROW({old_a})
            OR b.old_image IS DISTINCT FROM CASE WHEN a.op IN ('U', 'D') THEN 'F' END::\"char\"
            OR b.backfilled IS NOT NULL OR b.unchanged_toast IS NOT NULL"
    ))
    .expect("compare")
    .unwrap_or(-1);
    assert_eq!(differing, 0, "buffer rows whose images differ from the audit's");
    let counts = Spi::get_one::<String>(&format!(
        "SELECT string_agg(op::text || count, ',' ORDER BY op) FROM
           (SELECT op, count(*) FROM {buffer} GROUP BY op) c"
    ))
    .expect("counts")
    .unwrap_or_default();
    assert_eq!(counts, "D1,I3,T1,U3");
    // The TOASTed values arrived whole (the comparison above saw them; their size says so).
    let long = Spi::get_one::<i64>(&format!(
        "SELECT max(length(new_note)) FROM {buffer} WHERE op = 'I'"
    ))
    .expect("length")
    .unwrap_or(0);
    assert_eq!(long, 240_000);
}

/// ALTER TABLE is followed in its own transaction, before the next change: ADD, RENAME, ALTER
/// TYPE and DROP COLUMN, by attnum (a rename keeps the values buffered under the old name),
/// names swapped between two columns included.
#[pg_test]
fn a_source_ddl_is_followed_before_the_next_change() {
    let t = "cap_ddl";
    Spi::run(&format!("CREATE TABLE {t} (k int8 PRIMARY KEY, a text, b int4)")).expect("table");
    let buffer = Spi::get_one::<String>(&format!("SELECT pgtrickle.capture_table('{t}')"))
        .expect("capture_table")
        .expect("buffer");
    Spi::run(&format!("INSERT INTO {t} VALUES (1, 'first', 10)")).expect("insert");
    Spi::run(&format!("ALTER TABLE {t} ADD COLUMN c numeric")).expect("add");
    assert_eq!(
        image_columns(&buffer),
        "new_k bigint, old_k bigint, new_a text, old_a text, new_b integer, old_b integer, \
         new_c numeric, old_c numeric"
    );
    Spi::run(&format!("INSERT INTO {t} VALUES (2, 'second', 20, 2.5)")).expect("insert");
    Spi::run(&format!(
        "ALTER TABLE {t} RENAME COLUMN a TO tmp; ALTER TABLE {t} RENAME COLUMN c TO a;
         ALTER TABLE {t} RENAME COLUMN tmp TO c"
    ))
    .expect("swap names");
    Spi::run(&format!("ALTER TABLE {t} ALTER COLUMN b TYPE int8")).expect("retype");
    assert_eq!(
        image_columns(&buffer),
        "new_k bigint, old_k bigint, new_c text, old_c text, new_b bigint, old_b bigint, \
         new_a numeric, old_a numeric"
    );
    Spi::run(&format!("UPDATE {t} SET b = 5000000000 WHERE k = 2")).expect("update");
    // The rows written before the renames kept their values, under the columns' new names.
    let first = Spi::get_one::<String>(&format!(
        "SELECT new_c || '/' || new_b || '/' || coalesce(new_a::text, 'null')
         FROM {buffer} WHERE op = 'I' AND new_k = 1"
    ))
    .expect("first")
    .unwrap_or_default();
    assert_eq!(first, "first/10/null");
    let update = Spi::get_one::<String>(&format!(
        "SELECT old_b || '->' || new_b || ' ' || new_a || ' ' || new_c
         FROM {buffer} WHERE op = 'U'"
    ))
    .expect("update")
    .unwrap_or_default();
    assert_eq!(update, "20->5000000000 2.5 second");
    Spi::run(&format!("ALTER TABLE {t} DROP COLUMN c")).expect("drop");
    assert_eq!(
        image_columns(&buffer),
        "new_k bigint, old_k bigint, new_b bigint, old_b bigint, new_a numeric, old_a numeric"
    );
    Spi::run(&format!("DELETE FROM {t} WHERE k = 1")).expect("delete");
    Spi::run(&format!("SELECT pgtrickle.check_change_buffer('{buffer}')")).expect("check");
}

/// With the event trigger off, the capture trigger refuses to write under the old shape.
#[pg_test]
#[should_panic(expected = "does not hold the columns")]
fn a_ddl_not_followed_is_refused() {
    let t = "cap_ddl_off";
    Spi::run(&format!("CREATE TABLE {t} (k int8 PRIMARY KEY)")).expect("table");
    Spi::run(&format!("SELECT pgtrickle.capture_table('{t}')")).expect("capture");
    Spi::run("ALTER EVENT TRIGGER pgtrickle_capture_ddl DISABLE").expect("disable");
    Spi::run(&format!("ALTER TABLE {t} ADD COLUMN v text")).expect("add");
    Spi::run(&format!("INSERT INTO {t} VALUES (1, 'x')")).expect("refused");
}

/// ... and capture_table follows what was missed.
#[pg_test]
fn capture_table_follows_a_missed_ddl() {
    let t = "cap_ddl_late";
    Spi::run(&format!("CREATE TABLE {t} (k int8 PRIMARY KEY)")).expect("table");
    let buffer = Spi::get_one::<String>(&format!("SELECT pgtrickle.capture_table('{t}')"))
        .expect("capture_table")
        .expect("buffer");
    Spi::run("ALTER EVENT TRIGGER pgtrickle_capture_ddl DISABLE").expect("disable");
    Spi::run(&format!("ALTER TABLE {t} ADD COLUMN v text")).expect("add");
    Spi::run(&format!("SELECT pgtrickle.capture_table('{t}')")).expect("again");
    Spi::run(&format!("INSERT INTO {t} VALUES (1, 'x')")).expect("insert");
    assert_eq!(
        image_columns(&buffer),
        "new_k bigint, old_k bigint, new_v text, old_v text"
    );
}

/// The cast that converts buffered values when a column changes type runs as the buffer's
/// owner (the source's owner), never as the extension's owner who runs the event trigger.
#[pg_test]
fn a_type_change_converts_the_buffer_as_its_owner() {
    Spi::run(
        // A schema of its own (no grant that updates a schema row other tests update too:
        // concurrent tests would deadlock on it).
        "CREATE ROLE cap_owner;
         CREATE SCHEMA cap_own AUTHORIZATION cap_owner;
         SET ROLE cap_owner;
         CREATE TABLE cap_own.cap_calls (who text);
         CREATE TYPE cap_own.cap_wrapped AS (v int4);
         CREATE FUNCTION cap_own.cap_wrap(int4) RETURNS cap_own.cap_wrapped LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO cap_own.cap_calls VALUES (current_user);
           RETURN ROW($1)::cap_own.cap_wrapped;
         END $$;
         CREATE CAST (int4 AS cap_own.cap_wrapped) WITH FUNCTION cap_own.cap_wrap(int4) AS ASSIGNMENT;
         CREATE TABLE cap_own.cap_cast (k int8 PRIMARY KEY, v int4);
         SELECT pgtrickle.capture_table('cap_own.cap_cast');
         INSERT INTO cap_own.cap_cast VALUES (1, 7);
         RESET ROLE;",
    )
    .expect("setup");
    // A superuser runs the DDL: the event trigger runs as the extension's owner.
    Spi::run("ALTER TABLE cap_own.cap_cast ALTER COLUMN v TYPE cap_own.cap_wrapped")
        .expect("retype");
    let who = Spi::get_one::<String>("SELECT string_agg(DISTINCT who, ',') FROM cap_own.cap_calls")
        .expect("calls")
        .unwrap_or_default();
    let superuser = Spi::get_one::<String>("SELECT current_user::text")
        .expect("me")
        .unwrap_or_default();
    // The source's own rewrite ran the cast as the superuser who ran the DDL; the buffer's
    // conversion (its one row: the insert's new_v) only as cap_owner.
    let calls =
        Spi::get_one::<i64>("SELECT count(*) FROM cap_own.cap_calls WHERE who = 'cap_owner'")
        .expect("owner calls")
        .unwrap_or(0);
    assert!(calls >= 1, "the buffer's cast did not run as its owner: {who}");
    assert!(who.split(',').all(|w| w == "cap_owner" || w == superuser), "{who}");
    let v = Spi::get_one::<String>(&format!(
        "SELECT (new_v).v::text FROM pgtrickle_changes.changes_{} WHERE op = 'I'",
        Spi::get_one::<pg_sys::Oid>("SELECT 'cap_own.cap_cast'::regclass::oid")
            .expect("oid")
            .map(u32::from)
            .unwrap_or(0)
    ))
    .expect("converted")
    .unwrap_or_default();
    assert_eq!(v, "7");
}

/// An ALTER TYPE whose USING has no cast equivalent (int4 to point) is followed while the
/// buffer is empty (nothing to convert); with changes buffered, the DDL fails naming the
/// buffer and the fix, and the buffered changes are kept.
#[pg_test]
fn a_retype_without_a_cast_follows_an_empty_buffer() {
    let t = "cap_retype";
    Spi::run(&format!("CREATE TABLE {t} (k int8 PRIMARY KEY, b int4)")).expect("table");
    let buffer = Spi::get_one::<String>(&format!("SELECT pgtrickle.capture_table('{t}')"))
        .expect("capture_table")
        .expect("buffer");
    Spi::run(&format!(
        "ALTER TABLE {t} ALTER COLUMN b TYPE point USING point(b, b)"
    ))
    .expect("retype an empty buffer");
    assert_eq!(
        image_columns(&buffer),
        "new_k bigint, old_k bigint, new_b point, old_b point"
    );
    Spi::run(&format!("INSERT INTO {t} VALUES (1, point(2, 3))")).expect("insert");
    let b = Spi::get_one::<String>(&format!("SELECT new_b::text FROM {buffer} WHERE op = 'I'"))
        .expect("row")
        .unwrap_or_default();
    assert_eq!(b, "(2,3)");
}

/// ... and a full buffer refuses the DDL by name.
#[pg_test]
#[should_panic(expected = "the buffer holds changes with the columns' old types")]
fn a_retype_without_a_cast_is_refused_while_changes_are_buffered() {
    let t = "cap_retype_full";
    Spi::run(&format!("CREATE TABLE {t} (k int8 PRIMARY KEY, b int4)")).expect("table");
    Spi::run(&format!("SELECT pgtrickle.capture_table('{t}')")).expect("capture");
    Spi::run(&format!("INSERT INTO {t} VALUES (1, 2)")).expect("insert");
    Spi::run(&format!(
        "ALTER TABLE {t} ALTER COLUMN b TYPE point USING point(b, b)"
    ))
    .expect("refused");
}
