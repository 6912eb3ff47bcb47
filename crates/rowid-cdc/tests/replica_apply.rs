//! The replica's apply statements (`rowid_registry::replica`) against a real server and a
//! model: random transactions, each valid for the rows the model holds (inserts, updates in
//! place, updates that move a row to another identity, deletes, the same identity changed
//! several times, updates leaving an unchanged TOASTed column alone, keyless duplicates,
//! TRUNCATE), cut into segments by the registry's `Segmenter` and applied through the
//! registry's statements; after every transaction the storage holds exactly the model's rows.
//! Then every kind of change a storage cannot take (a row that is not stored, an identity
//! stored already, more copies removed than stored) must be caught, named by the first
//! change at fault, and leave the storage as it was. For each index class: the direct
//! UNIQUE index, a direct multiset index, and the probe expression with identities longer
//! than the probe prefix, unique and multiset.
//!
//! Needs a server with the extension (`row_probe_v1`): run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_registry::buffer::ImageColumn;
use rowid_registry::replica::{
    Apply, Expect, SegmentChange, Segmenter, Storage, create_statements,
};
use rowid_registry::sql::QualifiedName;
use rowid_registry::{IndexClass, Uniqueness};
use rowid_testkit::psql::Psql;
use rowid_testkit::rng::Rng;
use tokio_postgres::Client;

/// A stored row: identity, `v`, `note`.
type Row = (Vec<u8>, i32, Option<String>);

/// One change as a capture would deliver it.
#[derive(Clone, Debug)]
struct Change {
    op: char,
    old_id: Option<Vec<u8>>,
    new_id: Option<Vec<u8>>,
    v: i32,
    note: Option<String>,
    /// The update left `note` alone (an unchanged TOASTed value the stream did not send).
    note_absent: bool,
}

/// The rows a storage must hold: unique identities in a map, a multiset as a sorted list.
#[derive(Clone, Debug, Default)]
struct Model {
    unique: bool,
    rows: Vec<Row>,
}

impl Model {
    fn find(&self, id: &[u8]) -> Option<usize> {
        self.rows.iter().position(|r| r.0 == id)
    }

    fn sorted(&self) -> Vec<Row> {
        let mut rows = self.rows.clone();
        rows.sort();
        rows
    }
}

/// A unique identity: a key, long enough in the probe case to overflow the probe prefix
/// (64 bytes, every identity sharing it: the digest tells them apart).
fn key_id(long: bool, k: u8) -> Vec<u8> {
    let mut id = if long { vec![0xAB; 80] } else { Vec::new() };
    id.extend([0x02, k]);
    id
}

/// A keyless identity: the row itself, so equal rows share it.
fn row_id(long: bool, v: i32, note: &Option<String>) -> Vec<u8> {
    let mut id = if long { vec![0xCD; 80] } else { Vec::new() };
    id.extend(v.to_be_bytes());
    match note {
        Some(n) => {
            id.push(1);
            id.extend(n.as_bytes());
        }
        None => id.push(0),
    }
    id
}

fn note(rng: &mut Rng) -> Option<String> {
    (!rng.chance(20)).then(|| format!("n{}", rng.below(3)))
}

