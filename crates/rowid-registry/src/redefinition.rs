//! When a buffer's identities stop being comparable (spec/change-buffer.md §1d, format 4):
//! the record a trigger buffer keeps of the identity its rows are written under, and the
//! decision to mark a redefinition with an `R` row.
//!
//! A DDL can change what a source's identities mean while its rows stay: a key or unique
//! index change, `ALTER TYPE ... RENAME VALUE` of an enum in the identity (its bytes are the
//! label), and a rewrite of the stored values (`ALTER COLUMN ... TYPE ... USING`, a volatile
//! `ADD COLUMN ... DEFAULT`). Changes before and after it are then not comparable by
//! identity: an old identity can equal another row's new one. The buffer records, in its
//! table comment, the [`IdentityRecord`] its rows are written under; whoever follows the
//! source's DDL compares it with the record computed now ([`redefinition`]) and, when they
//! differ, appends an `R` row saying why and records the new one.

use serde_json::{Value, json};

use crate::schema_message::{RelationSchema, Rewrite, shape_to_json};

/// What a buffer's table comment starts with; the JSON of its [`IdentityRecord`] follows.
pub const COMMENT_PREFIX: &str = "pg_trickle_ext identity ";

/// The identity a buffer's rows are written under, and the last rewrite an `R` row marks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityRecord {
    /// The identity's signature (domain; per field its attnum, type OID and shape; the labels
    /// of every enum in it) as JSON, `null` when the source has no usable identity: equal
    /// records give every row the same identity bytes.
    pub signature: Value,
    /// The transaction (64-bit id) whose rewrite of the source's values an `R` row marks.
    pub rewrite: Option<u64>,
}

impl IdentityRecord {
    /// The record of `schema` (the source's identity schema now), with the rewrite `rewrite`
    /// marked.
    pub fn of(schema: &RelationSchema, rewrite: Option<u64>) -> IdentityRecord {
        let signature =
            schema
                .identity_signature()
                .map_or(Value::Null, |(domain, fields, enums)| {
                    json!({
                        "domain": domain.name(),
                        "fields": fields
                            .iter()
                            .map(|(attnum, oid, shape)| json!([attnum, oid, shape_to_json(shape)]))
                            .collect::<Vec<_>>(),
                        "enums": enums
                            .iter()
                            .map(|e| json!([e.type_name, e.labels]))
                            .collect::<Vec<_>>(),
                    })
                });
        IdentityRecord { signature, rewrite }
    }

    /// The record a buffer made now starts with: `schema`'s identity, and its rewrite (one
    /// before the buffer existed has no change in it to mark).
    pub fn baseline(schema: &RelationSchema) -> IdentityRecord {
        let rewrite = match schema.rewritten {
            Rewrite::By(x) => Some(x),
            Rewrite::Unknown | Rewrite::Kept => None,
        };
        IdentityRecord::of(schema, rewrite)
    }

    /// The table comment that records it.
    pub fn to_comment(&self) -> String {
        let record = json!({"signature": self.signature, "rewrite": self.rewrite});
        format!("{COMMENT_PREFIX}{record}")
    }

    /// The record a table comment holds; `None` when it holds none (no comment, or one
    /// someone else wrote).
    pub fn from_comment(comment: &str) -> Option<IdentityRecord> {
        let v: Value = serde_json::from_str(comment.strip_prefix(COMMENT_PREFIX)?).ok()?;
        let rewrite = match &v["rewrite"] {
            Value::Null => None,
            r => Some(r.as_u64()?),
        };
        Some(IdentityRecord {
            signature: v.get("signature")?.clone(),
            rewrite,
        })
    }
}

