//! Snapshot rows through the capture (no server): the copy's rows are one event rewritten
//! ([`Capture::snapshot_row`]), so each row's event must be whole and its own, whatever row
//! of whatever relation the event held before: another relation's names, key and column
//! count, an unidentified row's reason, a longer identity.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use rowid_cdc::event::{Cell, RowImage, SendRow};
use rowid_cdc::{Capture, ChangeEvent, Lsn, Op, RelationSchema, ReplicaIdentity};
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{Column, FlagBits, Tuple};
use rowid_registry::schema_message::{IdentityDef, IdentityField, Refusal, Rewrite, SchemaColumn};
use rowid_testkit::hex::from_hex as unhex;

/// Keyed by `id int8`, two columns.
const KEYED: u32 = 16385;
/// Keyed by `(a int8, b int8)`, three columns.
const PAIR: u32 = 16386;
/// No usable identity, one column.
const REFUSED: u32 = 16387;

fn column(attnum: i16, name: &str) -> SchemaColumn {
    SchemaColumn {
        attnum,
        name: name.into(),
        type_oid: 20,
        type_name: Some("bigint".into()),
        not_null: true,
        shape: Some(Shape::Scalar(TypeTag::Int8)),
        missing: None,
        missing_without_send_form: false,
    }
}

fn schema(relid: u32, relname: &str, columns: &[&str], key: &[&str]) -> RelationSchema {
    let identity = if key.is_empty() {
        Err(Refusal {
            sqlstate: "55000".into(),
            message: "no key and not every column is keyless-encodable".into(),
        })
    } else {
        Ok(IdentityDef {
            domain: Domain::ScanKey,
            index: Some(format!("{relname}_pkey")),
            primary: true,
            fields: key
                .iter()
                .map(|k| IdentityField {
                    column: (*k).into(),
                    type_oid: 20,
                    shape: Shape::Scalar(TypeTag::Int8),
                })
                .collect(),
            max_len: None,
            enums: vec![],
        })
    };
    RelationSchema {
        relid,
        namespace: "public".into(),
        relname: relname.into(),
        replica_identity: ReplicaIdentity::Default,
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, c)| column(i as i16 + 1, c))
            .collect(),
        primary_key: key.iter().map(|k| (*k).into()).collect(),
        identity,
        rewritten: Rewrite::Unknown,
        stored: None,
    }
}

/// The identity schemas of the three relations.
fn schemas() -> [RelationSchema; 3] {
    [
        schema(KEYED, "keyed", &["id", "v"], &["id"]),
        schema(PAIR, "pair", &["a", "b", "c"], &["a", "b"]),
        schema(REFUSED, "refused", &["x"], &[]),
    ]
}

fn capture(strict: bool) -> Capture {
    Capture::new(schemas(), Lsn::ZERO, FlagBits::default()).strict(strict)
}

/// A row of int8 send forms (`None`: NULL) as a binary COPY row arrives: one buffer, here
/// with bytes before and after the values, each value a range of it.
fn send_row(values: &[Option<i64>]) -> SendRow {
    let mut data = vec![0xAA; 3];
    let mut ranges = Vec::new();
    for v in values {
        ranges.push(v.map(|v| {
            data.extend(v.to_be_bytes());
            data.len() - 8..data.len()
        }));
    }
    data.extend([0xBB; 2]);
    SendRow::from_ranges(Bytes::from(data), ranges).unwrap()
}

fn int8(v: i64) -> Column {
    Column::Binary(Bytes::copy_from_slice(&v.to_be_bytes()))
}

fn cell(v: i64) -> Cell {
    Cell::Binary(Bytes::copy_from_slice(&v.to_be_bytes()))
}

const LSN: Lsn = Lsn(0x1000);
const TS: i64 = 123_456;

/// The event a snapshot row of `relid` must be, written out field by field (identities
/// from the golden vectors, spec/wire-format.md §3).
#[allow(clippy::too_many_arguments)]
fn expected(
    relid: u32,
    relation: &str,
    columns: &[&str],
    key: &[&str],
    id_hex: Option<&str>,
    cells: Vec<Cell>,
    reason: Option<&str>,
) -> ChangeEvent {
    let metas: std::sync::Arc<[rowid_cdc::event::ColumnMeta]> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| rowid_cdc::event::ColumnMeta {
            name: (*c).into(),
            attnum: Some(i as i16 + 1),
            type_oid: 20,
            type_name: Some("bigint".into()),
            shape: Some(Shape::Scalar(TypeTag::Int8)),
        })
        .collect();
    ChangeEvent {
        commit_lsn: LSN,
        lsn: LSN,
        xid: 0,
        commit_ts: TS,
        relid,
        relation: relation.into(),
        op: if reason.is_some() {
            Op::Unidentified
        } else {
            Op::Snapshot
        },
        columns: metas.clone(),
        domain: id_hex.map(|_| Domain::ScanKey),
        key: key.iter().map(|k| (*k).to_string()).collect(),
        old_id: None,
        new_id: id_hex.map(|h| unhex(h).unwrap()),
        old: None,
        old_kind: None,
        new: Some(RowImage::new(metas, cells)),
        backfilled: Vec::new(),
        unchanged_toast: Vec::new(),
        unidentified: reason.map(|r| rowid_cdc::Unidentified {
            change: Op::Snapshot,
            reason: r.into(),
        }),
        // The schema the rows were read under.
        schema: schemas()
            .into_iter()
            .find(|s| s.relid == relid)
            .map(std::sync::Arc::new),
    }
}

