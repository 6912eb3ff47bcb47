//! `cargo xtask demo`: a throwaway PostgreSQL 15 with the extension, showing identities.
//!
//! Installs what is missing (as `cargo xtask test` does), builds and installs the extension,
//! starts a cluster under `target/demo`, creates sample source tables (integer, uuid,
//! composite text and keyless), prints their identities, fingerprints and probes, plans each
//! storage index with `rowid-registry`, applies an update through the exact-match SQL the
//! registry generates, runs `rowid-cdc` on a live slot through a key change and a TOASTed
//! keyless update, keeps a replica of two tables in another database with it, keeps stream
//! tables (one graph of them refreshed by the scheduler) and stops the cluster.

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
    step(
        "setup: cargo-pgrx, PostgreSQL 15 and its build packages, nats-server (skipped when present)",
    );
    setup::pgrx(&[])?;
    setup::apt(&["nats-server"])?;
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
    capture_by_trigger(&cluster)?;
    follow_with_rowid_cdc(&cluster)?;
    keep_a_replica(&cluster)?;
    publish_to_nats(&cluster)?;
    stream_tables(&cluster)?;
    scheduled_graph(&cluster)?;
    drop(cluster);
    println!("\ndemo finished; the cluster under target/demo is stopped.");
    Ok(())
}