/// Why an `R` row is due, or `None`: `recorded` is the buffer's record (`None`: it has none,
/// and nothing says what its rows were written under), `now` the source's signature now,
/// and `rewritten` what the identity schema says of the current transaction's rewrites.
/// Returns the reason, and the record to keep from then on.
pub fn redefinition(
    relation: &str,
    recorded: Option<&IdentityRecord>,
    now: &RelationSchema,
    rewritten: Rewrite,
) -> Option<(String, IdentityRecord)> {
    // Unknown only when the extension's table_rewrite event triggers are off (a superuser
    // disabled them): then rewrites are not marked, as columns are not followed with the
    // DDL event trigger off. Counting it as a rewrite would mark one in every transaction
    // that builds a capture plan.
    let rewrite = match rewritten {
        Rewrite::By(x) => Some(x),
        Rewrite::Unknown | Rewrite::Kept => None,
    };
    let current = IdentityRecord::of(now, rewrite);
    let redefined = recorded.is_none_or(|r| r.signature != current.signature);
    let rewrite_unmarked = rewrite.is_some() && recorded.and_then(|r| r.rewrite) != rewrite;
    let reason = match (redefined, rewrite_unmarked, recorded) {
        (false, false, _) => return None,
        (_, _, None) => format!(
            "the buffer does not record the identity its rows were written under; {relation}'s \
             identities from here on may not compare with those before"
        ),
        (true, _, Some(_)) if current.signature.is_null() => {
            format!("{relation} has no usable identity any more")
        }
        (true, _, Some(_)) => format!(
            "the identity of {relation} was redefined (its key, its domain, or an enum label \
             in it): identities before this row do not compare with those after"
        ),
        (false, true, Some(_)) => format!(
            "a DDL of {relation} rewrote its stored values (ALTER COLUMN ... TYPE ... USING, or \
             a volatile default) without a change row for any of them"
        ),
    };
    // The rewrite stays marked for the rest of the transaction, whichever DDL marked it.
    let keep = IdentityRecord {
        signature: current.signature,
        rewrite: rewrite.or(recorded.and_then(|r| r.rewrite)),
    };
    Some((reason, keep))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema_message::SchemaMessage;

    fn schema(key: &str, labels: &[&str]) -> RelationSchema {
        let v = json!({
            "format": 7, "event": "schema", "relid": 1, "namespace": "public", "relname": "t",
            "replica_identity": "default",
            "columns": [
                {"attnum": 1, "name": "k", "type_oid": 20, "type": "bigint", "not_null": true,
                 "shape": "int8", "missing": null, "missing_without_send_form": false},
                {"attnum": 2, "name": "u", "type_oid": 20, "type": "bigint", "not_null": true,
                 "shape": "int8", "missing": null, "missing_without_send_form": false}
            ],
            "primary_key": [key], "rewritten": false,
            "identity": {"domain": "SCAN_KEY", "index": "public.t_pkey", "primary": true,
                         "fields": [{"column": key, "type_oid": 20, "shape": "int8"}],
                         "max_len": 17,
                         "enums": [{"type": "public.mood", "labels": labels}]}
        });
        match SchemaMessage::from_json(&v) {
            Ok(SchemaMessage::Schema(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_record_round_trips_through_its_comment() {
        let r = IdentityRecord::of(&schema("k", &["a"]), Some(7));
        assert_eq!(IdentityRecord::from_comment(&r.to_comment()), Some(r));
        assert_eq!(
            IdentityRecord::from_comment("a comment of someone else"),
            None
        );
        assert_eq!(IdentityRecord::from_comment(COMMENT_PREFIX), None);
    }

    #[test]
    fn only_a_redefinition_or_an_unmarked_rewrite_is_marked() {
        let before = IdentityRecord::of(&schema("k", &["a", "b"]), None);
        let same = schema("k", &["a", "b"]);
        assert_eq!(redefinition("t", Some(&before), &same, Rewrite::Kept), None);
        let (why, keep) =
            redefinition("t", Some(&before), &schema("u", &["a", "b"]), Rewrite::Kept)
                .expect("another key");
        assert!(why.contains("redefined"), "{why}");
        assert_eq!(keep, IdentityRecord::of(&schema("u", &["a", "b"]), None));
        let (why, _) = redefinition("t", Some(&before), &schema("k", &["c", "b"]), Rewrite::Kept)
            .expect("a label renamed");
        assert!(why.contains("enum label"), "{why}");
        let (why, keep) =
            redefinition("t", Some(&before), &same, Rewrite::By(9)).expect("a rewrite");
        assert!(why.contains("rewrote"), "{why}");
        assert_eq!(keep.rewrite, Some(9));
        // Marked once per transaction, then no more.
        assert_eq!(redefinition("t", Some(&keep), &same, Rewrite::By(9)), None);
        // A later DDL of the same transaction that redefines still marks, and keeps the
        // rewrite marked.
        let (why, later) =
            redefinition("t", Some(&keep), &schema("u", &["a", "b"]), Rewrite::By(9))
                .expect("a key change after the rewrite");
        assert!(why.contains("redefined"), "{why}");
        assert_eq!(later.rewrite, Some(9));
        assert_eq!(
            redefinition("t", Some(&before), &same, Rewrite::Unknown),
            None,
            "not known: not marked"
        );
        let (why, _) = redefinition("t", None, &same, Rewrite::Kept).expect("no record");
        assert!(why.contains("does not record"), "{why}");
    }

    #[test]
    fn a_new_buffer_starts_with_the_rewrite_before_it_marked() {
        let mut rewritten = schema("k", &["a"]);
        rewritten.rewritten = Rewrite::By(5);
        let start = IdentityRecord::baseline(&rewritten);
        assert_eq!(start.rewrite, Some(5));
        assert_eq!(
            redefinition("t", Some(&start), &rewritten, Rewrite::By(5)),
            None
        );
        assert!(redefinition("t", Some(&start), &rewritten, Rewrite::By(6)).is_some());
    }
}
