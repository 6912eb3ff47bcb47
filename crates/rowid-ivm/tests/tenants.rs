//! Stream tables on a database shared by tenants who do not trust each other
//! (spec/stream-tables.md §10, issue 47): every attack of the issue, tried by non-superuser
//! roles on a cluster of its own started with `shared_preload_libraries = pg_trickle_ext`
//! (the scheduler runs as the bootstrap superuser) and `RUST_BACKTRACE=1` in the server's
//! environment.
//!
//! The roles: `alice` owns stream tables, `bob` is a member of `alice` (acting as her),
//! `carol` and `dave` are given rows or own sources, `mallory` has what a tenant of a shared database has (CREATE on `public` and on
//! the schema `shared`, INSERT where an owner granted it) and tries to run code as `alice`,
//! to become superuser, to read what she was not given, or to stop refreshes.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rowid_testkit::cluster::Cluster;
use rowid_testkit::psql::Psql;
use rowid_testkit::session::Session;

/// One cluster at a time: the scheduler's timings hold on a machine that runs one.
static SERIAL: Mutex<()> = Mutex::new(());

/// A cluster of the test's own with the roles and the extension.
struct Server {
    _cluster: Cluster,
    /// As `postgres` (the bootstrap superuser).
    db: Psql,
}

impl Server {
    fn start(name: &str, port_offset: u16) -> Server {
        let bindir = rowid_testkit::cluster::server_bindir();
        let base =
            std::env::temp_dir().join(format!("rowid-ivm-tenants-{name}-{}", std::process::id()));
        let port = 60_000 + port_offset * 50 + (std::process::id() % 50) as u16;
        let cluster = Cluster::start(&bindir, &base, port).unwrap();
        cluster
            .restart_with_env(
                "-c shared_preload_libraries=pg_trickle_ext \
                 -c pg_trickle.scheduler_interval_ms=100",
                &[("RUST_BACKTRACE", "1")],
            )
            .unwrap();
        let db = cluster.psql();
        db.run(
            "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN IN ROLE alice;
             CREATE ROLE carol LOGIN; CREATE ROLE dave LOGIN; CREATE ROLE mallory LOGIN;
             GRANT CREATE ON SCHEMA public TO alice, carol, mallory;
             CREATE SCHEMA shared; GRANT USAGE, CREATE ON SCHEMA shared TO alice, mallory;
             CREATE EXTENSION pg_trickle_ext;",
        )
        .unwrap();
        Server {
            _cluster: cluster,
            db,
        }
    }

    fn who(&self, role: &str) -> Psql {
        self.db.with_user(role)
    }
}

