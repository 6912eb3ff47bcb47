-- Physical comparison of storage layouts (RESULTS.md §3), run by
-- `cargo xtask bench` with psql variables :rows and :phase (load | sizes | apply; apply
-- also takes :layout and :delta).
--
-- A source of :rows int8-keyed rows feeds five storage tables keyed by the row identity:
--   v1_bigint        V1: BIGINT xxh3 of ::text, unique B-tree
--   v2_direct        V2 SCAN_KEY(int8) bytea, unique B-tree on the full id
--   v2_probe_expr    V2, B-tree expression index on pgtrickle.row_probe_v1(row_id)
--   v2_probe_column  V2, stored generated probe column + B-tree
--   v2_hash          V2, hash index on the full id
-- Deltas of 10^4 keys are applied through each layout's index (nested loop forced):
-- "ordered" is a contiguous key range, "random" a pseudo-random sample.

\set ON_ERROR_STOP 1
\pset format unaligned
\pset fieldsep '|'
\pset tuples_only on
SET max_parallel_workers_per_gather = 0;
SET jit = off;
\if :{?layout}
\else
\set layout none
\endif
\if :{?delta}
\else
\set delta none
\endif
SELECT :'phase' = 'load' AS is_load, :'phase' = 'sizes' AS is_sizes,
       :'phase' = 'apply' AS is_apply \gset

-- The apply statement of a layout and delta.
CREATE OR REPLACE FUNCTION pg_temp.apply_sql(layout text, delta text) RETURNS text
LANGUAGE sql AS $$
  SELECT format('UPDATE st_%s st SET v = d.v + 1 FROM d%s_%s d WHERE ', layout,
                CASE WHEN layout = 'v1_bigint' THEN 'v1' ELSE 'v2' END, delta)
      || CASE layout
           WHEN 'v2_probe_expr' THEN 'pgtrickle.row_probe_v1(st.row_id) = pgtrickle.row_probe_v1(d.row_id) AND st.row_id = d.row_id'
           WHEN 'v2_probe_column' THEN 'st.probe = pgtrickle.row_probe_v1(d.row_id) AND st.row_id = d.row_id'
           ELSE 'st.row_id = d.row_id'
         END
$$;

-- Runs q in a subtransaction that is rolled back; returns its EXPLAIN (ANALYZE, BUFFERS).
CREATE OR REPLACE FUNCTION pg_temp.explain_rolled_back(q text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE j json;
BEGIN
  BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO j;
    RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = j::text;
  EXCEPTION WHEN raise_exception THEN
    RETURN SQLERRM::json;
  END;
END $$;

\if :is_load
CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;
DROP TABLE IF EXISTS src, st_v1_bigint, st_v2_direct, st_v2_probe_expr, st_v2_probe_column,
  st_v2_hash, cdc_v1, cdc_v2, dv1_ordered, dv1_random, dv2_ordered, dv2_random, phys CASCADE;
CREATE TABLE src AS
  SELECT g::int8 AS id, (g % 1000)::int4 AS v, md5(g::text) AS pad
  FROM generate_series(1, :rows) g;

CREATE TABLE st_v1_bigint (row_id int8 NOT NULL, v int4, pad text);
CREATE UNIQUE INDEX st_v1_bigint_idx ON st_v1_bigint (row_id);
CREATE TABLE st_v2_direct (row_id bytea NOT NULL, v int4, pad text);
CREATE UNIQUE INDEX st_v2_direct_idx ON st_v2_direct (row_id);
CREATE TABLE st_v2_probe_expr (row_id bytea NOT NULL, v int4, pad text);
CREATE INDEX st_v2_probe_expr_idx ON st_v2_probe_expr (pgtrickle.row_probe_v1(row_id));
CREATE TABLE st_v2_probe_column (row_id bytea NOT NULL, v int4, pad text,
  probe bytea GENERATED ALWAYS AS (pgtrickle.row_probe_v1(row_id)) STORED);
CREATE INDEX st_v2_probe_column_idx ON st_v2_probe_column (probe);
CREATE TABLE st_v2_hash (row_id bytea NOT NULL, v int4, pad text);
CREATE INDEX st_v2_hash_idx ON st_v2_hash USING hash (row_id);

CREATE TEMP TABLE phys (layout text PRIMARY KEY, ord int, wal_load numeric, wal_update numeric,
  cdc_bytes numeric, cached_ordered float8, cached_random float8);

CREATE OR REPLACE FUNCTION pg_temp.wal_of(q text) RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE l0 pg_lsn;
BEGIN
  l0 := pg_current_wal_insert_lsn();
  EXECUTE q;
  RETURN pg_current_wal_insert_lsn() - l0;
END $$;

-- Initial load into the indexed tables.
INSERT INTO phys (layout, ord, wal_load) VALUES
 ('v1_bigint', 1, pg_temp.wal_of($$INSERT INTO st_v1_bigint SELECT pgtrickle.bench_v1_hash(ARRAY[id::text]), v, pad FROM src$$)),
 ('v2_direct', 2, pg_temp.wal_of($$INSERT INTO st_v2_direct SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), v, pad FROM src$$)),
 ('v2_probe_expr', 3, pg_temp.wal_of($$INSERT INTO st_v2_probe_expr SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), v, pad FROM src$$)),
 ('v2_probe_column', 4, pg_temp.wal_of($$INSERT INTO st_v2_probe_column SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), v, pad FROM src$$)),
 ('v2_hash', 5, pg_temp.wal_of($$INSERT INTO st_v2_hash SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), v, pad FROM src$$));
