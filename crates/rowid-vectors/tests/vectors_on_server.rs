//! The vectors' `sql` members evaluated by a real PostgreSQL server: every literal is valid,
//! and for every pair of single-field vectors of one type the server's equality and order
//! agree with the vectors' bytes (order only for order-preserving types).
//!
//! Needs a server: `cargo xtask test` runs this with `--ignored` and
//! `ROWID_ORACLE_PSQL_ARGS`. Vectors whose SQL needs the extension (child identities) or a
//! newer server (flag `pg17`) are counted and listed, not evaluated.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value as Json;

use rowid_testkit::psql::run as psql;

struct One {
    id: String,
    ty: String,
    sql: String,
    hex: String,
}

#[test]
#[ignore = "needs a PostgreSQL server: run through `cargo xtask test`"]
fn vector_sql_agrees_with_the_server() {
    let major: u32 = psql("SHOW server_version_num;")
        .trim()
        .parse::<u32>()
        .unwrap()
        / 10_000;
    let mut setup = Vec::new();
    let mut singles: Vec<One> = Vec::new();
    let mut rows = Vec::new();
    let (mut needs_extension, mut needs_newer) = (Vec::new(), Vec::new());
    let dir = rowid_vectors::vectors_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let doc: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for s in doc["setup"].as_array().unwrap() {
            setup.push(s.as_str().unwrap().to_string());
        }
        for v in doc["vectors"].as_array().unwrap() {
            let Some(fields) = v["fields"].as_array() else {
                continue;
            };
            let id = v["id"].as_str().unwrap().to_string();
            let flags: Vec<&str> = v["flags"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Json::as_str)
                .collect();
            if flags.contains(&"nesting") {
                needs_extension.push(id);
                continue;
            }
            if flags.contains(&"pg17") && major < 17 {
                needs_newer.push(id);
                continue;
            }
            let sqls: Option<Vec<String>> = fields
                .iter()
                .map(|f| f["sql"].as_str().map(str::to_string))
                .collect();
            let Some(sqls) = sqls else { continue };
            rows.push(format!(
                "SELECT ROW({})::text IS NOT NULL;",
                sqls.join(", ")
            ));
            if let [only] = fields.as_slice() {
                singles.push(One {
                    id,
                    ty: only["type"].as_str().unwrap().to_string(),
                    sql: sqls[0].clone(),
                    hex: v["hex"].as_str().unwrap().to_string(),
                });
            }
        }
    }
    let mut prelude = String::from("BEGIN;\n");
    for s in &setup {
        prelude.push_str(s);
        prelude.push_str(";\n");
    }
    // Pairs are formed between vectors of the same SQL type (two arrays of different element
    // types share a tag but have no comparison operator), so ask the server for the types.
    let mut typing = prelude.clone();
    for one in &singles {
        typing.push_str(&format!("SELECT pg_typeof({})::text;\n", one.sql));
    }
    typing.push_str("ROLLBACK;\n");
    let typing = psql(&typing);
    let sql_types: Vec<&str> = typing.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(sql_types.len(), singles.len());
    for (one, ty) in singles.iter_mut().zip(&sql_types) {
        one.ty = (*ty).to_string();
    }
    let mut script = prelude;
    script.push_str(&rows.join("\n"));
    script.push('\n');
    let mut pairs = Vec::new();
    for (i, a) in singles.iter().enumerate() {
        for b in &singles[i + 1..] {
            if a.ty != b.ty {
                continue;
            }
            let collate = if matches!(
                a.ty.as_str(),
                "text" | "character varying" | "character" | "text[]"
            ) {
                " COLLATE \"C\""
            } else {
                ""
            };
            let (x, y) = (
                format!("({}){collate}", a.sql),
                format!("({}){collate}", b.sql),
            );
            script.push_str(&format!(
                "SELECT {x} IS NOT DISTINCT FROM {y}, CASE WHEN {x} < {y} THEN -1 WHEN {x} > {y} THEN 1 ELSE 0 END;\n"
            ));
            pairs.push((a, b));
        }
    }
    script.push_str("ROLLBACK;\n");
    let out = psql(&script);
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), rows.len() + pairs.len());
    assert!(
        lines[..rows.len()].iter().all(|l| *l == "t"),
        "a vector's SQL evaluated to NULL"
    );
    let mut bad = Vec::new();
    for ((a, b), line) in pairs.iter().zip(&lines[rows.len()..]) {
        let (eq, cmp) = line.split_once('|').unwrap();
        // Compare the fields, not the identities: the 6-byte header differs between domains
        // (SET_KEY 1 and SCAN_KEY 1 hold equal values), and TUPLE_END is common.
        let field = |h: &str| h[12..h.len() - 2].to_string();
        let (fa, fb) = (field(&a.hex), field(&b.hex));
        let want_eq = fa == fb;
        // NULL placement is not the comparator's business (the spec claims order for
        // non-NULL values only), so order is checked only between values.
        let null = |f: &str| f.len() == 4 && f.ends_with("00");
        // No order claim for enums (labels, not enumsortorder) and jsonb (spec §6.6).
        let order_claimed = a.ty != "rowid_vec_mood"
            && !a.ty.starts_with("jsonb")
            && a.ty != "vec_nest"
            && !null(&fa)
            && !null(&fb);
        let want_cmp = match fa.cmp(&fb) {
            std::cmp::Ordering::Less => "-1",
            std::cmp::Ordering::Equal => "0",
            std::cmp::Ordering::Greater => "1",
        };
        if (eq == "t") != want_eq || (order_claimed && cmp != want_cmp) {
            bad.push(format!("{} vs {}: server eq {eq} cmp {cmp}", a.id, b.id));
        }
    }
    println!(
        "PostgreSQL {major}: {} vectors evaluated, {} same-type pairs compared, {} disagreements; \
         not evaluated: {} need the extension ({:?}), {} need PostgreSQL 17 ({:?})",
        rows.len(),
        pairs.len(),
        bad.len(),
        needs_extension.len(),
        needs_extension,
        needs_newer.len(),
        needs_newer
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