fn one(db: &Psql, sql: &str) -> String {
    db.run(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .trim()
        .to_string()
}

/// Waits until `sql` gives `expected`, at most `limit`.
fn wait_until(db: &Psql, sql: &str, expected: &str, limit: Duration, what: &str) {
    let started = Instant::now();
    loop {
        let got = db.run(sql).unwrap_or_else(|e| panic!("{what}: {e}"));
        if got.trim() == expected {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {sql} gives {:?}, not {expected:?}",
            got.trim()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rows `alice`'s stream table `st` holds that her own query does not give, or the
/// reverse (0: equal), compared as `alice` over `columns`.
fn differs(alice: &Psql, st: &str, columns: &str, query: &str) -> i64 {
    alice.multiset_difference(&format!("SELECT {columns} FROM {st}"), query)
}

/// Requirement 1 (critical): a rebuild after a source DDL runs as the stream table's owner,
/// whoever refreshes (here the scheduler, as the bootstrap superuser), and keeps its owner
/// and grants; so redefining her function afterwards gives `alice` nothing she did not have.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn a_scheduled_rebuild_runs_as_the_owner() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("rebuild", 0);
    let (db, alice) = (&server.db, server.who("alice"));
    alice
        .run(
            "CREATE TABLE a_src (id int PRIMARY KEY, v int);
             INSERT INTO a_src SELECT g, g FROM generate_series(1, 10) g;
             CREATE FUNCTION f(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 + 1';
             SELECT pgtrickle.create_stream_table('a_st', 'SELECT id, f(v) AS w FROM a_src',
               schedule => '1s', refresh_mode => 'FULL');
             GRANT SELECT ON a_st TO carol;",
        )
        .unwrap();
    let before = one(db, "SELECT 'a_st'::regclass::oid");
    alice
        .run("ALTER TABLE a_src ADD COLUMN extra int;")
        .unwrap();
    // The scheduler rebuilds it: a new storage.
    wait_until(
        db,
        &format!("SELECT 'a_st'::regclass::oid <> {before}"),
        "t",
        Duration::from_secs(30),
        "the rebuild after ALTER TABLE",
    );
    assert_eq!(
        one(
            db,
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'a_st'::regclass"
        ),
        "alice",
        "the rebuild changed the owner"
    );
    assert_eq!(
        one(
            db,
            "SELECT has_column_privilege('carol', 'a_st', 'w', 'SELECT')"
        ),
        "t",
        "the rebuild dropped carol's grant"
    );
    // Her function made to run ALTER ROLE: scheduled refreshes run it as her, never as the
    // scheduler's role.
    alice
        .run(
            "CREATE OR REPLACE FUNCTION f(int) RETURNS int VOLATILE LANGUAGE plpgsql AS
               $$ BEGIN EXECUTE 'ALTER ROLE alice SUPERUSER'; RETURN $1; END $$;",
        )
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        one(db, "SELECT rolsuper FROM pg_roles WHERE rolname = 'alice'"),
        "f",
        "alice became superuser through a scheduled refresh"
    );
}

/// Requirement 1: a member of the owner's role who refreshes after a DDL (the rebuild), or
/// alters the stream table, leaves it owned by the owner with every grant.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn a_members_rebuild_keeps_the_owner_and_the_grants() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("member", 1);
    let (db, alice, bob) = (&server.db, server.who("alice"), server.who("bob"));
    alice
        .run(
            "CREATE TABLE m_src (id int PRIMARY KEY, v int);
             INSERT INTO m_src SELECT g, g FROM generate_series(1, 10) g;
             SELECT pgtrickle.create_stream_table('m_st', 'SELECT id, v FROM m_src',
               refresh_mode => 'DIFFERENTIAL');
             GRANT SELECT ON m_st TO carol;
             COMMENT ON TABLE m_st IS 'kept';
             ALTER TABLE m_src ADD COLUMN extra int;",
        )
        .unwrap();
    let kept = |when: &str| {
        assert_eq!(
            one(
                db,
                "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'public.m_st'::regclass"
            ),
            "alice",
            "{when}: the owner changed"
        );
        assert_eq!(
            one(
                db,
                "SELECT has_column_privilege('carol', 'public.m_st', 'v', 'SELECT')"
            ),
            "t",
            "{when}: carol's grant is gone"
        );
        assert_eq!(
            one(
                db,
                "SELECT obj_description('public.m_st'::regclass, 'pg_class')"
            ),
            "kept",
            "{when}: the comment is gone"
        );
    };
    bob.run("SELECT pgtrickle.refresh_stream_table('public.m_st');")
        .unwrap();
    kept("a member's refresh after a DDL");
    bob.run(
        "SELECT pgtrickle.alter_stream_table('public.m_st',
           query => 'SELECT id, v, extra FROM public.m_src');",
    )
    .unwrap();
    kept("a member's alter_stream_table");
}

/// Requirement 2: another role's exact overload of the function the query calls
/// (`shared.g(integer)` beside `alice`'s `shared.g(anyelement)`) is never what a stored
/// statement calls: not in IMMEDIATE maintenance inside his own INSERT, not in the owner's
/// refresh. The function the stream table calls cannot be dropped while it does.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn an_overload_created_later_never_captures_a_call() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("overload", 2);
    let (db, alice, mallory) = (&server.db, server.who("alice"), server.who("mallory"));
    alice
        .run(
            "CREATE FUNCTION shared.g(x anyelement) RETURNS text IMMUTABLE LANGUAGE sql
               AS $$ SELECT 'ok ' || x::text $$;
             CREATE TABLE a_secret (s text); INSERT INTO a_secret VALUES ('private');
             CREATE TABLE a_src (id int PRIMARY KEY, v int);
             INSERT INTO a_src VALUES (1, 1);
             GRANT INSERT ON a_src TO mallory;
             SELECT pgtrickle.create_stream_table('g_imm', 'SELECT id, shared.g(a_src.v) AS t FROM a_src',
               refresh_mode => 'IMMEDIATE');
             SELECT pgtrickle.create_stream_table('g_full', 'SELECT id, shared.g(a_src.v) AS t FROM a_src',
               refresh_mode => 'FULL');
             SELECT pgtrickle.create_stream_table('g_diff', 'SELECT id, shared.g(a_src.v) AS t FROM a_src',
               refresh_mode => 'DIFFERENTIAL');
             CREATE FUNCTION shared.twice(x anyelement, y anyelement) RETURNS text IMMUTABLE
               LANGUAGE sql AS $$ SELECT x::text || y::text $$;
             CREATE OPERATOR shared.=== (FUNCTION = shared.twice, LEFTARG = anyelement,
               RIGHTARG = anyelement);
             SELECT pgtrickle.create_stream_table('o_imm',
               'SELECT id, a_src.v OPERATOR(shared.===) a_src.v AS t FROM a_src',
               refresh_mode => 'IMMEDIATE');",
        )
        .unwrap();
    mallory
        .run(
            "CREATE FUNCTION shared.g(x integer) RETURNS text VOLATILE LANGUAGE plpgsql AS $$
               BEGIN
                 EXECUTE 'GRANT SELECT ON public.a_secret TO mallory';
                 RETURN 'HIJACKED';
               END $$;",
        )
        .unwrap();
    // His INSERT: the maintenance inside it must not call his function as alice: it is
    // refused, naming what the statement now resolves.
    let inserted = mallory.run("INSERT INTO public.a_src VALUES (2, 2);");
    assert!(
        inserted
            .as_ref()
            .is_err_and(|e| e.contains("shared.g(integer)")),
        "the maintenance inside mallory's INSERT: {inserted:?}"
    );
    // The same with an operator: an exact-typed shared.=== beside alice's polymorphic one.
    alice
        .run("SELECT pgtrickle.drop_stream_table('g_imm');")
        .unwrap();
    mallory
        .run(
            "CREATE FUNCTION shared.twice_int(x integer, y integer) RETURNS text VOLATILE
               LANGUAGE plpgsql AS $$
               BEGIN
                 EXECUTE 'GRANT SELECT ON public.a_secret TO mallory';
                 RETURN 'HIJACKED';
               END $$;
             CREATE OPERATOR shared.=== (FUNCTION = shared.twice_int, LEFTARG = integer,
               RIGHTARG = integer);",
        )
        .unwrap();
    let inserted = mallory.run("INSERT INTO public.a_src VALUES (3, 3);");
    assert!(
        inserted.as_ref().is_err_and(|e| e.contains("===")),
        "the maintenance inside mallory's INSERT, an operator: {inserted:?}"
    );
    for st in ["g_full", "g_diff"] {
        let _ = alice.run(&format!("SELECT pgtrickle.refresh_stream_table('{st}');"));
    }
    assert_eq!(
        one(
            db,
            "SELECT has_table_privilege('mallory', 'public.a_secret', 'SELECT')"
        ),
        "f",
        "mallory's overload ran as alice"
    );
    for st in ["g_full", "g_diff", "o_imm"] {
        assert_eq!(
            one(
                &alice,
                &format!("SELECT count(*) FROM {st} WHERE t = 'HIJACKED'")
            ),
            "0",
            "{st} stores what mallory's overload returned"
        );
    }
    // The function a stream table calls is a dependency, as for a view.
    let dropped = alice.run("DROP FUNCTION shared.g(anyelement);");
    assert!(
        dropped.as_ref().is_err_and(|e| e.contains("depend")),
        "a function stream tables call was dropped: {dropped:?}"
    );
    // Replaced by its owner (the overload gone): the next refresh rebuilds the stream table
    // with the new body, never keeps rows of the old one.
    mallory.run("DROP FUNCTION shared.g(integer);").unwrap();
    alice
        .run(
            "CREATE OR REPLACE FUNCTION shared.g(x anyelement) RETURNS text IMMUTABLE
               LANGUAGE sql AS $$ SELECT 'new ' || x::text $$;
             SELECT pgtrickle.refresh_stream_table('g_full');",
        )
        .unwrap();
    assert_eq!(
        differs(
            &alice,
            "g_full",
            "id, t",
            "SELECT id, shared.g(v) FROM a_src"
        ),
        0,
        "g_full after its function was replaced"
    );
    assert_eq!(one(&alice, "SELECT min(t) FROM g_full"), "new 1");
}

