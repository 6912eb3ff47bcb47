//! The JSON line of a change event (the format in the crate README; row images as
//! spec/row-images.md maps them), apart from the event's data ([`crate::event`]).

use std::fmt::Write as _;

use rowid_codec::send::{write_image_json, write_json_string};

use crate::event::{CellRef, ChangeEvent, ColumnMeta, RowImage};

/// The format of the row images every line carries (spec/row-images.md), in its
/// `image_format` member: 2 writes a jsonb value as a JSON string (1, which wrote it as the
/// JSON value itself, could not tell jsonb `null` from SQL NULL).
pub const IMAGE_FORMAT: u32 = 2;

/// A PostgreSQL timestamp (microseconds since 2000-01-01 UTC) as RFC 3339 in UTC with
/// microseconds, e.g. `2026-12-01T09:30:00.123456Z` (the row images' `timestamptz` form).
pub fn rfc3339_utc(pg_micros: i64) -> String {
    rowid_codec::send::timestamp_text(pg_micros, true)
}

/// `bytes` as a JSON string of lowercase hex.
fn push_hex(out: &mut String, bytes: &[u8]) {
    out.push('"');
    rowid_codec::hex::push(out, bytes);
    out.push('"');
}

fn push_str(out: &mut String, s: &str) {
    write_json_string(out, s);
}

/// Appends `event` as one JSON line (with its `\n`): the format documented in the crate
/// README. Identities are lowercase hex; absent ones are `null`.
pub fn write(event: &ChangeEvent, out: &mut String) {
    let _ = write!(
        out,
        "{{\"commit_lsn\":\"{}\",\"lsn\":\"{}\",\"xid\":{},\"commit_time\":\"{}\",\"relid\":{},\"relation\":",
        event.commit_lsn,
        event.lsn,
        event.xid,
        rfc3339_utc(event.commit_ts),
        event.relid,
    );
    push_str(out, &event.relation);
    let _ = write!(
        out,
        ",\"op\":\"{}\",\"image_format\":{IMAGE_FORMAT},\"domain\":",
        event.op.name()
    );
    match event.domain {
        Some(d) => {
            let _ = write!(out, "\"{}\"", d.name());
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"key\":[");
    for (i, k) in event.key.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, k);
    }
    out.push_str("],\"old_id\":");
    match &event.old_id {
        Some(id) => push_hex(out, id),
        None => out.push_str("null"),
    }
    out.push_str(",\"new_id\":");
    match &event.new_id {
        Some(id) => push_hex(out, id),
        None => out.push_str("null"),
    }
    out.push_str(",\"old\":");
    push_image(out, event.old.as_ref());
    out.push_str(",\"old_image\":");
    match event.old_kind {
        Some(k) => {
            let _ = write!(out, "\"{}\"", k.name());
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"new\":");
    push_image(out, event.new.as_ref());
    out.push_str(",\"backfilled\":");
    push_names(out, &event.backfilled);
    out.push_str(",\"unchanged_toast\":");
    push_names(out, &event.unchanged_toast);
    if let Some(u) = &event.unidentified {
        let _ = write!(out, ",\"change\":\"{}\",\"reason\":", u.change.name());
        push_str(out, &u.reason);
    }
    out.push_str("}\n");
}

fn push_names(out: &mut String, names: &[String]) {
    out.push('[');
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, n);
    }
    out.push(']');
}

/// An image as an object keyed by column name, present columns only; `null` for none.
fn push_image(out: &mut String, image: Option<&RowImage>) {
    let Some(image) = image else {
        out.push_str("null");
        return;
    };
    out.push('{');
    for (i, (column, cell)) in image.present().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, &column.name);
        out.push(':');
        push_cell(out, column, cell);
    }
    out.push('}');
}

/// One value: spec/row-images.md's JSON for its shape; a value without one (or whose bytes
/// the shape's parser refuses) as `{"type": ..., "type_oid": ..., "send": hex}`, one that
/// came as text output as `{"type": ..., "type_oid": ..., "text": ...}`.
fn push_cell(out: &mut String, column: &ColumnMeta, cell: CellRef<'_>) {
    match cell {
        CellRef::Absent | CellRef::Null => out.push_str("null"),
        CellRef::Binary(b) => {
            if let Some(shape) = &column.shape
                && write_image_json(shape, b, out).is_ok()
            {
                return;
            }
            push_type(out, column);
            out.push_str(",\"send\":");
            push_hex(out, b);
            out.push('}');
        }
        CellRef::Text(t) => {
            push_type(out, column);
            match std::str::from_utf8(t) {
                Ok(text) => {
                    out.push_str(",\"text\":");
                    push_str(out, text);
                }
                Err(_) => {
                    out.push_str(",\"text_hex\":");
                    push_hex(out, t);
                }
            }
            out.push('}');
        }
    }
}

