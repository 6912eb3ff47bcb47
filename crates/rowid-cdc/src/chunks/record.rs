//! Where a run's chunked snapshots stand, as recorded: in the state file (spec/state-file.md
//! §2.2) with every transaction, and by a sink that commits it with its rows (the replica
//! sink, spec/replica.md §2), so that a restart routes exactly as the run would have gone on
//! whichever of the two is ahead.

use rowid_codec::hex::{decode as from_hex, encode as to_hex};
use serde_json::{Map, Value, json};

use super::{After, ChunkCursor, DeliveredChunk, TxnSnapshot, View};

/// Where the chunked snapshots of a run stand: every table's cursor, and the chunk delivered
/// whose high watermark has not arrived yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkState {
    /// One per table being, or once, read in chunks (or copied in key order).
    pub cursors: Vec<ChunkCursor>,
    /// The chunk delivered and not closed yet, if any.
    pub delivered: Option<DeliveredChunk>,
}

impl ChunkState {
    /// Whether nothing is recorded (no table was ever chunked).
    pub fn is_empty(&self) -> bool {
        self.cursors.is_empty() && self.delivered.is_none()
    }

    /// As JSON: `{"cursors": [...], "delivered": null | {...}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "cursors": self.cursors.iter().map(cursor_json).collect::<Vec<_>>(),
            "delivered": self.delivered.as_ref().map(|d| json!({
                "relid": d.relid,
                "nonce": d.nonce,
                "snapshot": d.snapshot.to_string(),
                "before": view_json(&d.before),
            })),
        })
    }

    /// Reads what [`ChunkState::to_json`] wrote.
    pub fn from_json(v: &Value) -> Result<ChunkState, String> {
        let o = object(v, &["cursors", "delivered"], "chunks")?;
        let cursors = match o.get("cursors") {
            Some(Value::Array(list)) => list
                .iter()
                .map(cursor_from_json)
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(format!("chunks: {v} has no cursors")),
        };
        let delivered = match o.get("delivered") {
            None | Some(Value::Null) => None,
            Some(d) => {
                let bad = || format!("chunks: {d} is not a delivered chunk");
                let o = object(
                    d,
                    &["relid", "nonce", "snapshot", "before"],
                    "delivered chunk",
                )?;
                Some(DeliveredChunk {
                    relid: oid(o.get("relid")).ok_or_else(bad)?,
                    nonce: o
                        .get("nonce")
                        .and_then(Value::as_str)
                        .ok_or_else(bad)?
                        .to_string(),
                    snapshot: o
                        .get("snapshot")
                        .and_then(Value::as_str)
                        .and_then(TxnSnapshot::parse)
                        .ok_or_else(bad)?,
                    before: view_from_json(o.get("before").ok_or_else(bad)?)?,
                })
            }
        };
        Ok(ChunkState { cursors, delivered })
    }

    /// Reads the cursors of a format 4 state file (`after` and `done` only).
    pub fn from_format_4(list: &[Value]) -> Result<ChunkState, String> {
        let cursors = list
            .iter()
            .map(|v| {
                let bad = || format!("chunks: {v} is not a chunk cursor");
                let o = object(v, &["relid", "after", "done"], "chunk cursor")?;
                Ok(ChunkCursor {
                    relid: oid(o.get("relid")).ok_or_else(bad)?,
                    view: View {
                        after: after_from_json(o.get("after"))?,
                        pending: Vec::new(),
                    },
                    unconfirmed: Vec::new(),
                    done: o.get("done").and_then(Value::as_bool).ok_or_else(bad)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(ChunkState {
            cursors,
            delivered: None,
        })
    }
}

/// `v` as an object holding only `known` members.
fn object<'a>(v: &'a Value, known: &[&str], what: &str) -> Result<&'a Map<String, Value>, String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("chunks: {v} is not a {what}"))?;
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("chunks: unknown member {k:?} in a {what}"));
    }
    Ok(o)
}

fn oid(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .and_then(|r| u32::try_from(r).ok())
}