/// Requirement 3: IMMEDIATE maintenance runs inside the writer's statement, but nothing of
/// the writer's session changes what it reads or runs: a temporary view named like the
/// table the owner's function reads (calling the writer's function) and a temporary table of
/// that name.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn the_writers_temporary_objects_are_invisible_to_immediate_maintenance() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("temp", 3);
    let (db, alice, mallory) = (&server.db, server.who("alice"), server.who("mallory"));
    alice
        .run(
            "CREATE TABLE rates (k int PRIMARY KEY, r int); INSERT INTO rates VALUES (1, 100);
             CREATE FUNCTION rate(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql
               SET search_path = public
               AS $$ BEGIN RETURN x * (SELECT r FROM rates WHERE k = 1); END $$;
             CREATE TABLE t_src (id int PRIMARY KEY, v int);
             GRANT INSERT ON t_src TO mallory;
             SELECT pgtrickle.create_stream_table('t_st', 'SELECT id, rate(v) AS amount FROM t_src',
               refresh_mode => 'IMMEDIATE');",
        )
        .unwrap();
    mallory
        .run(
            "CREATE TABLE spied (who text); GRANT INSERT ON spied TO PUBLIC;
             CREATE FUNCTION spy() RETURNS int LANGUAGE plpgsql AS
               $$ BEGIN INSERT INTO public.spied VALUES (current_user); RETURN -1; END $$;",
        )
        .unwrap();
    // The view variant: his function would run as alice.
    let _ = mallory.run(
        "CREATE TEMP VIEW rates AS SELECT 1 AS k, public.spy() AS r;
         GRANT SELECT ON rates TO alice;
         INSERT INTO public.t_src VALUES (1, 70);",
    );
    assert_eq!(
        one(
            db,
            "SELECT count(*) FROM public.spied WHERE who <> 'mallory'"
        ),
        "0",
        "the writer's temporary view ran his function as another role"
    );
    // The table variant: the stream table would store what his table says.
    let _ = mallory.run(
        "CREATE TEMP TABLE rates (k int, r int); INSERT INTO rates VALUES (1, -1);
         GRANT SELECT ON rates TO alice;
         INSERT INTO public.t_src VALUES (2, 70);",
    );
    assert_eq!(
        differs(
            &alice,
            "t_st",
            "id, amount",
            "SELECT id, rate(v) FROM t_src"
        ),
        0,
        "the stream table differs from its query after the writer's temporary table"
    );
    // A temporary function of the query's function's name: never what a stored statement
    // or the owner's function calls (PostgreSQL resolves no function in pg_temp unless
    // named so).
    let _ = mallory.run(
        "CREATE FUNCTION pg_temp.rate(x int) RETURNS int LANGUAGE plpgsql AS
           $$ BEGIN INSERT INTO public.spied VALUES (current_user); RETURN -1; END $$;
         INSERT INTO public.t_src VALUES (3, 70);",
    );
    assert_eq!(
        one(
            db,
            "SELECT count(*) FROM public.spied WHERE who <> 'mallory'"
        ),
        "0",
        "the writer's temporary function ran as another role"
    );
    assert_eq!(
        differs(
            &alice,
            "t_st",
            "id, amount",
            "SELECT id, rate(v) FROM t_src"
        ),
        0,
        "the stream table differs from its query after the writer's temporary function"
    );
}

