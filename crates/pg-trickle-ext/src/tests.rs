// Tests inside PostgreSQL (`cargo pgrx test`): the extension against the codec.
// Included into the `#[pg_schema] mod tests` of lib.rs (pgrx needs an inline module).

use pgrx::prelude::*;
use rowid_codec::{OwnedValue, encode_identity};
use rowid_vectors::{families, to_hex};

fn hex_of(sql: &str) -> String {
    Spi::get_one::<String>(&format!("SELECT encode(({sql}), 'hex')"))
        .expect("query runs")
        .expect("not NULL")
}

/// Every golden vector's SQL literal, encoded inside the server, equals the vector's bytes.
#[pg_test]
fn golden_vectors_encode_identically_inside_the_server() {
    let major = pg_sys::PG_VERSION_NUM / 10_000;
    let (mut checked, mut newer, mut unrepresentable) = (0, 0, 0);
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
            checked += 1;
        }
    }
    pgrx::notice!(
        "golden vectors: {checked} encoded in PostgreSQL {major} and equal; {newer} need a newer \
         major; {unrepresentable} have no SQL literal"
    );
    assert!(checked >= 120, "only {checked} vectors checked");
}

/// `row_probe_v1` inside the server equals the codec's probe for the provisional P.
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
