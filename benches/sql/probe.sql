-- The probe prefix length P (RESULTS.md §4; spec/probe.md), run by `cargo xtask bench` with
-- psql variable :rows (identities per data set).
--
-- Four data sets of identities:
--   short          SCAN_KEY(int8): 17 bytes, shorter than every P (the probe is the id)
--   ordered_wide   SCAN_KEY(text) of ~230 bytes whose distinguishing digits come early
--   random_wide    SCAN_KEY(text) of 256 random hex characters
--   common_prefix  KEYLESS_ROW of a 200-byte shared prefix, then the distinguishing part
-- For each P, a B-tree expression index on the probe; 1000 lookups of a contiguous run of
-- the generation order (the delta shape of an ordered key), each matched by the probe and
-- rechecked on the full identity (nested loop forced), median of three runs.

\set ON_ERROR_STOP 1
\pset format unaligned
\pset fieldsep '|'
\pset tuples_only on
SET max_parallel_workers_per_gather = 0;
SET jit = off;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;

DROP TABLE IF EXISTS probe_sets;
CREATE TABLE probe_sets AS
SELECT 'short' AS set, g, pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(g::int8)) AS row_id
FROM generate_series(1, :rows) g
UNION ALL
SELECT 'ordered_wide', g,
       pgtrickle.encode_row_id_v2('SCAN_KEY', ROW('customer/' || lpad(g::text, 10, '0') || '/' || repeat('x', 200)))
FROM generate_series(1, :rows) g
UNION ALL
SELECT 'random_wide', g, pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(repeat(md5(g::text), 8)))
FROM generate_series(1, :rows) g
UNION ALL
SELECT 'common_prefix', g,
       pgtrickle.encode_row_id_v2('KEYLESS_ROW', ROW(repeat('tenant-0001/', 17), lpad(g::text, 10, '0')))
FROM generate_series(1, :rows) g;

CREATE OR REPLACE FUNCTION pg_temp.measure(p int, s text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  t float8[] := '{}';
  reads bigint[] := '{}';
  j json;
  idx_bytes bigint;
  mean_len numeric;
  candidates numeric;
  n_looks numeric;
  q text;
BEGIN
  DROP TABLE IF EXISTS pt, looks;
  EXECUTE format('CREATE TABLE pt AS SELECT row_id FROM probe_sets WHERE set = %L ORDER BY g', s);
  EXECUTE format('CREATE INDEX pt_probe ON pt (pgtrickle.bench_row_probe(row_id, %s))', p);
  EXECUTE format('CREATE TABLE looks AS SELECT row_id FROM probe_sets WHERE set = %L '
                 'AND g > (SELECT max(g) / 2 FROM probe_sets) ORDER BY g LIMIT 1000', s);
  ANALYZE pt, looks;
  SELECT avg(length(row_id)) INTO mean_len FROM pt;
  SELECT count(*) INTO n_looks FROM looks;
  idx_bytes := pg_relation_size('pt_probe');
  q := format('SELECT count(*) FROM looks l JOIN pt ON pgtrickle.bench_row_probe(pt.row_id, %1$s) '
              '= pgtrickle.bench_row_probe(l.row_id, %1$s) AND pt.row_id = l.row_id', p);
  EXECUTE format('SELECT count(*)::numeric FROM looks l JOIN pt ON '
                 'pgtrickle.bench_row_probe(pt.row_id, %1$s) = pgtrickle.bench_row_probe(l.row_id, %1$s)', p)
    INTO candidates;
  FOR i IN 1 .. 4 LOOP
    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ' || q INTO j;
    IF i > 1 THEN
      t := t || (j -> 0 ->> 'Execution Time')::float8;
      reads := reads || ((j -> 0 -> 'Plan' ->> 'Shared Hit Blocks')::bigint
                         + (j -> 0 -> 'Plan' ->> 'Shared Read Blocks')::bigint);
    END IF;
  END LOOP;
  RETURN concat_ws('|', 'probe', s, p, round(mean_len, 0), round(idx_bytes / 1048576.0, 2),
    round(((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(t) x) * 1000 / n_looks)::numeric, 2),
    round(reads[1] / n_looks, 1), round(candidates / n_looks, 3));
END $$;

SELECT pg_temp.measure(p, s)
FROM unnest(ARRAY['short', 'ordered_wide', 'random_wide', 'common_prefix']) WITH ORDINALITY AS sets(s, so),
     unnest(ARRAY[32, 64, 128, 256]) AS ps(p)
ORDER BY so, p;
DROP TABLE IF EXISTS pt, looks, probe_sets;