/// Requirement 4 (proposal §11.1): the ways to give a role a stream table's rows (a table
/// grant, a schema-wide grant, default privileges) do not give it `__pgt_row_id`; a column
/// grant does.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn identities_are_private_unless_granted() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("private", 4);
    let alice = server.who("alice");
    alice
        .run(
            "CREATE TABLE people (ssn text PRIMARY KEY, city text);
             INSERT INTO people VALUES ('078-05-1120', 'Lyon');
             SELECT pgtrickle.create_stream_table('cities', 'SELECT ssn, city FROM people',
               refresh_mode => 'FULL');
             SELECT pgtrickle.create_stream_table('towns', 'SELECT city FROM people',
               refresh_mode => 'FULL');
             GRANT SELECT ON cities TO carol;
             GRANT SELECT ON ALL TABLES IN SCHEMA public TO dave;
             ALTER DEFAULT PRIVILEGES FOR ROLE alice IN SCHEMA public GRANT SELECT ON TABLES TO mallory;
             SELECT pgtrickle.create_stream_table('later', 'SELECT city FROM people',
               refresh_mode => 'FULL');",
        )
        .unwrap();
    for (role, st) in [("carol", "cities"), ("dave", "towns"), ("mallory", "later")] {
        let reader = server.who(role);
        let read = reader.run(&format!("SELECT __pgt_row_id FROM public.{st};"));
        assert!(
            read.as_ref()
                .is_err_and(|e| e.contains("permission denied")),
            "{role} reads the identities of {st}: {read:?}"
        );
        assert_eq!(
            one(&reader, &format!("SELECT city FROM public.{st}")),
            "Lyon",
            "{role} cannot read the rows of {st}"
        );
    }
    alice
        .run("GRANT SELECT (__pgt_row_id) ON cities TO carol;")
        .unwrap();
    assert_eq!(
        one(
            &server.who("carol"),
            "SELECT count(__pgt_row_id) FROM public.cities"
        ),
        "1",
        "an explicit column grant gives the identities"
    );
}

