// The proposal's final oracle on stream tables (issue 34): a seeded random workload over
// keyed sources (int8, text, uuid, a composite and an enum key) and a keyless source with
// duplicates and NULLs, against stream tables covering every operator in every mode that
// takes it. After every statement (IMMEDIATE tables, maintained by the statements
// themselves) and every step (a few statements, then FULL and DIFFERENTIAL tables refreshed)
// each stream table must equal its query run fresh and the identities derived by hand with
// encode_row_id_v2 (spec §3), as multisets; stream tables over stream tables too (issue
// 35: three levels, in mixed modes). Included into lib.rs's `tests` module after
// tests_stream.rs (whose helpers it uses).

/// The oracle's sources.
fn oracle_sources() {
    Spi::run(
        "CREATE TYPE o_mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE o_int (id int8 PRIMARY KEY, g int4, v numeric, t text);
         CREATE TABLE o_text (code text PRIMARY KEY, g int4);
         CREATE TABLE o_uuid (u uuid PRIMARY KEY, v int4);
         CREATE TABLE o_comp (a int4, b text, v int4, PRIMARY KEY (a, b));
         CREATE TABLE o_enum (e o_mood PRIMARY KEY, v int4);
         CREATE TABLE o_bag (x int4, y text);",
    )
    .expect("oracle sources");
}