/// Stream tables: an aggregate and a join kept DIFFERENTIAL (refreshed from the change
/// buffers) and IMMEDIATE (inside every writing statement), each shown equal to its query.
fn stream_tables(cluster: &Cluster) -> Result<(), String> {
    step(
        "stream tables: an aggregate and a join kept DIFFERENTIAL and IMMEDIATE, equal to their queries",
    );
    show(
        cluster,
        "two sources and four stream tables (pg_trickle's calls)",
        "CREATE TABLE sales (id int8 PRIMARY KEY, region text NOT NULL, store int4 NOT NULL,
                             amount numeric NOT NULL);
         CREATE TABLE stores (store int4 PRIMARY KEY, city text NOT NULL);
         INSERT INTO stores VALUES (1, 'Lyon'), (2, 'Porto'), (3, 'Oslo');
         INSERT INTO sales SELECT g, (ARRAY['north', 'south', 'east'])[g % 3 + 1], g % 3 + 1,
                                  (g % 50)::numeric + 0.50
                           FROM generate_series(1, 3000) g;
         SELECT pgtrickle.create_stream_table('sales_by_region',
           'SELECT region, count(*) AS n, sum(amount) AS total FROM sales GROUP BY region',
           refresh_mode => 'DIFFERENTIAL');
         SELECT pgtrickle.create_stream_table('sales_with_city',
           'SELECT s.id, st.city, s.amount FROM sales s JOIN stores st ON st.store = s.store',
           refresh_mode => 'DIFFERENTIAL');
         SELECT pgtrickle.create_stream_table('sales_by_store_now',
           'SELECT store, count(*) AS n, sum(amount) AS total FROM sales GROUP BY store',
           refresh_mode => 'IMMEDIATE');
         SELECT pgtrickle.create_stream_table('sales_with_city_now',
           'SELECT s.id, st.city FROM sales s JOIN stores st ON st.store = s.store',
           refresh_mode => 'IMMEDIATE');
         SELECT pgt_name, refresh_mode, identity_domain, index_class
         FROM pgtrickle.pgt_stream_tables ORDER BY pgt_name",
    )?;
    show(
        cluster,
        "writes: keys moved, rows deleted and inserted, a store moved to another city; the \
         DIFFERENTIAL tables refreshed (the IMMEDIATE ones already are)",
        "UPDATE sales SET id = id + 100000 WHERE id % 10 = 0;
         DELETE FROM sales WHERE id % 7 = 0;
         INSERT INTO sales SELECT g, 'west', 2, 9.99 FROM generate_series(5001, 5100) g;
         UPDATE stores SET city = 'Bergen' WHERE store = 3;
         SELECT pgtrickle.refresh_stream_table('sales_by_region');
         SELECT pgtrickle.refresh_stream_table('sales_with_city');
         SELECT pgt_name, rows_changed FROM pgtrickle.pgt_stream_tables
         WHERE refresh_mode = 'DIFFERENTIAL' ORDER BY pgt_name",
    )?;
    show(
        cluster,
        "each stream table equals its query run fresh (rows in one and not the other, both \
         ways, as multisets: 0)",
        "SELECT 'sales_by_region' AS stream_table, count(*) AS differences FROM (
           (SELECT region, n, total FROM sales_by_region
            EXCEPT ALL SELECT region, count(*), sum(amount) FROM sales GROUP BY region)
           UNION ALL (SELECT region, count(*), sum(amount) FROM sales GROUP BY region
            EXCEPT ALL SELECT region, n, total FROM sales_by_region)) d
         UNION ALL
         SELECT 'sales_with_city', count(*) FROM (
           (SELECT id, city, amount FROM sales_with_city
            EXCEPT ALL SELECT s.id, st.city, s.amount FROM sales s JOIN stores st USING (store))
           UNION ALL (SELECT s.id, st.city, s.amount FROM sales s JOIN stores st USING (store)
            EXCEPT ALL SELECT id, city, amount FROM sales_with_city)) d
         UNION ALL
         SELECT 'sales_by_store_now', count(*) FROM (
           (SELECT store, n, total FROM sales_by_store_now
            EXCEPT ALL SELECT store, count(*), sum(amount) FROM sales GROUP BY store)
           UNION ALL (SELECT store, count(*), sum(amount) FROM sales GROUP BY store
            EXCEPT ALL SELECT store, n, total FROM sales_by_store_now)) d
         UNION ALL
         SELECT 'sales_with_city_now', count(*) FROM (
           (SELECT id, city FROM sales_with_city_now
            EXCEPT ALL SELECT s.id, st.city FROM sales s JOIN stores st USING (store))
           UNION ALL (SELECT s.id, st.city FROM sales s JOIN stores st USING (store)
            EXCEPT ALL SELECT id, city FROM sales_with_city_now)) d",
    )?;
    show(
        cluster,
        "every __pgt_row_id is the identity anyone derives with encode_row_id_v2 (a group's \
         GROUP_KEY; a joined row's JOIN_KEY of its two source rows' identities)",
        "SELECT region, total, pgtrickle.row_id_describe(__pgt_row_id) AS identity,
                __pgt_row_id = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(region)) AS derived
         FROM sales_by_region ORDER BY region;
         SELECT id, city, pgtrickle.row_id_describe(__pgt_row_id) AS identity,
                __pgt_row_id = pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(st.store))::pgtrickle.row_id))
                  AS derived
         FROM sales_with_city_now JOIN stores st USING (city) WHERE id IN (5001, 100010)
         ORDER BY id",
    )
}

