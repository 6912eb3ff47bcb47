// `pgtrickle.encode_row_id_v2_fields` inside PostgreSQL: the record form's bytes without the
// ROW, its own resolution beside the record form, dispatch that follows the argument types,
// and the record form's named rejections. Included into lib.rs's `tests` module after
// tests.rs (whose imports it uses).

/// Scalars, NULLs, child identities and structures: both forms give the same bytes.
#[pg_test]
fn the_argument_form_is_the_record_form_without_the_row() {
    Spi::run(
        "CREATE TYPE ef_mood AS ENUM ('sad', 'ok');
         CREATE TYPE ef_pair AS (a int4, b text);",
    )
    .expect("types");
    for args in [
        "1::int8",
        "1::int8, 2::int8",
        "'a'::text, NULL::int4, 3.25::numeric",
        "'ok'::ef_mood",
        "ROW(1, 'x')::ef_pair",
        "ARRAY[1, 2, 3]::int4[]",
        "'[1,5)'::int4range",
        "'{\"a\": [1, true]}'::jsonb",
        "'abc'::varchar(5), 'x'::char(3)",
        "'2026-12-01 12:00:00+00'::timestamptz, '1 day'::interval, gen_random_uuid()",
        "pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(7))::pgtrickle.row_id",
    ] {
        let both = Spi::get_one::<bool>(&format!(
            "SELECT pgtrickle.encode_row_id_v2_fields('SCAN_KEY', {args}) \
             = pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({args}))"
        ))
        .expect("runs");
        // gen_random_uuid() is volatile: its two calls differ; compare through one row.
        if args.contains("gen_random_uuid") {
            let same = Spi::get_one::<bool>(
                "SELECT pgtrickle.encode_row_id_v2_fields('KEYLESS_ROW', t, i, u) \
                 = pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(t, i, u)) FROM \
                 (SELECT '2026-12-01 12:00:00+00'::timestamptz, '1 day'::interval, \
                 gen_random_uuid()) v(t, i, u)",
            )
            .expect("runs");
            assert_eq!(same, Some(true), "{args}");
        } else {
            assert_eq!(both, Some(true), "{args}");
        }
    }
}

/// `encode_row_id_v2` with ROW(...) or a table's row still means the record form; one
/// composite argument of the argument form is one composite field.
#[pg_test]
fn the_record_form_keeps_its_calls() {
    Spi::run("CREATE TABLE ef_t (a int4 PRIMARY KEY, b text); INSERT INTO ef_t VALUES (1, 'x');")
        .expect("table");
    let record = hex_of("pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(1, 'x'::text))");
    // A named composite (a trigger's NEW, a table row): resolves to the record form.
    let row = Spi::get_one::<String>(
        "SELECT encode(pgtrickle.encode_row_id_v2('KEYLESS_ROW', t), 'hex') FROM ef_t t",
    )
    .expect("runs")
    .expect("value");
    assert_eq!(row, record, "a table row is the record form's fields");
    assert_eq!(
        hex_of("pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(1, 'x'::text))"),
        hex_of("pgtrickle.encode_row_id_v2_fields('KEYLESS_ROW', 1, 'x'::text)")
    );
    // One composite argument of the argument form is a single composite field, not its
    // fields spread out.
    assert_eq!(
        hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', ROW(1, 'x')::ef_t)"),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(ROW(1, 'x')::ef_t))")
    );
    assert_ne!(
        hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', ROW(1, 'x')::ef_t)"),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1, 'x'::text))")
    );
}

/// An anonymous ROW(...) as an argument is refused as the record form refuses a nested one.
#[pg_test]
#[should_panic(expected = "identity field \"argument 1 (record)\" of type record: anonymous structural type")]
fn anonymous_row_arguments_are_refused_like_nested_records() {
    hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', ROW(1, 'x'::text))");
}

/// A polymorphic function instantiated with other types, and a prepared statement re-planned
/// after its column changed type, never reuse a dispatch built for other types.
#[pg_test]
fn dispatch_follows_the_argument_types() {
    Spi::run(
        "CREATE FUNCTION ef_poly(anyelement) RETURNS bytea LANGUAGE plpgsql AS $$
         BEGIN RETURN pgtrickle.encode_row_id_v2_fields('SCAN_KEY', $1); END $$;
         CREATE FUNCTION ef_poly_sql(anyelement, anyelement) RETURNS bytea LANGUAGE sql AS $$
         SELECT pgtrickle.encode_row_id_v2_fields('SCAN_KEY', $1, $2) $$;",
    )
    .expect("functions");
    for (a, b) in [
        ("1::int8", "2::int8"),
        ("'a'::text", "'b'::text"),
        ("1::int4", "2::int4"),
        ("1::int8", "2::int8"),
        ("'[1,2)'::int4range", "'[2,3)'::int4range"),
    ] {
        let ok = Spi::get_one::<bool>(&format!(
            "SELECT ef_poly({a}) = pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({a})) \
             AND ef_poly_sql({a}, {b}) = pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({a}, {b}))"
        ))
        .expect("runs");
        assert_eq!(ok, Some(true), "{a}, {b}");
    }
    // One statement, one call site in a plpgsql loop over values of two types.
    let distinct = Spi::get_one::<i64>(
        "SELECT count(DISTINCT x) FROM (SELECT ef_poly(1::int8) x UNION ALL \
         SELECT ef_poly(1::int4) UNION ALL SELECT ef_poly('1'::text)) v",
    )
    .expect("runs");
    assert_eq!(distinct, Some(3), "int8, int4 and text are three identities");

    // A cached plan re-planned after the column's type changed.
    Spi::run(
        "CREATE TABLE ef_p (c int8); INSERT INTO ef_p VALUES (42);
         CREATE FUNCTION ef_read() RETURNS bytea LANGUAGE plpgsql AS $$
         DECLARE r bytea; BEGIN
           SELECT pgtrickle.encode_row_id_v2_fields('SCAN_KEY', c) INTO r FROM ef_p;
           RETURN r; END $$;",
    )
    .expect("setup");
    assert_eq!(
        hex_of("ef_read()"),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(42::int8))")
    );
    Spi::run("ALTER TABLE ef_p ALTER COLUMN c TYPE text").expect("alter");
    assert_eq!(
        hex_of("ef_read()"),
        hex_of("pgtrickle.encode_row_id_v2('SCAN_KEY', ROW('42'::text))"),
        "the re-planned statement encodes text, not int8"
    );
}

#[pg_test]
#[should_panic(expected = "type has no proven V2 encoder")]
fn unsupported_argument_types_are_rejected_by_name() {
    hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', 1::int8, 1::money)");
}

#[pg_test]
#[should_panic(expected = "argument 2 (money)")]
fn rejections_name_the_argument() {
    hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', 1::int8, 1::money)");
}

#[pg_test]
#[should_panic(expected = "untyped literal")]
fn untyped_literals_are_refused() {
    hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', 'x')");
}

#[pg_test]
#[should_panic(expected = "explicit VARIADIC array")]
fn explicit_variadic_arrays_are_refused() {
    hex_of("pgtrickle.encode_row_id_v2_fields('SCAN_KEY', VARIADIC ARRAY[1, 2])");
}

#[pg_test]
#[should_panic(expected = "unknown identity domain")]
fn argument_form_unknown_domains_are_rejected() {
    hex_of("pgtrickle.encode_row_id_v2_fields('PRIMARY', 1)");
}

#[pg_test]
#[should_panic(expected = "domain must not be NULL")]
fn argument_form_null_domains_are_rejected() {
    hex_of("pgtrickle.encode_row_id_v2_fields(NULL, 1)");
}