/// (stream table, query, its rows with the identities derived by hand, the modes it is kept
/// in: `F` FULL, `D` DIFFERENTIAL, `I` IMMEDIATE).
const ORACLE: &[(&str, &str, &str, &str)] = &[
    (
        "o_cd",
        "SELECT g, count(DISTINCT t) AS nt, count(DISTINCT v) AS nv, sum(DISTINCT g) AS sg,
                count(*) AS n
         FROM o_int GROUP BY g",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, count(DISTINCT t),
                count(DISTINCT v), sum(DISTINCT g), count(*)
         FROM o_int GROUP BY g",
        "FDI",
    ),
    (
        "o_cds",
        "SELECT count(DISTINCT y) AS ny, count(DISTINCT x) AS nx, count(*) AS n FROM o_bag",
        "SELECT pgtrickle.encode_row_id_v2('SYNTHETIC', ROW('scalar_aggregate_singleton'::text)),
                count(DISTINCT y), count(DISTINCT x), count(*) FROM o_bag",
        "FDI",
    ),
    (
        "o_cdj",
        "SELECT t.code, count(DISTINCT i.v) AS nv FROM o_int i JOIN o_text t ON t.g = i.g
         GROUP BY t.code",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(t.code)), t.code, count(DISTINCT i.v)
         FROM o_int i JOIN o_text t ON t.g = i.g GROUP BY t.code",
        "FD",
    ),
    (
        "o_f",
        "SELECT id, v FROM o_int WHERE v > 10",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), id, v FROM o_int WHERE v > 10",
        "FDI",
    ),
    (
        "o_g",
        "SELECT g, count(*) AS n, count(v) AS nv, sum(v) AS s, min(v) AS lo, max(v) AS hi,
                avg(v) AS a, bool_or(t IS NULL) AS any_null
         FROM o_int GROUP BY g HAVING count(*) > 0",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, count(*), count(v), sum(v),
                min(v), max(v), avg(v), bool_or(t IS NULL)
         FROM o_int GROUP BY g",
        "FDI",
    ),
    (
        "o_ga",
        "SELECT g, count(*) AS n, count(v) AS nv, sum(v) AS s, min(v) AS lo, max(v) AS hi,
                avg(v) AS a, bool_or(t IS NULL) AS any_null, bool_and(v > 1) AS all_big,
                sum(id) AS si, avg(id) AS ai
         FROM o_int GROUP BY g",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, count(*), count(v), sum(v),
                min(v), max(v), avg(v), bool_or(t IS NULL), bool_and(v > 1), sum(id), avg(id)
         FROM o_int GROUP BY g",
        "FDI",
    ),
    (
        "o_gi",
        "SELECT t, sum(id) AS s, sum(g) AS sg, avg(g) AS a, avg(id) AS ai, count(g) AS ng,
                min(id) AS lo, max(g) AS hi
         FROM o_int GROUP BY t",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(t)), t, sum(id), sum(g), avg(g),
                avg(id), count(g), min(id), max(g)
         FROM o_int GROUP BY t",
        "FD",
    ),
    (
        "o_s",
        "SELECT count(*) AS n, sum(v) AS s, avg(id) AS a, max(v) AS hi FROM o_int",
        "SELECT pgtrickle.encode_row_id_v2('SYNTHETIC', ROW('scalar_aggregate_singleton'::text)),
                count(*), sum(v), avg(id), max(v) FROM o_int",
        "FDI",
    ),
    (
        "o_j",
        "SELECT i.id, t.code FROM o_int i JOIN o_text t ON t.g = i.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id)),
                i.id, t.code
         FROM o_int i JOIN o_text t ON t.g = i.g",
        "FD",
    ),
    (
        "o_b",
        "SELECT x, y FROM o_bag",
        "SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y)), x, y FROM o_bag",
        "FDI",
    ),
    (
        "o_bj",
        "SELECT b.x, count(*) AS n, sum(i.v) AS s FROM o_bag b JOIN o_int i ON i.g = b.x
         GROUP BY b.x",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(b.x)), b.x, count(*), sum(i.v)
         FROM o_bag b JOIN o_int i ON i.g = b.x GROUP BY b.x",
        "FDI",
    ),
    (
        "o_u",
        "SELECT u, v FROM o_uuid",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(u)), u, v FROM o_uuid",
        "FDI",
    ),
    (
        "o_c",
        "SELECT a, b, v FROM o_comp WHERE v IS NOT NULL",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(a, b)), a, b, v FROM o_comp
         WHERE v IS NOT NULL",
        "FD",
    ),
    (
        "o_e",
        "SELECT e, v FROM o_enum",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(e)), e, v FROM o_enum",
        "FDI",
    ),
    (
        "o_d",
        "SELECT DISTINCT g FROM o_int",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g
         FROM (SELECT DISTINCT g FROM o_int) d",
        "FDI",
    ),
    (
        "o_un",
        "SELECT g FROM o_int UNION SELECT g FROM o_text",
        "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(g)), g
         FROM (SELECT g FROM o_int UNION SELECT g FROM o_text) s",
        "FDI",
    ),
    (
        "o_ex",
        "SELECT x FROM o_bag EXCEPT ALL SELECT g FROM o_int",
        "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(x)), x
         FROM (SELECT x FROM o_bag EXCEPT ALL SELECT g FROM o_int) s",
        "FDI",
    ),
    (
        "o_ua",
        "SELECT g FROM o_int UNION ALL SELECT x FROM o_bag",
        "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(1,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id))::pgtrickle.row_id)), g
         FROM o_int
         UNION ALL
         SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(2,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y))::pgtrickle.row_id)), x
         FROM o_bag",
        "FDI",
    ),
    (
        "o_cte",
        "WITH big AS (SELECT id, g FROM o_int WHERE v > 5)
         SELECT b.id, t.code FROM big b JOIN o_text t ON t.g = b.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id)),
                i.id, t.code
         FROM o_int i JOIN o_text t ON t.g = i.g WHERE i.v > 5",
        "FD",
    ),
    (
        "o_subg",
        "SELECT s.g, count(*) AS n FROM (SELECT g FROM o_int WHERE v > 1) AS s GROUP BY s.g",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, count(*) FROM o_int
         WHERE v > 1 GROUP BY g",
        "FDI",
    ),
    (
        "o_sub",
        "SELECT s.g, s.n FROM (SELECT g, count(*) AS n FROM o_int GROUP BY g) AS s",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, count(*) FROM o_int
         GROUP BY g",
        "FDI",
    ),
    (
        "o_subj",
        "WITH tot AS (SELECT g, sum(v) AS s, count(*) AS n FROM o_int GROUP BY g)
         SELECT t.code, tot.s, tot.n FROM o_text t JOIN tot ON tot.g = t.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(q.g))::pgtrickle.row_id)),
                t.code, q.s, q.n
         FROM o_text t JOIN (SELECT g, sum(v) AS s, count(*) AS n FROM o_int GROUP BY g) q
           ON q.g = t.g",
        "FD",
    ),
    (
        "o_self",
        "SELECT i.id, s.n FROM o_int i
           JOIN (SELECT g, count(*) AS n, max(v) AS hi FROM o_int GROUP BY g) AS s
           ON s.g = i.g AND s.hi > i.v",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(s.g))::pgtrickle.row_id)),
                i.id, s.n
         FROM o_int i JOIN (SELECT g, count(*) AS n, max(v) AS hi FROM o_int GROUP BY g) s
           ON s.g = i.g AND s.hi > i.v",
        "FDI",
    ),
    (
        "o_subd",
        "SELECT b.x, b.y, d.g FROM o_bag b JOIN (SELECT DISTINCT g FROM o_int) AS d
           ON d.g = b.x",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(b.x, b.y))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(d.g))::pgtrickle.row_id)),
                b.x, b.y, d.g
         FROM o_bag b JOIN (SELECT DISTINCT g FROM o_int) d ON d.g = b.x",
        "FDI",
    ),
    (
        "o_subh",
        "SELECT s.x, s.n, s.m FROM (SELECT x, count(*) AS n, max(y) AS m FROM o_bag GROUP BY x
           HAVING count(*) > 1) AS s WHERE s.n < 5",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(x)), x, count(*), max(y)
         FROM o_bag GROUP BY x HAVING count(*) > 1 AND count(*) < 5",
        "FDI",
    ),
    (
        "o_suba",
        "SELECT count(*) AS groups, sum(s.n) AS total
         FROM (SELECT g, count(*) AS n FROM o_int GROUP BY g) AS s",
        "SELECT pgtrickle.encode_row_id_v2('SYNTHETIC',
                  ROW('scalar_aggregate_singleton'::text)), count(*), sum(n)
         FROM (SELECT g, count(*) AS n FROM o_int GROUP BY g) s",
        "FDI",
    ),
    (
        "o_subu",
        "SELECT u.g FROM (SELECT g FROM o_int UNION SELECT g FROM o_text) AS u WHERE u.g > 1",
        "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(g)), g
         FROM (SELECT g FROM o_int UNION SELECT g FROM o_text) s WHERE g > 1",
        "FDI",
    ),
    (
        "o_nest",
        "WITH f AS (SELECT id, g, v FROM o_int WHERE v > 1),
              a AS (SELECT f.g, min(f.v) AS lo, count(*) AS n FROM f GROUP BY f.g)
         SELECT a.g, a.lo, a.n FROM a",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, min(v), count(*)
         FROM o_int WHERE v > 1 GROUP BY g",
        "FDI",
    ),
    (
        "o_hist",
        "WITH per AS (SELECT g, count(*) AS n FROM o_int GROUP BY g),
              hist AS (SELECT p.n, count(*) AS groups FROM per p GROUP BY p.n)
         SELECT h.n, h.groups FROM hist h",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(n)), n, count(*)
         FROM (SELECT g, count(*) AS n FROM o_int GROUP BY g) p GROUP BY n",
        "FDI",
    ),
    (
        "o_mins",
        "WITH lo AS (SELECT g, min(v) AS m FROM o_int GROUP BY g),
              d AS (SELECT DISTINCT l.m FROM lo l)
         SELECT d.m FROM d",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(m)), m
         FROM (SELECT DISTINCT m FROM (SELECT min(v) AS m FROM o_int GROUP BY g) l) d",
        "FD",
    ),
    (
        "o_uagg",
        "SELECT s.g, s.n FROM (SELECT g, count(*) AS n FROM o_int GROUP BY g) AS s
         UNION ALL SELECT b.x, 1::int8 FROM o_bag b",
        "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(1,
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g))::pgtrickle.row_id)),
                g, count(*)
         FROM o_int GROUP BY g
         UNION ALL
         SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW(2,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y))::pgtrickle.row_id)),
                x, 1::int8
         FROM o_bag",
        "FDI",
    ),
    // Outer joins (issue 35): the side a row has no match on is a NULL child of its JOIN_KEY
    // (spec §2). DIFFERENTIAL and IMMEDIATE where the outer join of two tables is the level's
    // only FROM item (an IMMEDIATE one needs a bounded key), FULL elsewhere. Whether a
    // side is there is derived here from its key, or from a marker column (a keyless row of
    // NULLs, matched, is a child, not NULL), never from the implementation's `ctid`.
    (
        "o_ojl",
        "SELECT i.id, i.g, t.code FROM o_int i LEFT JOIN o_text t ON t.g = i.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  (CASE WHEN t.code IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))
                   END)::pgtrickle.row_id)),
                i.id, i.g, t.code
         FROM o_int i LEFT JOIN o_text t ON t.g = i.g",
        "FD",
    ),
    (
        "o_ojb",
        "SELECT i.id, b.y FROM o_int i LEFT JOIN o_bag b ON b.x IS NOT DISTINCT FROM i.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  (CASE WHEN b.here
                        THEN pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(b.x, b.y))
                   END)::pgtrickle.row_id)),
                i.id, b.y
         FROM o_int i LEFT JOIN (SELECT x, y, true AS here FROM o_bag) b
           ON b.x IS NOT DISTINCT FROM i.g",
        "FDI",
    ),
    (
        "o_ojr",
        "SELECT i.id, b.x, b.y FROM o_int i RIGHT JOIN o_bag b ON b.x = i.g AND i.v > 5",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  (CASE WHEN i.id IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))
                   END)::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(b.x, b.y))::pgtrickle.row_id)),
                i.id, b.x, b.y
         FROM o_bag b LEFT JOIN o_int i ON b.x = i.g AND i.v > 5",
        "FDI",
    ),
    (
        "o_ojf",
        "SELECT i.id, t.code, g FROM o_int i FULL JOIN o_text t USING (g) WHERE i.id IS NULL OR i.id < 50",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  (CASE WHEN i.id IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))
                   END)::pgtrickle.row_id,
                  (CASE WHEN t.code IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))
                   END)::pgtrickle.row_id)),
                i.id, t.code, coalesce(i.g, t.g)
         FROM o_int i FULL JOIN o_text t ON t.g = i.g WHERE i.id IS NULL OR i.id < 50",
        "FD",
    ),
    (
        "o_ojk",
        "SELECT i.id, i.g, u.u FROM o_int i LEFT JOIN o_uuid u ON u.v = i.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  (CASE WHEN u.u IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(u.u))
                   END)::pgtrickle.row_id)),
                i.id, i.g, u.u
         FROM o_int i LEFT JOIN o_uuid u ON u.v = i.g",
        "FDI",
    ),
    (
        "o_ojfe",
        "SELECT i.id, e.e, e.v FROM o_int i FULL JOIN o_enum e ON e.v = i.id",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  (CASE WHEN i.id IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))
                   END)::pgtrickle.row_id,
                  (CASE WHEN e.e IS NOT NULL
                        THEN pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(e.e))
                   END)::pgtrickle.row_id)),
                i.id, e.e, e.v
         FROM o_int i FULL JOIN o_enum e ON e.v = i.id",
        "FDI",
    ),
    (
        "o_oja",
        "SELECT t.code, count(i.id) AS n, sum(i.v) AS s
         FROM o_text t LEFT JOIN (o_int i JOIN o_uuid u ON u.v = i.id) ON i.g = t.g
         GROUP BY t.code",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(t.code)), t.code, count(i.id),
                sum(i.v)
         FROM o_text t LEFT JOIN (o_int i JOIN o_uuid u ON u.v = i.id) ON i.g = t.g
         GROUP BY t.code",
        "F",
    ),
    // Window functions (issue 35): WINDOW_KEY of the partition's values and the input row's
    // identity as a child (spec §2); DIFFERENTIAL and IMMEDIATE recompute the partitions a
    // change touches. Only orders without ties where the function depends on the order of
    // peers (row_number), so that the query has one result.
    (
        "o_w",
        "SELECT id, g, row_number() OVER (PARTITION BY g ORDER BY id) AS rn,
                rank() OVER (PARTITION BY g ORDER BY v) AS rk,
                dense_rank() OVER (PARTITION BY g ORDER BY v DESC) AS dr,
                count(*) OVER (PARTITION BY g) AS n,
                sum(v) OVER (PARTITION BY g ORDER BY id) AS rs
         FROM o_int WHERE id <> 13",
        "SELECT pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW(g,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id))::pgtrickle.row_id)),
                id, g, row_number() OVER (PARTITION BY g ORDER BY id),
                rank() OVER (PARTITION BY g ORDER BY v),
                dense_rank() OVER (PARTITION BY g ORDER BY v DESC),
                count(*) OVER (PARTITION BY g), sum(v) OVER (PARTITION BY g ORDER BY id)
         FROM o_int WHERE id <> 13",
        "FDI",
    ),
    (
        "o_wb",
        "SELECT x, y, count(*) OVER (PARTITION BY x) AS n,
                dense_rank() OVER (PARTITION BY x ORDER BY y NULLS FIRST) AS dr
         FROM o_bag",
        "SELECT pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW(x,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y))::pgtrickle.row_id)),
                x, y, count(*) OVER (PARTITION BY x),
                dense_rank() OVER (PARTITION BY x ORDER BY y NULLS FIRST)
         FROM o_bag",
        "FD",
    ),
    (
        "o_wj",
        "SELECT i.id, t.code, rank() OVER (ORDER BY t.code) AS rk, count(*) OVER () AS n
         FROM o_int i JOIN o_text t ON t.g = i.g",
        "SELECT pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW(
                  pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                    pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                    pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id
                  ))::pgtrickle.row_id)),
                i.id, t.code, rank() OVER (ORDER BY t.code), count(*) OVER ()
         FROM o_int i JOIN o_text t ON t.g = i.g",
        "FD",
    ),
    (
        "o_wtop",
        "SELECT s.g, s.id FROM (SELECT g, id, row_number() OVER (PARTITION BY g ORDER BY id DESC) AS rn
                               FROM o_int) s WHERE s.rn <= 2",
        "SELECT pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW(s.g,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(s.id))::pgtrickle.row_id)), s.g, s.id
         FROM (SELECT g, id, row_number() OVER (PARTITION BY g ORDER BY id DESC) AS rn
               FROM o_int) s WHERE s.rn <= 2",
        "F",
    ),
    // Set-returning functions in FROM (issue 35), LATERAL over the rows before them: each row
    // a JOIN_KEY of the source row and the function's row, whose identity is KEYLESS_ROW of
    // its columns (unique with the ordinality; without it equal elements of one call share
    // it). Linear: every mode.
    (
        "o_fo",
        "SELECT i.id, e.x, e.n
         FROM o_int i, unnest(ARRAY[i.g, i.g + 1, i.g]) WITH ORDINALITY AS e(x, n)",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(e.x, e.n))::pgtrickle.row_id)),
                i.id, e.x, e.n
         FROM o_int i, unnest(ARRAY[i.g, i.g + 1, i.g]) WITH ORDINALITY AS e(x, n)",
        "FDI",
    ),
    (
        "o_fm",
        "SELECT i.id, e.x FROM o_int i, unnest(ARRAY[i.g, i.g, i.g + 1]) AS e(x)",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(e.x))::pgtrickle.row_id)),
                i.id, e.x
         FROM o_int i, unnest(ARRAY[i.g, i.g, i.g + 1]) AS e(x)",
        "FDI",
    ),
    (
        "o_fj",
        "SELECT b.x, v FROM o_bag b
           CROSS JOIN LATERAL jsonb_array_elements(jsonb_build_array(b.x, b.y, b.x)) AS v",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(b.x, b.y))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(v))::pgtrickle.row_id)),
                b.x, v
         FROM o_bag b CROSS JOIN LATERAL jsonb_array_elements(jsonb_build_array(b.x, b.y, b.x)) AS v",
        "FDI",
    ),
    // Subqueries in WHERE (issue 35): a semi-join or anti-join keeps each row of its FROM once
    // or not at all, with its identity. A change to a table a subquery reads recomputes the
    // level (a NOT IN meeting a NULL drops every row); any other change is linear.
    (
        "o_sx",
        "SELECT id, v FROM o_int i
         WHERE EXISTS (SELECT FROM o_text t WHERE t.g = i.g AND t.code <> 'c3') AND id < 50",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), id, v FROM o_int i
         WHERE EXISTS (SELECT FROM o_text t WHERE t.g = i.g AND t.code <> 'c3') AND id < 50",
        "FDI",
    ),
    (
        "o_sni",
        "SELECT x, y FROM o_bag WHERE x NOT IN (SELECT g FROM o_int WHERE id < 20)",
        "SELECT pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(x, y)), x, y FROM o_bag
         WHERE x NOT IN (SELECT g FROM o_int WHERE id < 20)",
        "FDI",
    ),
    (
        "o_sin",
        "SELECT i.id, t.code FROM o_int i JOIN o_text t ON t.g = i.g
         WHERE i.id IN (SELECT u.v FROM o_uuid u) OR NOT EXISTS (SELECT FROM o_bag b WHERE b.x = i.g)",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id)),
                i.id, t.code
         FROM o_int i JOIN o_text t ON t.g = i.g
         WHERE i.id IN (SELECT u.v FROM o_uuid u) OR NOT EXISTS (SELECT FROM o_bag b WHERE b.x = i.g)",
        "FD",
    ),
    (
        "o_ssc",
        "SELECT id, g FROM o_int WHERE g >= (SELECT avg(x) FROM o_bag)",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), id, g FROM o_int
         WHERE g >= (SELECT avg(x) FROM o_bag)",
        "FDI",
    ),
    (
        "o_sxa",
        "SELECT g, count(*) AS n FROM o_int i
         WHERE NOT EXISTS (SELECT FROM o_uuid u WHERE u.v = i.id) GROUP BY g",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(g)), g, count(*) FROM o_int i
         WHERE NOT EXISTS (SELECT FROM o_uuid u WHERE u.v = i.id) GROUP BY g",
        "F",
    ),
    // Stream tables over stream tables (issue 35): `{up}` is the upstream kept in another
    // mode (`oracle_query`): FULL over IMMEDIATE, DIFFERENTIAL over FULL, IMMEDIATE over
    // IMMEDIATE. A join, an aggregate over it, a filter and a join over that, and an
    // aggregate over the keyless copy: three levels, identities passed through.
    (
        "o_jg",
        "SELECT i.id, i.g, i.v, u.u FROM o_int i JOIN o_uuid u ON u.v = i.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i.id))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(u.u))::pgtrickle.row_id)),
                i.id, i.g, i.v, u.u
         FROM o_int i JOIN o_uuid u ON u.v = i.g",
        "FDI",
    ),
    (
        "o_lg",
        "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM o_jg_{up} GROUP BY g",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(i.g)), i.g, count(*), sum(i.v),
                max(i.v)
         FROM o_int i JOIN o_uuid u ON u.v = i.g GROUP BY i.g",
        "FDI",
    ),
    (
        "o_lf",
        "SELECT g, s FROM o_lg_{up} WHERE n > 1",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(i.g)), i.g, sum(i.v)
         FROM o_int i JOIN o_uuid u ON u.v = i.g GROUP BY i.g HAVING count(*) > 1",
        "FDI",
    ),
    (
        "o_lj",
        "SELECT l.g, l.n, t.code FROM o_lg_{up} l JOIN o_text t ON t.g = l.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(l.g))::pgtrickle.row_id,
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id)),
                l.g, l.n, t.code
         FROM (SELECT i.g, count(*) AS n FROM o_int i JOIN o_uuid u ON u.v = i.g
               GROUP BY i.g) l JOIN o_text t ON t.g = l.g",
        "FD",
    ),
    (
        "o_lb",
        "SELECT x, count(*) AS n FROM o_b_{up} GROUP BY x",
        "SELECT pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(x)), x, count(*)
         FROM o_bag GROUP BY x",
        "FDI",
    ),
    (
        "o_ojup",
        "SELECT t.code, l.n FROM o_text t LEFT JOIN o_lg_{up} l ON l.g = t.g",
        "SELECT pgtrickle.encode_row_id_v2('JOIN_KEY', ROW(
                  pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(t.code))::pgtrickle.row_id,
                  (CASE WHEN l.here
                        THEN pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(l.g))
                   END)::pgtrickle.row_id)),
                t.code, l.n
         FROM o_text t LEFT JOIN (SELECT i.g, count(*) AS n, true AS here
                                  FROM o_int i JOIN o_uuid u ON u.v = i.g GROUP BY i.g) l
           ON l.g = t.g",
        "FD",
    ),
    (
        "o_sup",
        "SELECT id, v FROM o_int WHERE g IN (SELECT g FROM o_lg_{up} WHERE n > 1)",
        "SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), id, v FROM o_int
         WHERE g IN (SELECT i.g FROM o_int i JOIN o_uuid u ON u.v = i.g
                     GROUP BY i.g HAVING count(*) > 1)",
        "FDI",
    ),
    (
        "o_wup",
        "SELECT g, s, rank() OVER (ORDER BY s DESC NULLS LAST) AS r FROM o_lg_{up}",
        "SELECT pgtrickle.encode_row_id_v2('WINDOW_KEY', ROW(
                  pgtrickle.encode_row_id_v2('GROUP_KEY', ROW(i.g))::pgtrickle.row_id)),
                i.g, sum(i.v), rank() OVER (ORDER BY sum(i.v) DESC NULLS LAST)
         FROM o_int i JOIN o_uuid u ON u.v = i.g GROUP BY i.g",
        "FDI",
    ),
];