/// The scheduler: the server restarted with the extension in `shared_preload_libraries`, a
/// graph of three stream tables (a join, an aggregate over it, a filter over that) kept on
/// schedule, and a write reaching the third level without a refresh by hand.
fn scheduled_graph(cluster: &Cluster) -> Result<(), String> {
    step(
        "the scheduler: a graph of three stream tables on schedule, a write reaching the third \
         level by itself",
    );
    cluster.restart("-c shared_preload_libraries=pg_trickle_ext")?;
    show(
        cluster,
        "stream tables over stream tables: the join and the aggregate as often as the filter \
         over them needs ('calculated'), the filter every second",
        "SELECT pgtrickle.create_stream_table('city_sales',
           'SELECT s.id, st.city, s.amount FROM sales s JOIN stores st ON st.store = s.store',
           schedule => 'calculated');
         SELECT pgtrickle.create_stream_table('city_totals',
           'SELECT city, count(*) AS n, sum(amount) AS total FROM city_sales GROUP BY city',
           schedule => 'calculated');
         SELECT pgtrickle.create_stream_table('big_cities',
           'SELECT city, total FROM city_totals WHERE n > 1000', schedule => '1s');
         SELECT city, total FROM big_cities ORDER BY city;
         SELECT backend_type, datname FROM pg_stat_activity
         WHERE backend_type LIKE 'pg_trickle%' ORDER BY backend_type",
    )?;
    let db = cluster.psql();
    db.run("INSERT INTO sales SELECT g, 'west', 1, 100 FROM generate_series(9001, 9400) g")?;
    let written = std::time::Instant::now();
    db.wait_for(
        "SELECT count(*) FROM big_cities WHERE city = 'Lyon'",
        "1",
        "Lyon reaching big_cities",
    );
    println!(
        "\n-- 400 sales written in Lyon: in big_cities (three levels down, no refresh by hand) \
         {} ms later",
        written.elapsed().as_millis()
    );
    show(
        cluster,
        "the third level equals its query over the sources; the scheduler's refreshes",
        "SELECT city, total, __pgt_row_id = pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(city))
                  AS identity_derived
         FROM big_cities ORDER BY city;
         SELECT st.city, sum(s.amount) AS total FROM sales s JOIN stores st USING (store)
         GROUP BY st.city HAVING count(*) > 1000 ORDER BY st.city;
         SELECT pgt_name, rows_changed, round(duration_ms::numeric, 1) AS ms
         FROM pgtrickle.pgt_refresh_history WHERE rows_changed > 0
         ORDER BY started_at DESC LIMIT 3",
    )
}

/// `rowid-cdc` follows two tables through a key change and a TOASTed keyless update.
/// Trigger capture: a table's changes with their identities in its change buffer, the key
/// moved between two statements, and the argument form beside the record form.
fn capture_by_trigger(cluster: &Cluster) -> Result<(), String> {
    step("trigger capture: pgtrickle.capture_table, identities of every change in the buffer");
    show(
        cluster,
        "the argument form gives the record form's bytes without ROW",
        "SELECT pgtrickle.encode_row_id_v2_fields('SCAN_KEY', 42::int8, 'x'::text) \
         = pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(42::int8, 'x'::text)) AS same_bytes",
    )?;
    show(
        cluster,
        "capture_table validates the key, creates the buffer (no PUBLIC access) and triggers",
        "CREATE TABLE tickets (id int8 PRIMARY KEY, code text NOT NULL UNIQUE, state text);
         SELECT pgtrickle.capture_table('tickets') AS buffer",
    )?;
    psql(
        cluster,
        "BEGIN;
         INSERT INTO tickets VALUES (1, 'A-1', 'open'), (2, 'A-2', 'open');
         UPDATE tickets SET id = 10 WHERE id = 1;
         ALTER TABLE tickets DROP CONSTRAINT tickets_pkey;
         UPDATE tickets SET state = 'closed' WHERE code = 'A-2';
         DELETE FROM tickets WHERE code = 'A-1';
         COMMIT;",
    )?;
    show(
        cluster,
        "one row per change with its row images (old_<column>, new_<column>); after the \
         primary key is dropped mid-transaction the identity follows the next key (code), as \
         pgtrickle.encode_row_id_v2 would",
        "DO $$ BEGIN EXECUTE format('CREATE TEMP VIEW tickets_changes AS SELECT * FROM \
         pgtrickle_changes.changes_%s', 'tickets'::regclass::oid); END $$;
         SELECT pgtrickle.check_change_buffer(('pgtrickle_changes.changes_' || 'tickets'::regclass::oid)::regclass) AS buffer_ok;
         SELECT b.seq, b.op, pgtrickle.row_id_describe(b.__pgt_old_row_id) AS old_identity,
                pgtrickle.row_id_describe(b.__pgt_row_id) AS new_identity,
                b.old_state, b.new_state
         FROM tickets_changes b ORDER BY b.seq",
    )
}