/// A transaction valid for `model`, applied to it, and where in it a TRUNCATE comes (the rows
/// before it gone).
fn transaction(rng: &mut Rng, model: &mut Model, long: bool) -> (Vec<Change>, Option<usize>) {
    let mut changes = Vec::new();
    let n = 1 + rng.below(12);
    let truncate_at = rng.chance(4).then(|| rng.below(n));
    for at in 0..n {
        if truncate_at == Some(at) {
            model.rows.clear();
        }
        let c = if model.unique {
            let k = rng.below(8) as u8;
            let id = key_id(long, k);
            match model.find(&id) {
                None => {
                    let (v, note) = (rng.below(100) as i32, note(rng));
                    model.rows.push((id.clone(), v, note.clone()));
                    Change {
                        op: 'I',
                        old_id: None,
                        new_id: Some(id),
                        v,
                        note,
                        note_absent: false,
                    }
                }
                Some(i) if rng.chance(25) => {
                    model.rows.remove(i);
                    Change {
                        op: 'D',
                        old_id: Some(id),
                        new_id: None,
                        v: 0,
                        note: None,
                        note_absent: false,
                    }
                }
                Some(i) => {
                    // In place or to a free key; sometimes leaving `note` alone.
                    let to = key_id(long, rng.below(8) as u8);
                    let to = if to != id && model.find(&to).is_some() {
                        id.clone()
                    } else {
                        to
                    };
                    let v = rng.below(100) as i32;
                    let absent = rng.chance(30);
                    let note = if absent {
                        model.rows[i].2.clone()
                    } else {
                        note(rng)
                    };
                    model.rows[i] = (to.clone(), v, note.clone());
                    Change {
                        op: 'U',
                        old_id: Some(id),
                        new_id: Some(to),
                        v,
                        note: if absent { None } else { note },
                        note_absent: absent,
                    }
                }
            }
        } else {
            let (v, n) = (rng.below(4) as i32, note(rng));
            if model.rows.is_empty() || rng.chance(40) {
                let id = row_id(long, v, &n);
                model.rows.push((id.clone(), v, n.clone()));
                Change {
                    op: 'I',
                    old_id: None,
                    new_id: Some(id),
                    v,
                    note: n,
                    note_absent: false,
                }
            } else {
                let i = rng.below(model.rows.len());
                let old = model.rows[i].0.clone();
                if rng.chance(40) {
                    model.rows.remove(i);
                    Change {
                        op: 'D',
                        old_id: Some(old),
                        new_id: None,
                        v: 0,
                        note: None,
                        note_absent: false,
                    }
                } else {
                    let id = row_id(long, v, &n);
                    model.rows[i] = (id.clone(), v, n.clone());
                    Change {
                        op: 'U',
                        old_id: Some(old),
                        new_id: Some(id),
                        v,
                        note: n,
                        note_absent: false,
                    }
                }
            }
        };
        changes.push(c);
    }
    (changes, truncate_at)
}

struct Replica {
    client: Client,
    storage: Storage,
}

/// Why a segment was refused: the first change at fault (seq, op, identity).
type Refused = (i32, String, Vec<u8>);

