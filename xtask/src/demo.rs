//! `cargo xtask demo`: a throwaway PostgreSQL 15 with the extension, showing identities.
//!
//! Installs what is missing (as `cargo xtask test` does), builds and installs the extension,
//! starts a cluster under `target/demo`, creates sample source tables (integer, uuid,
//! composite text and keyless), prints their identities, fingerprints and probes, plans each
//! storage index with `rowid-registry`, applies an update through the exact-match SQL the
//! registry generates, and stops the cluster.

use rowid_codec::Domain;
use rowid_codec::probe::PROBE_V1_PREFIX_LEN;
use rowid_registry::catalog::oid;
use rowid_registry::sql::{QualifiedName, index_ddl, merge, upsert};
use rowid_registry::{
    Collation, FieldSpec, IndexClass, MaintenanceMode, ServerContext, TypeRef, Uniqueness,
    plan_index, resolve_schema,
};

use crate::pg::Cluster;
use crate::setup;
use crate::shell::{cargo, exec, root, step};

fn psql(cluster: &Cluster, sql: &str) -> Result<String, String> {
    cluster.psql().show(sql)
}

fn show(cluster: &Cluster, title: &str, sql: &str) -> Result<(), String> {
    println!("\n-- {title}\n{}", sql.trim());
    print!("{}", psql(cluster, sql)?);
    Ok(())
}

/// Plans the storage index of a stream table keyed like `fields` and creates it.
fn storage_table(
    cluster: &Cluster,
    name: &str,
    domain: Domain,
    fields: &[FieldSpec],
    uniqueness: Uniqueness,
    columns: &str,
) -> Result<IndexClass, String> {
    let ctx = ServerContext {
        pg_major: 15,
        max_char_bytes: 4,
        block_size: 8192,
    };
    let schema = resolve_schema(domain, fields, &ctx).map_err(|e| e.to_string())?;
    let plan = plan_index(
        &schema,
        uniqueness,
        MaintenanceMode::Refresh,
        8192,
        PROBE_V1_PREFIX_LEN,
    )
    .map_err(|e| e.to_string())?;
    let bound = schema
        .max_encoded_len()
        .map_or("unbounded".to_string(), |b| format!("at most {b} bytes"));
    println!(
        "\n-- plan for {name}: identity {bound}, B-tree datum limit {} bytes -> {:?}",
        plan.max_indexable_datum, plan.class
    );
    let table = QualifiedName::new("public", name);
    let ddl = index_ddl(plan.class, &format!("{name}_row_id"), &table);
    psql(
        cluster,
        &format!("CREATE TABLE {name} (__pgt_row_id bytea NOT NULL, {columns})"),
    )?;
    println!("{ddl};");
    psql(cluster, &ddl)?;
    Ok(plan.class)
}