fn follow_with_rowid_cdc(cluster: &Cluster) -> Result<(), String> {
    step("rowid-cdc: live change capture with identities, the key taken at each change's position");
    exec(cargo().args(["build", "-p", "rowid-cdc"]))?;
    let dir = root().join("target").join("demo");
    let (state, out) = (dir.join("cdc.state"), dir.join("changes.jsonl"));
    let _ = std::fs::remove_file(&state);
    let _ = std::fs::remove_file(&out);
    show(
        cluster,
        "identity schemas travel in the WAL; a publication names what is captured",
        "
        SELECT pgtrickle.enable_identity_messages();
        CREATE TABLE docs (id int8 PRIMARY KEY, title text);
        CREATE TABLE blobs (k int4, body text);
        ALTER TABLE blobs ALTER COLUMN body SET STORAGE EXTERNAL;
        ALTER TABLE blobs REPLICA IDENTITY FULL;
        CREATE TABLE pages (id int4 PRIMARY KEY, title text, body text);
        ALTER TABLE pages ALTER COLUMN body SET STORAGE EXTERNAL;
        CREATE PUBLICATION demo_cdc FOR TABLE docs, blobs, pages;
        INSERT INTO docs VALUES (100, 'written before the slot');
        SELECT pgtrickle.identity_schema('docs'::regclass) AS docs_identity_schema",
    )?;
    let binary = root().join("target").join("debug").join("rowid-cdc");
    let dsn = cluster.dsn("postgres");
    println!(
        "\n$ rowid-cdc --dsn '{dsn}' --slot demo_cdc --publication demo_cdc --create-slot --snapshot \\\n    --state target/demo/cdc.state --sink jsonl:target/demo/changes.jsonl --stop-after 8"
    );
    let mut child = std::process::Command::new(&binary)
        .args([
            "--dsn",
            &dsn,
            "--slot",
            "demo_cdc",
            "--publication",
            "demo_cdc",
        ])
        .args([
            "--create-slot",
            "--snapshot",
            "--stop-after",
            "8",
            "--state",
        ])
        .arg(&state)
        .arg("--sink")
        .arg(format!("jsonl:{}", out.display()))
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let started = std::time::Instant::now();
    while psql(cluster, "SELECT count(*) FROM pg_replication_slots")?.contains(" 0\n") {
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            return Err("rowid-cdc did not create its slot".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The keyed tables are read in chunks while streaming: the workload starts once the
    // state file says every chunk was delivered (a change of a row not yet delivered would
    // arrive inside its snapshot row instead).
    loop {
        let text = std::fs::read_to_string(&state).unwrap_or_default();
        if chunks_delivered(&text) {
            break;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            return Err(format!("rowid-cdc did not finish its snapshot: {text}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    show(
        cluster,
        "one transaction: a key change, the primary key moved to (id, title) between two inserts, a TOASTed row updated through a sibling column under REPLICA IDENTITY FULL (its value filled from the old row: backfilled) and under DEFAULT (not in the WAL: unchanged_toast, absent, never NULL)",
        "
        INSERT INTO docs VALUES (1, 'draft');
        UPDATE docs SET id = 2 WHERE id = 1;
        ALTER TABLE docs DROP CONSTRAINT docs_pkey, ADD PRIMARY KEY (id, title);
        INSERT INTO docs VALUES (3, 'final');
        INSERT INTO blobs VALUES (1, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) g));
        UPDATE blobs SET k = 2;
        INSERT INTO pages VALUES (1, 'a', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) g));
        UPDATE pages SET title = 'b';
        SELECT 'done' AS workload",
    )?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("rowid-cdc exited with {status}"));
    }
    println!("\n-- target/demo/changes.jsonl (identities abbreviated here, full in the file)");
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let short = |k: &str| {
            v[k].as_str().map_or("-".to_string(), |h| {
                if h.len() > 40 {
                    format!("{}..({} bytes)", &h[..32], h.len() / 2)
                } else {
                    h.to_string()
                }
            })
        };
        println!(
            "{:<14} {:<8} key {:<12} old {:<44} new {:<44}",
            v["relation"].as_str().unwrap_or_default(),
            v["op"].as_str().unwrap_or_default(),
            v["key"].to_string(),
            short("old_id"),
            short("new_id"),
        );
        // The images, long values cut here (whole in the file).
        let image = |k: &str| -> String {
            match v[k].as_object() {
                None => "null".into(),
                Some(cols) => cols
                    .iter()
                    .map(|(c, x)| {
                        let t = x.to_string();
                        if t.len() > 24 {
                            format!("{c}={}..({} chars)", &t[..16], t.len())
                        } else {
                            format!("{c}={t}")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        };
        println!(
            "{:<14} old image ({}): {}\n{:<14} new image: {}\n{:<14} backfilled {} unchanged_toast {}",
            "",
            v["old_image"].as_str().unwrap_or("-"),
            image("old"),
            "",
            image("new"),
            "",
            v["backfilled"],
            v["unchanged_toast"]
        );
    }
    show(
        cluster,
        "the same identities from SQL",
        "
        SELECT encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(2::int8)), 'hex') AS key_2,
               encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(3::int8, 'final'::text)), 'hex') AS key_3_final",
    )?;
    psql(cluster, "SELECT pg_drop_replication_slot('demo_cdc')")?;
    Ok(())
}