/// Requirement 5: a failed scheduled refresh records the column, type and SQLSTATE, never
/// the value, and the catalogs' rows are readable by the stream table's owner only.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn errors_and_catalog_rows_are_the_owners() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("errors", 5);
    let (db, alice, mallory) = (&server.db, server.who("alice"), server.who("mallory"));
    alice
        .run(
            "CREATE TABLE cards (id int PRIMARY KEY, card text);
             INSERT INTO cards VALUES (1, '42');
             SELECT pgtrickle.create_stream_table('card_st',
               'SELECT id, card::int8 AS n FROM cards', schedule => '1s', refresh_mode => 'FULL');
             INSERT INTO cards VALUES (2, '4111 1111 1111 1111');",
        )
        .unwrap();
    wait_until(
        &alice,
        "SELECT consecutive_failures > 0 FROM pgtrickle.pgt_stream_tables",
        "t",
        Duration::from_secs(30),
        "the failing scheduled refresh",
    );
    let recorded = one(
        db,
        "SELECT last_error || ' / ' || (SELECT string_agg(error, ' / ')
                                        FROM pgtrickle.pgt_refresh_history)
         FROM pgtrickle.pgt_stream_tables",
    );
    assert!(
        !recorded.contains("4111"),
        "a source value in the recorded error: {recorded}"
    );
    assert!(
        recorded.contains("22P02"),
        "no SQLSTATE recorded: {recorded}"
    );
    for catalog in ["pgt_stream_tables", "pgt_refresh_history"] {
        assert_eq!(
            one(
                &mallory,
                &format!("SELECT count(*) FROM pgtrickle.{catalog}")
            ),
            "0",
            "mallory reads alice's rows of {catalog}"
        );
    }
}

/// Requirement 6: every mode needs what FULL needs (SELECT on what it reads, the policies
/// applied): IMMEDIATE with TRIGGER alone is refused, a source whose row-level security
/// applies to the owner is refused by IMMEDIATE and DIFFERENTIAL (they read changed rows
/// without the policies), and the owner's `FORCE ROW LEVEL SECURITY` holds in every mode.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn every_mode_obeys_privileges_and_row_level_security() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("rls", 6);
    let alice = server.who("alice");
    server
        .who("carol")
        .run(
            "CREATE TABLE c_src (id int PRIMARY KEY, secret text);
             INSERT INTO c_src VALUES (1, 'hidden');
             GRANT TRIGGER ON c_src TO alice;
             CREATE TABLE c_rls (id int PRIMARY KEY, hidden bool);
             INSERT INTO c_rls VALUES (1, false), (2, true);
             ALTER TABLE c_rls ENABLE ROW LEVEL SECURITY;
             CREATE POLICY visible ON c_rls FOR SELECT USING (NOT hidden);
             GRANT SELECT, TRIGGER ON c_rls TO alice;",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let refused = alice.run(
        "SELECT pgtrickle.create_stream_table('c_imm', 'SELECT id, secret FROM public.c_src',
           refresh_mode => 'IMMEDIATE', initialize => false);",
    );
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("permission denied")),
        "IMMEDIATE with TRIGGER alone: {refused:?}"
    );
    for mode in ["IMMEDIATE", "DIFFERENTIAL"] {
        let refused = alice.run(&format!(
            "SELECT pgtrickle.create_stream_table('c_rls_{mode}', 'SELECT id, hidden FROM public.c_rls',
               refresh_mode => '{mode}');"
        ));
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("row-level security") && e.contains("c_rls")),
            "{mode} over a source whose policies apply to the owner: {refused:?}"
        );
    }
    alice
        .run(
            "SELECT pgtrickle.create_stream_table('c_rls_full', 'SELECT id, hidden FROM public.c_rls',
               refresh_mode => 'FULL');",
        )
        .unwrap();
    assert_eq!(
        differs(
            &alice,
            "c_rls_full",
            "id, hidden",
            "SELECT id, hidden FROM public.c_rls"
        ),
        0,
        "FULL over a source with row-level security"
    );
    // The owner's own FORCE ROW LEVEL SECURITY.
    alice
        .run(
            "CREATE TABLE f_src (id int PRIMARY KEY, hidden bool);
             INSERT INTO f_src VALUES (1, false), (2, true);
             ALTER TABLE f_src ENABLE ROW LEVEL SECURITY;
             ALTER TABLE f_src FORCE ROW LEVEL SECURITY;
             CREATE POLICY visible ON f_src USING (NOT hidden);",
        )
        .unwrap();
    for mode in ["FULL", "DIFFERENTIAL", "IMMEDIATE"] {
        let st = format!("f_{}", mode.to_lowercase());
        let created = alice.run(&format!(
            "SELECT pgtrickle.create_stream_table('{st}', 'SELECT id, hidden FROM f_src',
               refresh_mode => '{mode}');"
        ));
        match created {
            Ok(_) => assert_eq!(
                differs(&alice, &st, "id, hidden", "SELECT id, hidden FROM f_src"),
                0,
                "{mode} under the owner's FORCE ROW LEVEL SECURITY"
            ),
            Err(e) => assert!(
                e.contains("row-level security") && e.contains("f_src"),
                "{mode}: {e}"
            ),
        }
    }
}