fn after_json(a: &After) -> Value {
    json!({
        "identity": to_hex(&a.identity),
        "key": a.key.iter().map(|k| k.as_ref().map(|k| to_hex(k))).collect::<Vec<_>>(),
    })
}

fn after_from_json(v: Option<&Value>) -> Result<Option<After>, String> {
    let a = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(a) => a,
    };
    let bad = || format!("chunks: {a} is not a row of a cursor");
    let o = object(a, &["identity", "key"], "row of a cursor")?;
    let identity = o
        .get("identity")
        .and_then(Value::as_str)
        .and_then(from_hex)
        .ok_or_else(bad)?;
    let key = o
        .get("key")
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|k| match k {
            Value::Null => Ok(None),
            Value::String(h) => from_hex(h)
                .map(|b| Some(bytes::Bytes::from(b)))
                .ok_or_else(bad),
            _ => Err(bad()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(After { identity, key }))
}

fn view_json(v: &View) -> Value {
    json!({
        "after": v.after.as_ref().map(after_json),
        "pending": v.pending.iter().map(after_json).collect::<Vec<_>>(),
    })
}

fn view_from_json(v: &Value) -> Result<View, String> {
    let o = object(v, &["after", "pending"], "view")?;
    let pending = match o.get("pending") {
        Some(Value::Array(list)) => list
            .iter()
            .map(|p| after_from_json(Some(p))?.ok_or_else(|| format!("chunks: {p} is no key")))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(format!("chunks: {v} has no pending keys")),
    };
    Ok(View {
        after: after_from_json(o.get("after"))?,
        pending,
    })
}

fn cursor_json(c: &ChunkCursor) -> Value {
    json!({
        "relid": c.relid,
        "view": view_json(&c.view),
        "unconfirmed": c.unconfirmed,
        "done": c.done,
    })
}

fn cursor_from_json(v: &Value) -> Result<ChunkCursor, String> {
    let bad = || format!("chunks: {v} is not a chunk cursor");
    let o = object(v, &["relid", "view", "unconfirmed", "done"], "chunk cursor")?;
    let unconfirmed = o
        .get("unconfirmed")
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|x| oid(Some(x)).ok_or_else(bad))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ChunkCursor {
        relid: oid(o.get("relid")).ok_or_else(bad)?,
        view: view_from_json(o.get("view").ok_or_else(bad)?)?,
        unconfirmed,
        done: o.get("done").and_then(Value::as_bool).ok_or_else(bad)?,
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn chunk_state_round_trips_and_refuses_what_it_did_not_write() {
        let row = |b: u8| After {
            identity: vec![2, b, 0xff],
            key: vec![Some(Bytes::from(vec![0, 0, 0, b])), None],
        };
        let state = ChunkState {
            cursors: vec![
                ChunkCursor {
                    relid: 16385,
                    view: View {
                        after: Some(row(9)),
                        pending: vec![row(3)],
                    },
                    unconfirmed: vec![4_294_967_295, 7],
                    done: false,
                },
                ChunkCursor {
                    done: true,
                    ..ChunkCursor::from_start(16386)
                },
            ],
            delivered: Some(DeliveredChunk {
                relid: 16385,
                nonce: "00ff".into(),
                snapshot: TxnSnapshot::parse("100:110:101,103").unwrap(),
                before: View {
                    after: Some(row(4)),
                    pending: vec![],
                },
            }),
        };
        let json = state.to_json();
        assert_eq!(ChunkState::from_json(&json), Ok(state));
        for bad in [
            json!([]),
            json!({"cursors": [], "extra": 1}),
            json!({"cursors": [{"relid": 1, "view": {"after": null, "pending": []}, "done": false}]}),
            json!({"cursors": [], "delivered": {"relid": 1, "nonce": "n", "snapshot": "9:1:", "before": {"after": null, "pending": []}}}),
            json!({"cursors": [{"relid": 1, "view": {"after": {"identity": "0g", "key": []}, "pending": []}, "unconfirmed": [], "done": false}]}),
        ] {
            assert!(ChunkState::from_json(&bad).is_err(), "{bad}");
        }
    }
}