VACUUM ANALYZE st_v1_bigint, st_v2_direct, st_v2_probe_expr, st_v2_probe_column, st_v2_hash;

-- Deltas: 10^4 keys, contiguous or sampled, in each layout's identity form.
CREATE TABLE dv1_ordered AS SELECT pgtrickle.bench_v1_hash(ARRAY[id::text]) AS row_id, v FROM src WHERE id > :rows / 2 ORDER BY id LIMIT 10000;
CREATE TABLE dv2_ordered AS SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)) AS row_id, v FROM src WHERE id > :rows / 2 ORDER BY id LIMIT 10000;
CREATE TABLE dv1_random AS SELECT pgtrickle.bench_v1_hash(ARRAY[id::text]) AS row_id, v FROM src ORDER BY hashint8(id) LIMIT 10000;
CREATE TABLE dv2_random AS SELECT pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)) AS row_id, v FROM src ORDER BY hashint8(id) LIMIT 10000;
ANALYZE dv1_ordered, dv2_ordered, dv1_random, dv2_random;

-- A 10% update (every tenth key) through each layout, and the CDC buffer it leaves.
CREATE TABLE cdc_v1 (lsn int8, op "char", row_id int8, v int4);
CREATE TABLE cdc_v2 (lsn int8, op "char", row_id bytea, v int4);
INSERT INTO cdc_v1 SELECT 0, 'U', pgtrickle.bench_v1_hash(ARRAY[id::text]), v FROM src WHERE id % 10 = 0;
INSERT INTO cdc_v2 SELECT 0, 'U', pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), v FROM src WHERE id % 10 = 0;
UPDATE phys SET cdc_bytes = pg_total_relation_size(CASE WHEN layout = 'v1_bigint' THEN 'cdc_v1' ELSE 'cdc_v2' END::regclass);

SET enable_hashjoin = off;
SET enable_mergejoin = off;
CREATE TEMP TABLE delta10_v1 AS SELECT row_id, v FROM cdc_v1;
CREATE TEMP TABLE delta10_v2 AS SELECT row_id, v FROM cdc_v2;
ANALYZE delta10_v1, delta10_v2;
UPDATE phys SET wal_update = pg_temp.wal_of(
  replace(replace(pg_temp.apply_sql(layout, 'x'), 'dv1_x', 'delta10_v1'), 'dv2_x', 'delta10_v2'));
-- Compact again before the applies: otherwise the free space the 10% update left on every
-- page (after vacuum) scatters each apply's new tuple versions over the whole table through
-- the free space map, the same for every layout, and hides the index effect being measured.
VACUUM FULL st_v1_bigint, st_v2_direct, st_v2_probe_expr, st_v2_probe_column, st_v2_hash;
ANALYZE st_v1_bigint, st_v2_direct, st_v2_probe_expr, st_v2_probe_column, st_v2_hash;

-- Cached applies: one warm-up, then the median of three, each rolled back.
CREATE OR REPLACE FUNCTION pg_temp.cached_ms(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t float8[] := '{}'; j json;
BEGIN
  PERFORM pg_temp.explain_rolled_back(q);
  FOR i IN 1 .. 3 LOOP
    j := pg_temp.explain_rolled_back(q);
    t := t || (j -> 0 ->> 'Execution Time')::float8;
  END LOOP;
  RETURN (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(t) x);
END $$;
UPDATE phys SET cached_ordered = pg_temp.cached_ms(pg_temp.apply_sql(layout, 'ordered')),
                cached_random = pg_temp.cached_ms(pg_temp.apply_sql(layout, 'random'));

SELECT 'physical', layout,
       round(pg_relation_size(format('st_%s', layout)::regclass) / 1048576.0, 1),
       round(pg_relation_size(format('st_%s_idx', layout)::regclass) / 1048576.0, 1),
       round(wal_load / 1048576.0, 1), round(wal_update / 1048576.0, 1),
       round(cdc_bytes / 1048576.0, 2), round(cached_ordered::numeric, 1),
       round(cached_random::numeric, 1)
FROM phys ORDER BY ord;
\endif

\if :is_sizes
SELECT 'smallest_index_kb', min(pg_relation_size(c.oid)) / 1024
FROM pg_class c WHERE c.relname IN ('st_v1_bigint_idx', 'st_v2_direct_idx',
  'st_v2_probe_expr_idx', 'st_v2_probe_column_idx', 'st_v2_hash_idx');
\endif

\if :is_apply
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SELECT 'apply', :'layout', :'delta',
       (j -> 0 -> 'Plan' ->> 'Shared Read Blocks'),
       (j -> 0 -> 'Plan' ->> 'Shared Hit Blocks'),
       round((j -> 0 ->> 'Execution Time')::numeric, 1)
FROM (SELECT pg_temp.explain_rolled_back(pg_temp.apply_sql(:'layout', :'delta')) AS j) e;
\endif