/// A small deterministic generator (xorshift64*), so that a failing step is reproduced by
/// its seed and step number.
struct OracleRng(u64);

impl OracleRng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A group (0 to 5, or NULL one time in eight).
    fn group(&mut self) -> String {
        match self.below(8) {
            0 => "NULL".into(),
            _ => self.below(6).to_string(),
        }
    }

    /// A numeric with one to four decimals (equal values spelt differently), `NaN`, or NULL.
    fn value(&mut self) -> String {
        match self.below(12) {
            0 => "NULL".into(),
            1 => "2.0".into(),
            2 => "2.00".into(),
            3 => "1.5000".into(),
            4 if self.below(3) == 0 => "'NaN'".into(),
            _ => format!("{}.{}", self.below(20), self.below(100)),
        }
    }

    /// One statement of the workload.
    fn statement(&mut self) -> String {
        let id = self.below(60);
        let to = self.below(60);
        let (g, v) = (self.group(), self.value());
        let code = format!("'c{}'", self.below(12));
        let uuid = format!("'00000000-0000-0000-0000-{:012}'", self.below(15));
        let mood = ["'sad'", "'ok'", "'happy'"][self.below(3) as usize];
        let x = self.group();
        let y = ["'a'", "'b'", "NULL"][self.below(3) as usize];
        let b = ["'a'", "'b'", "'n'"][self.below(3) as usize];
        match self.below(24) {
            0..=3 => format!(
                "INSERT INTO o_int VALUES ({id}, {g}, {v}, {y}) ON CONFLICT DO NOTHING"
            ),
            4 => format!("UPDATE o_int SET id = {to} WHERE id = {id} AND NOT EXISTS (SELECT FROM o_int WHERE id = {to})"),
            5 | 6 => format!("UPDATE o_int SET g = {g}, v = {v} WHERE id % 7 = {}", id % 7),
            7 => format!("DELETE FROM o_int WHERE id % 11 = {}", id % 11),
            8 => format!("INSERT INTO o_text VALUES ({code}, {g}) ON CONFLICT DO NOTHING"),
            9 => format!(
                "UPDATE o_text SET code = code || 'x' WHERE code = {code} \
                 AND NOT EXISTS (SELECT FROM o_text t WHERE t.code = {code} || 'x')"
            ),
            10 => format!("UPDATE o_text SET g = {g} WHERE code = {code}"),
            11 => format!("DELETE FROM o_text WHERE code = {code}"),
            12 => format!("INSERT INTO o_uuid VALUES ({uuid}, {id}) ON CONFLICT DO NOTHING"),
            13 => format!("DELETE FROM o_uuid WHERE u = {uuid}"),
            14 => format!(
                "INSERT INTO o_comp VALUES ({}, {b}, {}) ON CONFLICT DO NOTHING",
                id % 4,
                if id.is_multiple_of(5) { "NULL".into() } else { id.to_string() }
            ),
            15 => format!(
                "UPDATE o_comp SET a = a + 10 WHERE a = {} AND NOT EXISTS \
                 (SELECT FROM o_comp c WHERE c.a = o_comp.a + 10 AND c.b = o_comp.b)",
                id % 4
            ),
            16 => format!("INSERT INTO o_enum VALUES ({mood}, {id}) ON CONFLICT (e) DO UPDATE SET v = excluded.v"),
            17 => format!("DELETE FROM o_enum WHERE e = {mood}"),
            18 | 19 => format!("INSERT INTO o_bag VALUES ({x}, {y}), ({x}, {y})"),
            20 => format!(
                "DELETE FROM o_bag WHERE ctid = (SELECT ctid FROM o_bag WHERE x IS NOT DISTINCT FROM {x} LIMIT 1)"
            ),
            21 => format!(
                "UPDATE o_bag SET y = {y} WHERE ctid = (SELECT ctid FROM o_bag WHERE x IS NOT DISTINCT FROM {x} LIMIT 1)"
            ),
            22 => format!("UPDATE o_int SET v = v * 1.0 WHERE id % 5 = {}", id % 5),
            _ if self.below(4) == 0 => "TRUNCATE o_bag".into(),
            _ => format!("INSERT INTO o_bag VALUES ({x}, {y})"),
        }
    }
}

