-- Per-row cost inside PostgreSQL (RESULTS.md §2), run by `cargo xtask bench` with psql
-- variables :rows (10^6; 10^4 with --quick) and :rounds.
--
-- Every case is `SELECT count(<expr>) FROM <table>` over the same rows in one session;
-- rounds alternate the case order, and each case reports its median. `scan` (count of a
-- column) is the executor floor of its table; "net" subtracts it, so ratios compare the
-- expressions' own cost. The 4 KiB text cases read a table of :rows / 10 rows (4 GB of text
-- would measure the disk, not the encoder); every figure is per row of its own table. int8send/uuid_send return bytea like the encoder (the floor for a bytea result),
-- hashint8 is a cheap hash, v1 is pg_trickle's first scheme over ::text casts.

\set ON_ERROR_STOP 1
SET max_parallel_workers_per_gather = 0;
SET jit = off;
CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;

DROP TABLE IF EXISTS bench_src;
CREATE TABLE bench_src AS
SELECT g::int4 AS i4,
       g::int8 AS i8,
       (g::int8 * 7919 % 1000003) AS j8,
       md5(g::text)::uuid AS u,
       left(md5(g::text), 16) AS t16,
       repeat(md5(g::text), 8) AS t256,
       (g / 8.0)::numeric AS n_small,
       (g::numeric * 1000000000000000000000 + 123456789) AS n_30,
       (-g / 9.0)::numeric(20, 4) AS n_neg,
       make_interval(months => g % 24, days => g % 30, secs => g % 86400) AS iv
FROM generate_series(1, :rows) g;
VACUUM ANALYZE bench_src;
DROP TABLE IF EXISTS bench_src4k;
CREATE TABLE bench_src4k (i8 int8, t4k text);
ALTER TABLE bench_src4k ALTER COLUMN t4k SET STORAGE PLAIN;
INSERT INTO bench_src4k SELECT g, repeat(md5(g::text), 128) FROM generate_series(1, :rows / 10) g;
VACUUM ANALYZE bench_src4k;

CREATE TEMP TABLE bench_cases (ord int, name text, expr text, tbl text DEFAULT 'bench_src');
INSERT INTO bench_cases (ord, name, expr) VALUES
 (1,  'scan (floor of the executor)', 'i8'),
 (2,  'int8send(int8)',               'int8send(i8)'),
 (3,  'hashint8(int8)',               'hashint8(i8)'),
 (4,  'v1 int8',                      'pgtrickle.bench_v1_hash(ARRAY[i8::text])'),
 (5,  'v2 SCAN_KEY(int8)',            $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i8))$$),
 (6,  'v2 SCAN_KEY(int4)',            $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i4))$$),
 (7,  'uuid_send(uuid)',              'uuid_send(u)'),
 (8,  'v1 uuid',                      'pgtrickle.bench_v1_hash(ARRAY[u::text])'),
 (9,  'v2 SCAN_KEY(uuid)',            $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(u))$$),
 (10, 'v1 (int8, int8)',              'pgtrickle.bench_v1_hash(ARRAY[i8::text, j8::text])'),
 (11, 'v2 SCAN_KEY(int8, int8)',      $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i8, j8))$$),
 (12, 'v1 (int8, text 16 B)',         'pgtrickle.bench_v1_hash(ARRAY[i8::text, t16])'),
 (13, 'v2 (int8, text 16 B)',         $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i8, t16))$$),
 (14, 'v1 (int8, text 256 B)',        'pgtrickle.bench_v1_hash(ARRAY[i8::text, t256])'),
 (15, 'v2 (int8, text 256 B)',        $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i8, t256))$$),
 (18, 'v1 numeric small',             'pgtrickle.bench_v1_hash(ARRAY[n_small::text])'),
 (19, 'v2 numeric small',             $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(n_small))$$),
 (20, 'v1 numeric 30 digits',         'pgtrickle.bench_v1_hash(ARRAY[n_30::text])'),
 (21, 'v2 numeric 30 digits',         $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(n_30))$$),
 (22, 'v1 numeric negative',          'pgtrickle.bench_v1_hash(ARRAY[n_neg::text])'),
 (23, 'v2 numeric negative',          $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(n_neg))$$),
 (24, 'v1 interval',                  'pgtrickle.bench_v1_hash(ARRAY[iv::text])'),
 (25, 'v2 interval',                  $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(iv))$$),
 (26, 'v1 keyless row (10 columns)',  'pgtrickle.bench_v1_hash(ARRAY[i4::text, i8::text, j8::text, u::text, t16, t256, n_small::text, n_30::text, n_neg::text, iv::text])'),
 (27, 'v2 KEYLESS_ROW (10 columns)',  $$pgtrickle.encode_row_id_v2('KEYLESS_ROW', s)$$),
 -- The argument form: the same identities without building and deforming a ROW.
 (29, 'v2 fields SCAN_KEY(int8)',     $$pgtrickle.encode_row_id_v2_fields('SCAN_KEY', i8)$$),
 (30, 'v2 fields SCAN_KEY(uuid)',     $$pgtrickle.encode_row_id_v2_fields('SCAN_KEY', u)$$),
 (31, 'v2 fields SCAN_KEY(int8, int8)', $$pgtrickle.encode_row_id_v2_fields('SCAN_KEY', i8, j8)$$),
 (32, 'v2 fields (int8, text 16 B)',  $$pgtrickle.encode_row_id_v2_fields('SCAN_KEY', i8, t16)$$);
