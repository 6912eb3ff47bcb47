-- The catalog of `cargo xtask bench` section 10 (xtask/src/bench_ddl.rs): :types domains over
-- int4, a composite of each, and :tables tables of ten columns (a composite and a domain among
-- them); then `hot`, the table the extension captures, the composite `lone` no table holds,
-- and a publication of `hot`. Variables: types, tables.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
SELECT format('CREATE DOMAIN d%s AS int4 CHECK (VALUE > -1000000)', g)
FROM generate_series(1, :types) g \gexec
SELECT format('CREATE TYPE c%s AS (a d%s, b text)', g, g)
FROM generate_series(1, :types) g \gexec
SELECT format('CREATE TABLE t%s (id int8 PRIMARY KEY, c c%s, v1 int4, v2 text, v3 numeric, '
              'v4 float8, v5 date, v6 bool, v7 jsonb, v8 d%s)',
              g, 1 + g % :types, 1 + g % :types)
FROM generate_series(1, :tables) g \gexec
CREATE TABLE hot (id int8 PRIMARY KEY, v int4);
CREATE TYPE lone AS (a int4);
CREATE PUBLICATION ddl_pub FOR TABLE hot;