pub fn run() -> Result<(), String> {
    step("setup: cargo-pgrx, PostgreSQL 15 and its build packages (skipped when present)");
    setup::pgrx(&[])?;
    step("build and install the extension into the system PostgreSQL 15");
    let mut install = cargo();
    install
        .current_dir(root().join("crates").join("pg-trickle-ext"))
        .args(["pgrx", "install", "--pg-config", setup::PG15_CONFIG]);
    exec(&mut install)?;
    step("throwaway cluster under target/demo");
    let bindir = crate::pg::Source::Debian.bindir()?;
    let cluster = crate::pg::cluster(&bindir, "demo", 55_399)?;

    psql(&cluster, "CREATE EXTENSION pg_trickle_ext")?;
    psql(
        &cluster,
        "
        CREATE TABLE orders (id int8 PRIMARY KEY, amount numeric(12, 2), note text);
        INSERT INTO orders VALUES (1, 19.99, 'first'), (2, 5.00, 'second'), (42, 1.50, NULL);
        CREATE TABLE users (id uuid PRIMARY KEY, name text);
        INSERT INTO users VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'ada');
        CREATE TABLE tenants (region text, name text, PRIMARY KEY (region, name));
        INSERT INTO tenants VALUES ('eu', 'acme'), ('eu', 'acme2'), ('us', 'acme');
        CREATE TABLE events (at timestamptz, kind text, payload text);
        INSERT INTO events VALUES ('2026-11-30 12:00+00', 'click', repeat('x', 300)),
                                  ('2026-11-30 12:00+00', 'click', repeat('x', 300));
    ",
    )?;

    show(
        &cluster,
        "integer primary key: SCAN_KEY identities",
        "
        SELECT id, encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), 'hex') AS row_id,
               pgtrickle.row_id_fingerprint(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)))
        FROM orders ORDER BY id",
    )?;
    show(
        &cluster,
        "uuid primary key",
        "
        SELECT encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), 'hex') AS row_id FROM users",
    )?;
    show(
        &cluster,
        "composite text key (region, name): ('eu','acme2') sorts after ('eu','acme')",
        "
        SELECT region, name,
               encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(region, name)), 'hex') AS row_id
        FROM tenants ORDER BY pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(region, name))",
    )?;
    show(&cluster, "keyless rows: identical rows share an identity; ids longer than P = 64 get an 80-byte probe", "
        SELECT length(pgtrickle.encode_row_id_v2('KEYLESS_ROW', e)) AS id_bytes,
               length(pgtrickle.row_probe_v1(pgtrickle.encode_row_id_v2('KEYLESS_ROW', e))) AS probe_bytes,
               pgtrickle.row_id_fingerprint(pgtrickle.encode_row_id_v2('KEYLESS_ROW', e))
        FROM events e")?;
    show(&cluster, "settings do not change identities (TimeZone, DateStyle, extra_float_digits)", "
        SELECT encode(pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(at, 1.0::float8)), 'hex') FROM events LIMIT 1;
        SET TimeZone = 'Asia/Tokyo'; SET DateStyle = 'SQL, DMY'; SET extra_float_digits = -3;
        SELECT encode(pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(at, 1.0::float8)), 'hex') FROM events LIMIT 1")?;
    show(&cluster, "1.0 and 1.00 group together; '1 mon' and '30 days' too", "
        SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(1.0::numeric)) = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(1.00::numeric)) AS numeric_equal,
               pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('1 mon'::interval)) = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('30 days'::interval)) AS interval_equal")?;
    show(&cluster, "structural values: jsonb key order and duplicates do not matter, [1,3] is [1,4), lower bounds do", "
        SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('{\"b\": 1.0, \"a\": [true]}'::jsonb))
             = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('{\"a\": null, \"a\": [true], \"b\": 1.00}'::jsonb)) AS jsonb_equal,
               pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('[1,3]'::int4range))
             = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('[1,4)'::int4range)) AS range_equal,
               pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('{1,2}'::int4[]))
             = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW('[0:1]={1,2}'::int4[])) AS arrays_with_other_bounds_equal;
        SELECT pgtrickle.row_id_describe(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(ARRAY[1, NULL], '{[1,3),[5,7)}'::int4multirange, '{\"k\": [1, \"x\"]}'::jsonb)))")?;

    // Storage with the planned indexes, then an update through the exact-match path.
    let int8 = FieldSpec::new("id", TypeRef::builtin(oid::INT8, "int8"), -1);
    let class = storage_table(
        &cluster,
        "st_orders",
        Domain::ScanKey,
        &[int8],
        Uniqueness::Unique,
        "amount numeric, note text",
    )?;
    let cols = ["amount", "note"];
    psql(
        &cluster,
        "INSERT INTO st_orders SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), amount, note FROM orders",
    )?;
    psql(&cluster, "UPDATE orders SET amount = 25.00 WHERE id = 1")?;
    let table = QualifiedName::new("public", "st_orders");
    let apply = upsert(class, &table, "delta", &cols).ok_or("bounded unique plan expected")?;
    let sql = format!(
        "CREATE TEMP TABLE delta AS SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)) AS __pgt_row_id, amount, note FROM orders WHERE id = 1; {apply}; SELECT encode(__pgt_row_id, 'hex') AS row_id, amount, note FROM st_orders ORDER BY __pgt_row_id"
    );
    show(
        &cluster,
        "apply the delta for id 1 (amount 19.99 -> 25.00) with the registry's upsert",
        &sql,
    )?;

    let text =
        FieldSpec::new("payload", TypeRef::builtin(oid::TEXT, "text"), -1).collate(Collation::c());
    let class = storage_table(
        &cluster,
        "st_events",
        Domain::KeylessRow,
        &[
            FieldSpec::new("at", TypeRef::builtin(oid::TIMESTAMPTZ, "timestamptz"), -1),
            FieldSpec::new("kind", TypeRef::builtin(oid::TEXT, "text"), -1).collate(Collation::c()),
            text,
        ],
        Uniqueness::Multiset,
        "at timestamptz, kind text, payload text",
    )?;
    let merge_sql = merge(
        class,
        &QualifiedName::new("public", "st_events"),
        "delta_e",
        &["at", "kind", "payload"],
    );
    let sql = format!(
        "CREATE TEMP TABLE delta_e AS SELECT DISTINCT pgtrickle.encode_row_id_v2('KEYLESS_ROW', e) AS __pgt_row_id, e.* FROM events e; {merge_sql}; SELECT length(__pgt_row_id) AS id_bytes, kind FROM st_events"
    );
    show(
        &cluster,
        "keyless storage: probe expression index, MERGE with probe AND full-identity match",
        &sql,
    )?;
    show(
        &cluster,
        "the probe index serves the exact-match lookup",
        "
        SET enable_seqscan = off;
        EXPLAIN (COSTS OFF) SELECT * FROM st_events t
        WHERE pgtrickle.row_probe_v1(t.__pgt_row_id) = pgtrickle.row_probe_v1('\\x02'::bytea)
          AND t.__pgt_row_id = '\\x02'::bytea",
    )?;
    drop(cluster);
    println!("\ndemo finished; the cluster under target/demo is stopped.");
    Ok(())
}