/// `{"type":NAME,"type_oid":OID` (the object left open).
fn push_type(out: &mut String, column: &ColumnMeta) {
    out.push_str("{\"type\":");
    match &column.type_name {
        Some(n) => push_str(out, n),
        None => out.push_str("null"),
    }
    let _ = write!(out, ",\"type_oid\":{}", column.type_oid);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Op, Unidentified};
    use crate::lsn::Lsn;
    use rowid_codec::structure::Shape;
    use rowid_codec::{Domain, TypeTag};
    use serde_json::{Value, json};
    use std::sync::Arc;

    use crate::event::{Cell, ColumnMeta, OldKind, RowImage};

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "2000-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339_utc(-1), "1999-12-31T23:59:59.999999Z");
        // 2026-12-01 09:30:00.123456 UTC: 9831 days after 2000-01-01.
        let t = (9831 * 86_400 + 9 * 3600 + 30 * 60) * 1_000_000 + 123_456;
        assert_eq!(rfc3339_utc(t), "2026-12-01T09:30:00.123456Z");
        assert_eq!(
            rfc3339_utc(60 * 86_400 * 1_000_000),
            "2000-03-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn json_lines_are_json() {
        let e = ChangeEvent {
            commit_lsn: Lsn(0x16_B374_D848),
            lsn: Lsn(0x16_B374_D800),
            xid: 741,
            commit_ts: 0,
            relid: 16385,
            relation: "public.\"odd\" name".into(),
            op: Op::Update,
            columns: Arc::from([]),
            domain: Some(Domain::ScanKey),
            key: Arc::from(["id".to_string()]),
            old_id: Some(vec![0x02, 0xff]),
            new_id: None,
            old: None,
            old_kind: None,
            new: None,
            backfilled: vec!["doc".into()],
            unchanged_toast: vec![],
            unidentified: None,
            schema: None,
        };
        let mut line = String::new();
        write(&e, &mut line);
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["commit_lsn"], "16/B374D848");
        assert_eq!(v["lsn"], "16/B374D800");
        assert_eq!(v["relation"], "public.\"odd\" name");
        assert_eq!(v["op"], "update");
        assert_eq!(v["domain"], "SCAN_KEY");
        assert_eq!(v["key"][0], "id");
        assert_eq!(v["old_id"], "02ff");
        assert_eq!(v["new_id"], serde_json::Value::Null);
        assert_eq!(v["backfilled"], serde_json::json!(["doc"]));
        assert_eq!(v["unchanged_toast"], serde_json::json!([]));
        assert_eq!((&v["old"], &v["new"]), (&Value::Null, &Value::Null));
        assert_eq!(v["commit_time"], "2000-01-01T00:00:00.000000Z");
        assert!(v.get("reason").is_none());

        let u = ChangeEvent {
            op: Op::Unidentified,
            domain: None,
            key: Arc::from([]),
            old_id: None,
            backfilled: vec![],
            unidentified: Some(Unidentified {
                change: Op::Update,
                reason: "no \"old\" row".into(),
            }),
            ..e
        };
        line.clear();
        write(&u, &mut line);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["op"], "unidentified");
        assert_eq!(v["change"], "update");
        assert_eq!(v["reason"], "no \"old\" row");
        assert_eq!(v["old_id"], serde_json::Value::Null);
    }

    fn column(
        name: &str,
        type_oid: u32,
        type_name: Option<&str>,
        shape: Option<Shape>,
    ) -> ColumnMeta {
        ColumnMeta {
            name: name.into(),
            attnum: None,
            type_oid,
            type_name: type_name.map(Into::into),
            shape,
        }
    }

    #[test]
    fn images_are_objects_keyed_by_column() {
        let columns: Arc<[ColumnMeta]> = Arc::from(vec![
            column("id", 20, Some("bigint"), Some(Shape::Scalar(TypeTag::Int8))),
            column("price", 790, Some("money"), None),
            column("doc", 25, Some("text"), Some(Shape::Scalar(TypeTag::Text))),
            // A shape whose parser refuses the bytes: carried as the send form.
            column("n", 23, None, Some(Shape::Scalar(TypeTag::Int4))),
            column("p", 600, Some("point"), None),
        ]);
        let b = |x: &[u8]| Cell::Binary(bytes::Bytes::copy_from_slice(x));
        let e = ChangeEvent {
            commit_lsn: Lsn(1),
            lsn: Lsn(1),
            xid: 1,
            commit_ts: 0,
            relid: 1,
            relation: "public.t".into(),
            op: Op::Update,
            columns: columns.clone(),
            domain: Some(Domain::ScanKey),
            key: Arc::from(["id".to_string()]),
            old_id: Some(vec![2]),
            new_id: Some(vec![3]),
            old: Some(RowImage::new(
                columns.clone(),
                vec![
                    b(&7i64.to_be_bytes()),
                    Cell::Absent,
                    Cell::Absent,
                    Cell::Absent,
                    Cell::Absent,
                ],
            )),
            old_kind: Some(OldKind::Key),
            new: Some(RowImage::new(
                columns,
                vec![
                    b(&8i64.to_be_bytes()),
                    b(&[0, 0, 0, 0, 0, 0, 0x27, 0x10]),
                    Cell::Absent,
                    b(&[1, 2]),
                    Cell::Text(bytes::Bytes::from_static(b"(1,2)")),
                ],
            )),
            backfilled: vec![],
            unchanged_toast: vec!["doc".into()],
            unidentified: None,
            schema: None,
        };
        let mut line = String::new();
        write(&e, &mut line);
        let v: Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["old"], json!({"id": "7"}));
        assert_eq!(v["old_image"], "key");
        assert_eq!(
            v["new"],
            json!({
                "id": "8",
                "price": {"type": "money", "type_oid": 790, "send": "0000000000002710"},
                "n": {"type": null, "type_oid": 23, "send": "0102"},
                "p": {"type": "point", "type_oid": 600, "text": "(1,2)"},
            })
        );
        assert!(
            v["new"].get("doc").is_none(),
            "an unknown value is absent, not null"
        );
        assert_eq!(v["unchanged_toast"], json!(["doc"]));
    }
}
