-- Trigger capture cost (RESULTS.md §6), run by `cargo xtask bench` with psql variables
-- :rows (10^6; 10^4 with --quick) and :rounds.
--
-- One UPDATE of every row of a table keyed by int8, four ways: no trigger; pg_trickle's V1
-- capture (a PL/pgSQL trigger: ::text casts, the V1 hash, an insert into a V1-style buffer
-- that also keeps the new and old column values); pgtrickle.capture_changes (old and new
-- V2 identities and the row's old and new images, its typed new_/old_ columns, into the
-- change buffer); and the floor, the same C trigger writing one fixed identity (the same
-- rows, images included, without computing any identity). Rounds alternate the order; each case
-- reports its median. "net" subtracts the no-trigger UPDATE: the trigger's own cost per row.

\set ON_ERROR_STOP 1
SET max_parallel_workers_per_gather = 0;
SET jit = off;
SET synchronous_commit = off;
CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;

-- Dropping a captured table drops its change buffer (it depends on the table).
DROP TABLE IF EXISTS cap_none, cap_v1, cap_v2, cap_floor, v1_buf CASCADE;
CREATE TABLE cap_none (id int8 PRIMARY KEY, v int4);
INSERT INTO cap_none SELECT g, 0 FROM generate_series(1, :rows) g;
CREATE TABLE cap_v1 (LIKE cap_none INCLUDING ALL);
INSERT INTO cap_v1 SELECT * FROM cap_none;
CREATE TABLE cap_v2 (LIKE cap_none INCLUDING ALL);
INSERT INTO cap_v2 SELECT * FROM cap_none;
CREATE TABLE cap_floor (LIKE cap_none INCLUDING ALL);
INSERT INTO cap_floor SELECT * FROM cap_none;

-- V1: what pg_trickle's first capture trigger does.
CREATE TABLE v1_buf (change_id bigserial, lsn pg_lsn, action char(1), pk_hash bigint,
                     new_id int8, new_v int4, old_id int8, old_v int4);
CREATE FUNCTION v1_capture() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO v1_buf (lsn, action, pk_hash, new_id, new_v)
    VALUES (pg_current_wal_insert_lsn(), 'I', pgtrickle.bench_v1_hash(ARRAY[NEW.id::text]), NEW.id, NEW.v);
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO v1_buf (lsn, action, pk_hash, new_id, new_v, old_id, old_v)
    VALUES (pg_current_wal_insert_lsn(), 'U', pgtrickle.bench_v1_hash(ARRAY[NEW.id::text]),
            NEW.id, NEW.v, OLD.id, OLD.v);
  ELSE
    INSERT INTO v1_buf (lsn, action, pk_hash, old_id, old_v)
    VALUES (pg_current_wal_insert_lsn(), 'D', pgtrickle.bench_v1_hash(ARRAY[OLD.id::text]), OLD.id, OLD.v);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER v1 AFTER INSERT OR UPDATE OR DELETE ON cap_v1
  FOR EACH ROW EXECUTE FUNCTION v1_capture();
SELECT pgtrickle.capture_table('cap_v2') \gset
SELECT pgtrickle.capture_table('cap_floor') AS floor_buf \gset
DROP TRIGGER pgtrickle_capture ON cap_floor;
CREATE TRIGGER pgtrickle_capture AFTER INSERT OR UPDATE OR DELETE ON cap_floor
  FOR EACH ROW EXECUTE FUNCTION pgtrickle.bench_capture_floor(:'floor_buf');
ALTER TABLE cap_floor ENABLE ALWAYS TRIGGER pgtrickle_capture;
VACUUM ANALYZE cap_none, cap_v1, cap_v2, cap_floor;
CHECKPOINT;

CREATE TEMP TABLE cases (ord int, name text, tbl text);
INSERT INTO cases VALUES (1, 'no trigger', 'cap_none'), (2, 'V1 PL/pgSQL capture', 'cap_v1'),
  (3, 'V2 capture_changes', 'cap_v2'), (4, 'floor: C trigger, fixed identity', 'cap_floor');

CREATE OR REPLACE FUNCTION pg_temp.bench_ms(q text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  EXECUTE q;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

CREATE TEMP TABLE runs (name text, round int, ms float8);
SELECT set_config('bench.rounds', :'rounds', false);
-- Each round: every case's UPDATE of all rows in its own transaction (a DO block per case
-- would hold all of them in one), buffers emptied and tables vacuumed between rounds.
\o /dev/null
SELECT pg_temp.bench_ms('UPDATE cap_none SET v = v + 1');
\o
DO $$
DECLARE r int; c record;
BEGIN
  FOR r IN 1 .. current_setting('bench.rounds')::int LOOP
    FOR c IN SELECT * FROM cases ORDER BY CASE WHEN r % 2 = 0 THEN -ord ELSE ord END LOOP
      INSERT INTO runs SELECT c.name, r, pg_temp.bench_ms(format('UPDATE %I SET v = v + 1', c.tbl));
      COMMIT;
    END LOOP;
    EXECUTE 'TRUNCATE v1_buf, pgtrickle_changes.changes_' || 'cap_v2'::regclass::oid
         || ', pgtrickle_changes.changes_' || 'cap_floor'::regclass::oid;
    COMMIT;
  END LOOP;
END $$;
\pset format unaligned
\pset fieldsep '|'
\pset tuples_only on
WITH med AS (
  SELECT c.ord, c.name, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS ms
  FROM runs r JOIN cases c USING (name) GROUP BY c.ord, c.name
), base AS (SELECT ms FROM med WHERE ord = 1)
SELECT 'capture', m.name, round(m.ms::numeric, 0),
       round((:rows / (m.ms / 1000))::numeric, 0),
       round(((m.ms - base.ms) * 1e6 / :rows)::numeric, 1)
FROM med m, base ORDER BY m.ord;