impl Replica {
    async fn new(psql: &Psql, name: &str, class: IndexClass, uniqueness: Uniqueness) -> Replica {
        let (client, conn) = tokio_postgres::connect(&psql.dsn(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let storage = Storage {
            table: QualifiedName::new("s", name),
            source_relid: 16000 + name.len() as u32,
            class,
            uniqueness,
            columns: vec![
                ImageColumn {
                    attnum: 1,
                    name: "v".into(),
                    sql_type: "integer".into(),
                },
                ImageColumn {
                    attnum: 3,
                    name: "note".into(),
                    sql_type: "text".into(),
                },
            ],
        };
        client
            .batch_execute("SET search_path = pg_catalog, pg_temp")
            .await
            .unwrap();
        for sql in create_statements(&storage) {
            client.batch_execute(&sql).await.unwrap();
        }
        client
            .batch_execute(&Apply::new(&storage).delta_table())
            .await
            .unwrap();
        Replica { client, storage }
    }

    /// Applies one transaction's changes, segment by segment; `Err` names the first change of
    /// the refused segment at fault (the transaction is rolled back).
    async fn apply(
        &mut self,
        changes: &[Change],
        truncate_at: Option<usize>,
    ) -> Result<(), Refused> {
        let apply = Apply::new(&self.storage);
        self.client.batch_execute("BEGIN").await.unwrap();
        let mut seg = Segmenter::new(self.storage.uniqueness);
        let mut pending: Vec<(i32, &Change)> = Vec::new();
        let note = vec!["note".to_string()];
        let none: Vec<String> = Vec::new();
        for (seq, c) in changes.iter().enumerate() {
            if truncate_at == Some(seq) {
                self.segment(&apply, &pending, &seg).await?;
                pending.clear();
                seg.clear();
                self.client.batch_execute(&apply.truncate()).await.unwrap();
            }
            let change = SegmentChange {
                op: c.op,
                old_id: c.old_id.as_deref(),
                new_id: c.new_id.as_deref(),
                absent: if c.note_absent { &note } else { &none },
                bytes: 64,
            };
            if !seg.admit(&change) {
                self.segment(&apply, &pending, &seg).await?;
                pending.clear();
                seg.clear();
                assert!(seg.admit(&change), "a change fits an empty segment");
            }
            pending.push((seq as i32, c));
        }
        self.segment(&apply, &pending, &seg).await?;
        self.client.batch_execute("COMMIT").await.unwrap();
        Ok(())
    }

    async fn segment(
        &self,
        apply: &Apply<'_>,
        changes: &[(i32, &Change)],
        seg: &Segmenter,
    ) -> Result<(), Refused> {
        if changes.is_empty() {
            return Ok(());
        }
        let c = &self.client;
        c.batch_execute(&apply.clear_delta()).await.unwrap();
        let insert = format!(
            "INSERT INTO {} ({}) VALUES ($1, $2::text::\"char\", $3, $4, $5, $6)",
            apply.delta(),
            apply.copy_columns()
        );
        for (seq, ch) in changes {
            c.execute(
                &insert,
                &[
                    seq,
                    &ch.op.to_string(),
                    &ch.old_id,
                    &ch.new_id,
                    &ch.v,
                    &ch.note,
                ],
            )
            .await
            .unwrap();
        }
        c.batch_execute("SAVEPOINT segment").await.unwrap();
        let set: Option<Vec<&str>> = seg.absent().map(|absent| {
            ["v", "note"]
                .into_iter()
                .filter(|col| !absent.iter().any(|a| a == col))
                .collect()
        });
        let mut refused = false;
        for step in apply.steps(set.as_deref()) {
            match step.expect {
                Expect::Changes(ops) => {
                    let want = changes
                        .iter()
                        .filter(|(_, ch)| ops.contains(&ch.op))
                        .count();
                    match c.execute(&step.sql, &[]).await {
                        Ok(n) if n as usize == want => {}
                        Ok(_) | Err(_) => refused = true,
                    }
                }
                Expect::Counted => match c.query_one(&step.sql, &[]).await {
                    Ok(r) => {
                        let n: Vec<i64> = (0..6).map(|i| r.get(i)).collect();
                        refused |= n[0] != n[1] || n[2] != n[3] || n[4] != n[5];
                    }
                    Err(_) => refused = true,
                },
            }
            if refused {
                break;
            }
        }
        if !refused {
            c.batch_execute("RELEASE SAVEPOINT segment").await.unwrap();
            return Ok(());
        }
        c.batch_execute("ROLLBACK TO SAVEPOINT segment")
            .await
            .unwrap();
        let at = c.query_opt(&apply.first_unapplicable(), &[]).await.unwrap();
        c.batch_execute("ROLLBACK").await.unwrap();
        let r = at.expect("a refused segment names the change at fault");
        let op: i8 = r.get(1);
        Err((r.get(0), (op as u8 as char).to_string(), r.get(2)))
    }

    async fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self
            .client
            .query(
                &format!(
                    "SELECT \"__pgt_row_id\", v, note FROM {}",
                    self.storage.table.quoted()
                ),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        rows.sort();
        rows
    }
}

async fn run_class(psql: &Psql, name: &str, class: IndexClass, uniqueness: Uniqueness, seed: u64) {
    let long = class == IndexClass::ProbeExpression;
    let mut replica = Replica::new(psql, name, class, uniqueness).await;
    let mut model = Model {
        unique: uniqueness == Uniqueness::Unique,
        rows: Vec::new(),
    };
    let mut rng = Rng::new(seed);
    let mut segments_cut = 0usize;
    for t in 0..300 {
        let (changes, truncate_at) = transaction(&mut rng, &mut model, long);
        let mut seg = Segmenter::new(uniqueness);
        for c in &changes {
            let n = vec!["note".to_string()];
            let change = SegmentChange {
                op: c.op,
                old_id: c.old_id.as_deref(),
                new_id: c.new_id.as_deref(),
                absent: if c.note_absent { &n } else { &[] },
                bytes: 64,
            };
            if !seg.admit(&change) {
                segments_cut += 1;
                seg.clear();
                seg.admit(&change);
            }
        }
        replica
            .apply(&changes, truncate_at)
            .await
            .unwrap_or_else(|e| panic!("{name}: transaction {t} refused at {e:?}: {changes:?}"));
        assert_eq!(
            replica.rows().await,
            model.sorted(),
            "{name}: after transaction {t}: {changes:?}"
        );
    }
    if uniqueness == Uniqueness::Unique {
        assert!(
            segments_cut > 50,
            "{name}: repeated identities were cut into segments"
        );
    }
    refusals(&mut replica, &model, long).await;
}

/// Changes the storage cannot take are refused, named, and change nothing.
async fn refusals(replica: &mut Replica, model: &Model, long: bool) {
    let before = replica.rows().await;
    let missing = if model.unique {
        key_id(long, 200)
    } else {
        row_id(long, 99, &Some("missing".into()))
    };
    let stored = before.first().expect("the workload leaves rows").clone();
    let ok_insert = |k: u8| Change {
        op: 'I',
        old_id: None,
        new_id: Some(if model.unique {
            key_id(long, 100 + k)
        } else {
            row_id(long, 50 + k as i32, &None)
        }),
        v: 50 + k as i32,
        note: None,
        note_absent: false,
    };
    let mut cases = vec![
        // An update of a row that is not stored.
        Change {
            op: 'U',
            old_id: Some(missing.clone()),
            new_id: Some(missing.clone()),
            v: 1,
            note: None,
            note_absent: false,
        },
        // A delete of a row that is not stored.
        Change {
            op: 'D',
            old_id: Some(missing.clone()),
            new_id: None,
            v: 0,
            note: None,
            note_absent: false,
        },
    ];
    if model.unique {
        // An insert of an identity stored already.
        cases.push(Change {
            op: 'I',
            old_id: None,
            new_id: Some(stored.0.clone()),
            v: 7,
            note: None,
            note_absent: false,
        });
        // An update moving a row onto another stored identity.
        if let Some(other) = before.get(1) {
            cases.push(Change {
                op: 'U',
                old_id: Some(stored.0.clone()),
                new_id: Some(other.0.clone()),
                v: 7,
                note: None,
                note_absent: false,
            });
        }
    } else {
        // More copies removed than stored (and than added before it).
        let copies = before.iter().filter(|r| r.0 == stored.0).count();
        for _ in 0..copies {
            cases.push(Change {
                op: 'D',
                old_id: Some(stored.0.clone()),
                new_id: None,
                v: 0,
                note: None,
                note_absent: false,
            });
        }
    }
    let unique_cases = if model.unique { cases.len() } else { 2 };
    for (i, bad) in cases.iter().take(unique_cases).enumerate() {
        // A valid change before it, in the same segment: rolled back with it.
        let txn = vec![ok_insert(i as u8), bad.clone()];
        let err = replica
            .apply(&txn, None)
            .await
            .expect_err(&format!("case {i} refused: {bad:?}"));
        assert_eq!(
            err.0, 1,
            "case {i}: the bad change is named, not the good one: {err:?}"
        );
        assert_eq!(err.1, bad.op.to_string(), "case {i}");
        // The row not stored for an update or delete; the identity stored already for an
        // insert, or for an update moving a stored row onto it.
        let expected_id = match bad.op {
            'I' => bad.new_id.clone().unwrap(),
            'U' if bad.old_id.as_ref() == Some(&missing) => missing.clone(),
            'U' => bad.new_id.clone().unwrap(),
            _ => bad.old_id.clone().unwrap(),
        };
        assert_eq!(err.2, expected_id, "case {i}: the identity at fault");
        assert_eq!(replica.rows().await, before, "case {i}: nothing changed");
    }
    if !model.unique {
        // One copy too many, after the valid insert.
        let mut txn = vec![ok_insert(9)];
        txn.extend(cases[2..].iter().cloned());
        txn.push(cases.last().unwrap().clone());
        let err = replica.apply(&txn, None).await.expect_err("refused");
        assert_eq!((err.1.as_str(), &err.2), ("D", &stored.0));
        assert_eq!(replica.rows().await, before, "nothing changed");
        // Exactly as many as stored is fine.
        let mut txn = vec![ok_insert(9)];
        txn.extend(cases[2..].iter().cloned());
        replica.apply(&txn, None).await.unwrap();
        assert_eq!(
            replica
                .rows()
                .await
                .iter()
                .filter(|r| r.0 == stored.0)
                .count(),
            0
        );
    }
}

#[tokio::test]
#[ignore = "needs a PostgreSQL server with the extension: run through `cargo xtask test`"]
async fn apply_statements_keep_every_index_class_equal_to_the_model() {
    let psql = Psql::fresh_database("rowid_cdc_replica_apply").unwrap();
    psql.run("CREATE EXTENSION pg_trickle_ext; CREATE SCHEMA s;")
        .unwrap();
    let classes = [
        (
            "direct_unique",
            IndexClass::DirectUnique,
            Uniqueness::Unique,
        ),
        (
            "direct_multiset",
            IndexClass::DirectNonUnique,
            Uniqueness::Multiset,
        ),
        (
            "probe_unique",
            IndexClass::ProbeExpression,
            Uniqueness::Unique,
        ),
        (
            "probe_multiset",
            IndexClass::ProbeExpression,
            Uniqueness::Multiset,
        ),
    ];
    for (i, (name, class, uniqueness)) in classes.into_iter().enumerate() {
        run_class(&psql, name, class, uniqueness, 0x5EED + i as u64).await;
    }
    // The indexes are the plan's.
    let indexes = psql
        .run(
            "SELECT c.relname, i.indisunique, pg_get_indexdef(i.indexrelid) LIKE '%row_probe_v1%', \
             i.indisreplident FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 's' ORDER BY 1;",
        )
        .unwrap();
    assert_eq!(
        indexes,
        "direct_multiset|f|f|f\ndirect_unique|t|f|t\nprobe_multiset|f|t|f\nprobe_unique|f|t|f\n"
    );
}