/// Requirement 7: locks no role without rights on a stream table can take. Another role
/// holding the advisory keys the refresh and the scheduler once used delays nothing, and a
/// scheduler terminated while they are held comes back.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn no_other_role_can_stop_the_scheduler() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("locks", 7);
    let (db, alice, mallory) = (&server.db, server.who("alice"), server.who("mallory"));
    alice
        .run(
            "CREATE TABLE l_src (id int PRIMARY KEY);
             SELECT pgtrickle.create_stream_table('l_one', 'SELECT id FROM l_src',
               schedule => '1s', refresh_mode => 'FULL');
             SELECT pgtrickle.create_stream_table('l_two', 'SELECT id FROM l_src',
               schedule => '1s', refresh_mode => 'FULL');",
        )
        .unwrap();
    let st = one(db, "SELECT 'l_one'::regclass::oid");
    let dboid = one(
        db,
        "SELECT oid FROM pg_database WHERE datname = current_database()",
    );
    // The refresh's key of one stream table, held (taken between two of its refreshes).
    let mut holder = Session::open(&mallory, "mallory_locks");
    holder.run(
        db,
        &format!("BEGIN; SELECT pg_advisory_lock(7366516, {st});"),
    );
    // The scheduler terminated, and the scheduler's key of the database taken as soon as it
    // is free, before a new scheduler takes it.
    db.run(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE backend_type = 'pg_trickle scheduler';",
    )
    .unwrap();
    holder.run(
        db,
        &format!(
            "DO $$ BEGIN
               FOR i IN 1..2000 LOOP
                 EXIT WHEN pg_try_advisory_lock(7366517, {dboid});
                 PERFORM pg_sleep(0.005);
               END LOOP;
             END $$;"
        ),
    );
    alice.run("INSERT INTO l_src VALUES (1);").unwrap();
    for st in ["l_one", "l_two"] {
        wait_until(
            &alice,
            &format!("SELECT count(*) FROM {st}"),
            "1",
            Duration::from_secs(30),
            &format!("{st} refreshed while another role holds the old lock keys"),
        );
    }
    holder.finish();
}

/// Requirement 8: with `RUST_BACKTRACE` in the server's environment, an error of the
/// extension reaches the client with its message and SQLSTATE only.
#[test]
#[ignore = "needs PostgreSQL binaries with the extension on PATH: run through `cargo xtask test`"]
fn no_backtrace_reaches_a_client() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start("backtrace", 8);
    let mallory = server.who("mallory");
    for sql in [
        "SELECT pgtrickle.refresh_stream_table('no_such_table');",
        "SELECT pgtrickle.create_stream_table('x', 'SELECT 1 FROM no_such_table');",
        "SELECT pgtrickle.create_stream_table('x', 'SELECT now() AS t', refresh_mode => 'IMMEDIATE');",
    ] {
        // psql prints the message, DETAIL, HINT and CONTEXT: pgrx appended a backtrace to
        // DETAIL.
        let err = mallory.run(sql).expect_err(sql);
        assert!(
            !err.contains(".rs:") && !err.to_lowercase().contains("backtrace"),
            "{sql}: {err}"
        );
        assert!(err.contains("ERROR:"), "{sql}: {err}");
    }
}