/// `show` against another database of the cluster.
fn show_in(cluster: &Cluster, db: &str, title: &str, sql: &str) -> Result<(), String> {
    println!("\n-- {title} (database {db})\n{}", sql.trim());
    print!("{}", cluster.psql().with_db(db).show(sql)?);
    Ok(())
}

/// `rowid-cdc --sink replica:`: two tables kept in another database, equal to their sources
/// by identity through a key change, one of two identical keyless rows deleted, and an
/// update leaving a TOASTed column alone.
fn keep_a_replica(cluster: &Cluster) -> Result<(), String> {
    step("rowid-cdc --sink replica: a copy in another database, kept exactly by identity");
    let dir = root().join("target").join("demo");
    let state = dir.join("replica.state");
    let _ = std::fs::remove_file(&state);
    // Statements of their own: DROP DATABASE cannot run inside the one transaction a
    // multi-statement command is.
    psql(cluster, "DROP DATABASE IF EXISTS demo_replica")?;
    psql(cluster, "CREATE DATABASE demo_replica")?;
    show(
        cluster,
        "the source: a keyed table with a TOASTed column, and a keyless one with two identical rows",
        "
        CREATE TABLE invoices (id int8 PRIMARY KEY, note text, body text);
        ALTER TABLE invoices ALTER COLUMN body SET STORAGE EXTERNAL;
        CREATE TABLE tags (tag text, n int4);
        ALTER TABLE tags REPLICA IDENTITY FULL;
        INSERT INTO invoices SELECT g, 'before the slot',
          (SELECT string_agg(md5((g * 1000 + x)::text), '') FROM generate_series(1, 100) x)
          FROM generate_series(1, 3) g;
        INSERT INTO tags VALUES ('red', 1), ('red', 1), ('blue', 2);
        CREATE PUBLICATION demo_replica FOR TABLE invoices, tags;
        SELECT 'ready' AS source",
    )?;
    cluster
        .psql()
        .with_db("demo_replica")
        .show("CREATE EXTENSION pg_trickle_ext")?;
    let binary = root().join("target").join("debug").join("rowid-cdc");
    let (dsn, target) = (cluster.dsn("postgres"), cluster.dsn("demo_replica"));
    println!(
        "\n$ rowid-cdc --dsn '{dsn}' --slot demo_replica --publication demo_replica \\\n    \
         --create-slot --snapshot --state target/demo/replica.state --sink 'replica:{target}'"
    );
    let mut child = std::process::Command::new(&binary)
        .args(["--dsn", &dsn, "--slot", "demo_replica"])
        .args([
            "--publication",
            "demo_replica",
            "--create-slot",
            "--snapshot",
        ])
        .arg("--state")
        .arg(&state)
        .args(["--sink", &format!("replica:{target}")])
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let replica = cluster.psql().with_db("demo_replica");
    // Waits until the replica holds invoice `id` (a minute at most).
    let mut wait_for = |id: i64| -> Result<(), String> {
        let started = std::time::Instant::now();
        loop {
            let n = replica
                .run(
                    "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'public' \
                     AND tablename = 'invoices';",
                )
                .unwrap_or_default();
            if n.trim() == "1"
                && replica
                    .run(&format!(
                        "SELECT count(*) FROM public.invoices WHERE id = {id};"
                    ))
                    .unwrap_or_default()
                    .trim()
                    == "1"
            {
                return Ok(());
            }
            if started.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                return Err(format!("the replica did not reach invoice {id}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for(3)?;
    show(
        cluster,
        "changes: a key change, one of the two identical keyless rows deleted, an update leaving the TOASTed body alone (the stream does not carry it)",
        "
        UPDATE invoices SET id = 20 WHERE id = 2;
        DELETE FROM tags WHERE ctid = (SELECT ctid FROM tags WHERE tag = 'red' LIMIT 1);
        UPDATE invoices SET note = 'changed after the slot' WHERE id = 1;
        INSERT INTO invoices VALUES (99, 'last', 'short');
        SELECT 'done' AS workload",
    )?;
    wait_for(99)?;
    let _ = child.kill();
    let _ = child.wait();
    let invoices = "SELECT id, note, md5(body) AS body_md5, length(body) AS body_len FROM invoices ORDER BY id";
    let tags = "SELECT tag, n FROM tags ORDER BY tag, n";
    show(cluster, "the source: invoices", invoices)?;
    show_in(
        cluster,
        "demo_replica",
        "the replica: invoices, the same rows (the body kept through the update that did not send it)",
        &invoices.replace("FROM invoices", "FROM public.invoices"),
    )?;
    show(cluster, "the source: tags", tags)?;
    show_in(
        cluster,
        "demo_replica",
        "the replica: tags, one red row left of two",
        &tags.replace("FROM tags", "FROM public.tags"),
    )?;
    show_in(
        cluster,
        "demo_replica",
        "each stored identity is encode_row_id_v2 of its row; the index the registry planned for each",
        "
        SELECT 'invoices' AS storage, count(*) FILTER (WHERE __pgt_row_id
                 = pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id))) AS identities_equal,
               count(*) AS rows FROM public.invoices
        UNION ALL
        SELECT 'tags', count(*) FILTER (WHERE __pgt_row_id
                 = pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(tag, n))), count(*) FROM public.tags;
        SELECT c.relname AS storage, pg_get_indexdef(i.indexrelid) AS index,
               i.indisreplident AS replica_identity
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relnamespace = 'public'::regnamespace ORDER BY 1",
    )?;
    psql(cluster, "SELECT pg_drop_replication_slot('demo_replica')")?;
    Ok(())
}

/// `rowid-cdc --sink nats:URL` into a JetStream stream of a `nats-server` the demo starts, and
/// the messages read back (the crate's `nats_read` example).
fn publish_to_nats(cluster: &Cluster) -> Result<(), String> {
    step("rowid-cdc --sink nats: the changes in a NATS JetStream stream, exactly once");
    exec(cargo().args(["build", "-p", "rowid-cdc", "--example", "nats_read"]))?;
    let dir = root().join("target").join("demo");
    let store = dir.join("nats");
    let state = dir.join("nats.state");
    let _ = std::fs::remove_dir_all(&store);
    let _ = std::fs::remove_file(&state);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    println!("\n$ nats-server -js -a 127.0.0.1 -p {port} -sd target/demo/nats");
    let mut server = std::process::Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(&store)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("nats-server: {e}"))?;
    let result = publish_and_read(cluster, &url, &state);
    let _ = server.kill();
    let _ = server.wait();
    result
}