INSERT INTO bench_cases VALUES
 (28, 'scan, 4 KiB table',            'i8', 'bench_src4k'),
 (16, 'v1 (int8, text 4 KiB)',        'pgtrickle.bench_v1_hash(ARRAY[i8::text, t4k])', 'bench_src4k'),
 (17, 'v2 (int8, text 4 KiB)',        $$pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(i8, t4k))$$, 'bench_src4k');

CREATE OR REPLACE FUNCTION pg_temp.bench_ms(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  EXECUTE q;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

CREATE TEMP TABLE bench_runs (name text, round int, ms float8);
-- One warm-up pass, then :rounds measured rounds in alternating order.
SELECT pg_temp.bench_ms(format('SELECT count(%s) FROM %I s', expr, tbl)) FROM bench_cases;
SELECT set_config('bench.rounds', :'rounds', false);
DO $$
DECLARE r int; c record;
BEGIN
  FOR r IN 1 .. current_setting('bench.rounds')::int LOOP
    FOR c IN SELECT * FROM bench_cases ORDER BY CASE WHEN r % 2 = 0 THEN -ord ELSE ord END LOOP
      INSERT INTO bench_runs
      SELECT c.name, r, pg_temp.bench_ms(format('SELECT count(%s) FROM %I s', c.expr, c.tbl));
    END LOOP;
  END LOOP;
END $$;

\pset format unaligned
\pset fieldsep '|'
\pset tuples_only on
WITH med AS (
  SELECT c.ord, c.name, c.tbl, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS ms
  FROM bench_runs r JOIN bench_cases c USING (name) GROUP BY c.ord, c.name, c.tbl
), n AS (
  SELECT 'bench_src' AS tbl, count(*)::float8 AS n FROM bench_src
  UNION ALL SELECT 'bench_src4k', count(*)::float8 FROM bench_src4k
), floor AS (SELECT tbl, ms FROM med WHERE ord IN (1, 28))
SELECT 'per_row', m.name,
       round((m.ms * 1e6 / n.n)::numeric, 1) AS ns_per_row,
       round(((m.ms - floor.ms) * 1e6 / n.n)::numeric, 1) AS net_ns_per_row
FROM med m JOIN n USING (tbl) JOIN floor USING (tbl) ORDER BY m.ord;