/// Columns whose value the query gives in one representation only (a `numeric` sum's scale
/// is the largest scale summed, an average's follows from it; `min` and `max` are left out:
/// of `2.0` and `2.00` the query returns whichever it meets first), compared as text after
/// every step: equality alone would take `2.00` for `2.000`.
const EXACT: &[(&str, &str)] = &[
    ("o_g", "g, n, nv, s, a"),
    ("o_ga", "g, n, nv, s, a, si, ai"),
    ("o_gi", "t, s, sg, a, ai, ng, lo, hi"),
    ("o_s", "n, s, a"),
    ("o_bj", "x, n, s"),
    ("o_lg", "g, n, s"),
    ("o_w", "id, g, rn, rk, dr, n, rs"),
];

/// `query` of the oracle's stream table kept in `mode`, its upstream `{up}` named: FULL reads
/// the IMMEDIATE upstream, DIFFERENTIAL the FULL one, IMMEDIATE the IMMEDIATE one (checked
/// after every statement, it reads an upstream kept by that statement).
fn oracle_query(query: &str, mode: char) -> String {
    let up = match mode {
        'D' => "f",
        _ => "i",
    };
    query.replace("{up}", up)
}

/// Every stream table of the oracle kept in one of `wanted` (`F`, `D`, `I`) equals its query
/// and the identities derived by hand.
fn oracle_check(step: usize, statement: &str, wanted: &str) {
    for (name, query, expected, modes) in ORACLE {
        for mode in modes.chars().filter(|m| wanted.contains(*m)) {
            let table = format!("{name}_{}", mode.to_ascii_lowercase());
            let query = &oracle_query(query, mode);
            if let Some((_, exact)) = EXACT.iter().find(|e| e.0 == *name) {
                let spelt = stream_difference(
                    &format!("SELECT ROW({exact})::text FROM {table}"),
                    &format!("SELECT ROW({exact})::text FROM ({query}) AS q"),
                );
                assert_eq!(
                    spelt, 0,
                    "step {step} ({statement}): {table} spells {spelt} values of ({exact}) \
                     other than its query"
                );
            }
            let columns = stream_columns(&table);
            let vs_query = stream_difference(&format!("SELECT {columns} FROM {table}"), query);
            let vs_ids = stream_difference(
                &format!("SELECT __pgt_row_id, {columns} FROM {table}"),
                expected,
            );
            assert!(
                vs_query == 0 && vs_ids == 0,
                "step {step} ({statement}): {table} differs from its query in {vs_query} rows \
                 and from the derived identities in {vs_ids}"
            );
        }
    }
}