fn publish_and_read(cluster: &Cluster, url: &str, state: &std::path::Path) -> Result<(), String> {
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(url.trim_start_matches("nats://")).is_err() {
        if started.elapsed() > std::time::Duration::from_secs(30) {
            return Err("nats-server did not listen".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    show(
        cluster,
        "a table to publish",
        "
        CREATE TABLE shipments (id int8 PRIMARY KEY, item text);
        CREATE PUBLICATION demo_nats FOR TABLE shipments;
        SELECT 'ready' AS source",
    )?;
    let binary = root().join("target").join("debug").join("rowid-cdc");
    let dsn = cluster.dsn("postgres");
    println!(
        "\n$ rowid-cdc --dsn '{dsn}' --slot demo_nats --publication demo_nats --create-slot \\\n    \
         --state target/demo/nats.state --sink nats:{url} --stop-after 3"
    );
    let mut child = std::process::Command::new(&binary)
        .args([
            "--dsn",
            &dsn,
            "--slot",
            "demo_nats",
            "--publication",
            "demo_nats",
        ])
        .args(["--create-slot", "--stop-after", "3", "--state"])
        .arg(state)
        .args(["--sink", &format!("nats:{url}")])
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    while !psql(
        cluster,
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'demo_nats' AND active",
    )?
    .contains(" 1\n")
    {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            return Err("rowid-cdc did not start streaming into NATS".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    show(
        cluster,
        "three changes: an insert, a key change, a delete",
        "
        INSERT INTO shipments VALUES (1, 'tea');
        UPDATE shipments SET id = 2 WHERE id = 1;
        DELETE FROM shipments WHERE id = 2;
        SELECT 'done' AS workload",
    )?;
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("rowid-cdc into NATS ended with {status}"));
    }
    println!(
        "\n$ cargo run -p rowid-cdc --example nats_read -- {url} ROWID_CDC rowid_cdc\n\
         (each change on subject rowid_cdc.<database>.<schema>.<table>; the headers carry the \
         message id, relation, operation, commit LSN and identity)"
    );
    exec(
        std::process::Command::new(
            root()
                .join("target")
                .join("debug")
                .join("examples")
                .join("nats_read"),
        )
        .args([url, "ROWID_CDC", "rowid_cdc"]),
    )?;
    psql(cluster, "SELECT pg_drop_replication_slot('demo_nats')")?;
    Ok(())
}

/// Whether a state file (spec/state-file.md, format 5) says a chunked snapshot has started
/// and every table's chunks were delivered: `chunks.cursors` not empty, each `done`.
fn chunks_delivered(state: &str) -> bool {
    let parsed: serde_json::Value = serde_json::from_str(state).unwrap_or_default();
    match parsed["chunks"]["cursors"].as_array() {
        Some(cursors) if !cursors.is_empty() => cursors.iter().all(|c| c["done"] == true),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::chunks_delivered;

    /// The shapes of a state file's chunk record the demo waits on (format 5; format 4 had a
    /// bare list, which the demo looked for until the demo failed on format 5).
    #[test]
    fn the_demo_waits_until_every_chunk_is_delivered() {
        let done = r#"{"format":5,"chunks":{"cursors":[{"relid":1,"done":true},{"relid":2,"done":true}],"delivered":null}}"#;
        let open = r#"{"format":5,"chunks":{"cursors":[{"relid":1,"done":true},{"relid":2,"done":false}],"delivered":null}}"#;
        assert!(chunks_delivered(done));
        assert!(!chunks_delivered(open));
        assert!(!chunks_delivered(r#"{"format":5,"chunks":{"cursors":[]}}"#));
        assert!(!chunks_delivered(""));
    }
}