/// The event of `keyed` row (1, 5).
fn keyed_one_five() -> ChangeEvent {
    expected(
        KEYED,
        "public.keyed",
        &["id", "v"],
        &["id"],
        Some("02010000000104018000000000000001ff"), // integers-014
        vec![cell(1), cell(5)],
        None,
    )
}

/// The event of `keyed` row (0, NULL).
fn keyed_zero_null() -> ChangeEvent {
    expected(
        KEYED,
        "public.keyed",
        &["id", "v"],
        &["id"],
        Some("02010000000104018000000000000000ff"), // integers-013
        vec![cell(0), Cell::Null],
        None,
    )
}

fn refused_reason() -> &'static str {
    "no usable identity (55000): no key and not every column is keyless-encodable"
}

#[test]
fn every_rewritten_snapshot_event_is_its_own_row_whole() {
    let mut capture = capture(false);
    // (relation, row, the event it must be), in an order that changes every field between
    // neighbours: relation, key, column count, identity length, identified or not.
    let rows: Vec<(u32, SendRow, ChangeEvent)> = vec![
        (
            PAIR,
            send_row(&[Some(-2), Some(0), None]),
            expected(
                PAIR,
                "public.pair",
                &["a", "b", "c"],
                &["a", "b"],
                // integers-012 and integers-013, two fields.
                Some("02010000000204017ffffffffffffffe04018000000000000000ff"),
                vec![cell(-2), cell(0), Cell::Null],
                None,
            ),
        ),
        (KEYED, send_row(&[Some(1), Some(5)]), keyed_one_five()),
        (
            REFUSED,
            send_row(&[Some(9)]),
            expected(
                REFUSED,
                "public.refused",
                &["x"],
                &[],
                None,
                vec![cell(9)],
                Some(refused_reason()),
            ),
        ),
        (KEYED, send_row(&[Some(0), None]), keyed_zero_null()),
        (
            PAIR,
            send_row(&[Some(i64::MAX), Some(i64::MIN), Some(3)]),
            expected(
                PAIR,
                "public.pair",
                &["a", "b", "c"],
                &["a", "b"],
                // integers-015 and integers-011.
                Some("0201000000020401ffffffffffffffff04010000000000000000ff"),
                vec![cell(i64::MAX), cell(i64::MIN), cell(3)],
                None,
            ),
        ),
    ];
    for (i, (relid, mut row, want)) in rows.into_iter().enumerate() {
        let got = capture
            .snapshot_row(LSN, TS, relid, &mut row)
            .unwrap_or_else(|e| panic!("row {i}: {e}"));
        assert_eq!(*got, want, "row {i} of relation {relid}");
        assert!(row.is_empty(), "row {i}: the image takes the row");
    }
}

#[test]
fn a_strict_capture_stops_at_a_snapshot_row_without_identity_and_goes_on_whole() {
    let mut capture = capture(true);
    let mut row = send_row(&[Some(1), Some(5)]);
    capture.snapshot_row(LSN, TS, KEYED, &mut row).unwrap();
    let mut row = send_row(&[Some(9)]);
    let err = capture
        .snapshot_row(LSN, TS, REFUSED, &mut row)
        .expect_err("strict: no identity stops");
    assert!(err.to_string().contains("public.refused"), "{err}");
    // The event the refusal left half written is whole again at the next row.
    let mut row = send_row(&[Some(0), None]);
    let got = capture.snapshot_row(LSN, TS, KEYED, &mut row).unwrap();
    assert_eq!(*got, keyed_zero_null());
}

#[test]
fn a_chunk_of_rows_is_the_same_events_owned() {
    let mut capture = capture(false);
    let rows: Vec<Tuple> = vec![vec![int8(1), int8(5)], vec![int8(0), Column::Null]];
    let events = capture.snapshot_events(LSN, TS, KEYED, rows).unwrap();
    assert_eq!(events, vec![keyed_one_five(), keyed_zero_null()]);
}