#[pg_test]
fn stream_oracle_random_workload_in_every_mode() {
    oracle_sources();
    for (name, query, _, modes) in ORACLE {
        for mode in modes.chars() {
            let full = match mode {
                'F' => "FULL",
                'D' => "DIFFERENTIAL",
                _ => "IMMEDIATE",
            };
            Spi::run(&format!(
                "SELECT pgtrickle.create_stream_table('{name}_{}', $q${}$q$,
                   refresh_mode => '{full}')",
                mode.to_ascii_lowercase(),
                oracle_query(query, mode)
            ))
            .unwrap_or_else(|e| panic!("{name} {full}: {e}"));
        }
    }
    let refreshed: Vec<String> = ORACLE
        .iter()
        .flat_map(|(name, _, _, modes)| {
            modes
                .chars()
                .filter(|m| *m != 'I')
                .map(move |m| format!("{name}_{}", m.to_ascii_lowercase()))
        })
        .collect();
    let mut rng = OracleRng(0x5EED_0034);
    let mut refreshes = 0;
    for step in 0..150 {
        let statements: Vec<String> = (0..1 + rng.below(3)).map(|_| rng.statement()).collect();
        for s in &statements {
            Spi::run(s).unwrap_or_else(|e| panic!("step {step}: {s}: {e}"));
            // IMMEDIATE: kept by the statement itself.
            oracle_check(step, s, "I");
        }
        for table in &refreshed {
            Spi::run(&format!("SELECT pgtrickle.refresh_stream_table('{table}')"))
                .unwrap_or_else(|e| panic!("step {step}: refresh {table}: {e}"));
            refreshes += 1;
        }
        oracle_check(step, &statements.join("; "), "FD");
    }
    assert!(refreshes >= 3000, "{refreshes} refreshes");
    oracle_stored_identities();
}

/// What a stream table's identity schema message says of its rows (format 8's `stored`,
/// from the catalog), and what a replica keeping them relies on, holds of every row of every
/// stream table of the oracle: each identity is of the catalog's domain (wire-format.md: the
/// byte after the version), a unique one's identities are distinct, and a multiset's rows
/// with equal identities are equal rows (by their types' equality: a keyless identity is
/// the same for `2.0` and `2.00`, which a replica tells apart by their representation).
fn oracle_stored_identities() {
    let tables: Vec<(String, String, bool)> = Spi::connect(|client| {
        client
            .select(
                "SELECT pgt_name, identity_domain, identity_unique
                 FROM pgtrickle.pgt_stream_tables ORDER BY 1",
                None,
                &[],
            )?
            .map(|row| {
                Ok((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?.unwrap_or_default(),
                    row.get::<bool>(3)?.unwrap_or(false),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .expect("stream tables");
    assert!(tables.len() >= 40, "{} stream tables", tables.len());
    // wire-format.md §3: the domains' bytes.
    let code = |domain: &str| match domain {
        "SCAN_KEY" => 1,
        "KEYLESS_ROW" => 2,
        "GROUP_KEY" => 3,
        "JOIN_KEY" => 4,
        "SET_KEY" => 5,
        "WINDOW_KEY" => 6,
        "SYNTHETIC" => 7,
        other => panic!("domain {other}"),
    };
    let mut rows = 0;
    for (name, domain, unique) in &tables {
        let facts = Spi::get_one::<String>(&format!(
            "SELECT count(*) || ':' || count(*) FILTER (WHERE get_byte(__pgt_row_id, 1) <> {})
               || ':' || count(DISTINCT __pgt_row_id) || ':' || count(DISTINCT t)
             FROM {name} t",
            code(domain)
        ))
        .expect("facts")
        .unwrap_or_default();
        let n: Vec<i64> = facts.split(':').map(|v| v.parse().unwrap_or(-1)).collect();
        rows += n[0];
        assert_eq!(n[1], 0, "{name}: {} identities not of {domain}", n[1]);
        if *unique {
            assert_eq!(n[2], n[0], "{name}: unique, yet {} rows, {} identities", n[0], n[2]);
        } else {
            assert_eq!(
                n[2], n[3],
                "{name}: a multiset whose {} identities name {} distinct rows",
                n[2], n[3]
            );
        }
    }
    assert!(rows > 0, "the oracle's stream tables hold no rows");
}
