//! Prints each change of a pgoutput stream with its old and new Row Identity V2, in hex.
//!
//! Connects nowhere: it reads the messages from a file of hex lines, as
//! `SELECT encode(data, 'hex') FROM pg_logical_slot_get_binary_changes('slot', NULL, NULL,
//! 'proto_version', '1', 'publication_names', 'pub', 'binary', 'true')` prints them.
//!
//! ```text
//! cargo run -p rowid-pgoutput --example identities -- changes.hex orders=id tenants=region,name
//! ```
//!
//! Each `table=col,...` names a table's identity key. For brevity the example takes column
//! type OIDs from the stream's Relation messages; a real consumer takes them from a catalog
//! snapshot, resolved by `rowid-registry` (`RelationIdentity::from_scan_key`), so that a schema
//! change in the stream is caught (see `RelationIdentity::bind`).

use std::collections::HashMap;

use bytes::Bytes;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{
    BoundIdentity, Decoder, FlagBits, IdentityColumn, Message, OldTuple, Options, Relation,
    RelationCache, RelationIdentity, Tuple, complete,
};

/// The registry's tag for a built-in type OID.
fn tag_of(type_oid: u32) -> Option<TypeTag> {
    rowid_registry::entry::builtin(type_oid).map(|e| e.tag)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let bad = || format!("not hex: {s:.40}");
    if !s.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect()
}

/// Binds `keys[table]` against a Relation message.
fn bind(relation: &Relation, key: &[String]) -> Result<BoundIdentity, String> {
    let columns = key
        .iter()
        .map(|name| {
            let col = relation
                .columns
                .iter()
                .find(|c| &c.name == name)
                .ok_or_else(|| format!("{}: no column {name}", relation.name))?;
            let tag = tag_of(col.type_oid).ok_or_else(|| {
                format!(
                    "{}.{name}: type OID {} has no registry entry",
                    relation.name, col.type_oid
                )
            })?;
            Ok(IdentityColumn::scalar(name, col.type_oid, tag))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let schema = RelationIdentity {
        domain: Domain::ScanKey,
        columns,
        key_is_primary: true,
    };
    schema
        .bind(relation, &FlagBits::default())
        .map_err(|e| e.to_string())
}

fn identity(bound: &BoundIdentity, row: &Tuple) -> String {
    let mut out = Vec::new();
    match bound.encode(row, &mut out) {
        Ok(_) => hex(&out),
        Err(e) => format!("<{e}>"),
    }
}

/// Renders every change of `lines` (hex messages) for the tables in `keys`.
fn run(lines: &str, keys: &HashMap<String, Vec<String>>) -> Result<Vec<String>, String> {
    let mut decoder = Decoder::new(Options {
        proto_version: 1,
        parallel_streaming: false,
    });
    let mut relations = RelationCache::default();
    let mut bound: HashMap<u32, BoundIdentity> = HashMap::new();
    let mut out = Vec::new();
    for line in lines.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let msg = decoder
            .decode(Bytes::from(parse_hex(line)?))
            .map_err(|e| e.to_string())?;
        let name = |relid: u32| {
            relations
                .get(relid)
                .map_or("?".into(), |r| format!("{}.{}", r.namespace, r.name))
        };
        match msg {
            Message::Relation { relation, .. } => {
                if let Some(key) = keys.get(&relation.name) {
                    bound.insert(relation.relid, bind(&relation, key)?);
                }
                relations.apply(relation);
            }
            Message::Insert { relid, new, .. } => {
                if let Some(b) = bound.get(&relid) {
                    out.push(format!("INSERT {} new={}", name(relid), identity(b, &new)));
                }
            }
            Message::Update {
                relid, old, new, ..
            } => {
                if let (Some(b), Some(rel)) = (bound.get(&relid), relations.get(relid)) {
                    let image = complete(rel, &FlagBits::default(), old.as_ref(), &new);
                    let old_id = old.map(|o| {
                        let (OldTuple::Key(t) | OldTuple::Full(t)) = o;
                        identity(b, &t)
                    });
                    out.push(format!(
                        "UPDATE {} old={} new={}",
                        name(relid),
                        old_id.unwrap_or_else(|| "(unchanged key)".into()),
                        identity(b, &image.columns)
                    ));
                }
            }
            Message::Delete { relid, old, .. } => {
                if let Some(b) = bound.get(&relid) {
                    let (OldTuple::Key(t) | OldTuple::Full(t)) = old;
                    out.push(format!("DELETE {} old={}", name(relid), identity(b, &t)));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((file, specs)) = args.split_first() else {
        eprintln!("usage: identities FILE TABLE=COL[,COL...]...");
        std::process::exit(2);
    };
    let keys: HashMap<String, Vec<String>> = specs
        .iter()
        .filter_map(|s| s.split_once('='))
        .map(|(t, cols)| (t.to_string(), cols.split(',').map(str::to_string).collect()))
        .collect();
    let result = std::fs::read_to_string(file)
        .map_err(|e| format!("{file}: {e}"))
        .and_then(|text| run(&text, &keys));
    match result {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("identities: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relation public.t (id int8 key, v text), an INSERT of id 7, an UPDATE of id 7 -> 8,
    /// laid out as pgoutput writes them.
    const STREAM: &str = "
        52000040007075626c6963007400640002016964000000001 4ffffffff0076000000001 9ffffffff
        49000040004e0002620000000800000000000000077400000001 61
        550000400 04b0002620000000800000000000000076e 4e0002620000000800000000000000087400000001 62
    ";

    #[test]
    fn prints_old_and_new_identities() {
        let stream: String = STREAM
            .split('\n')
            .map(|l| l.split_whitespace().collect::<String>())
            .collect::<Vec<_>>()
            .join("\n");
        let keys = HashMap::from([("t".to_string(), vec!["id".to_string()])]);
        let lines = run(&stream, &keys).unwrap();
        assert_eq!(
            lines,
            [
                "INSERT public.t new=02010000000104018000000000000007ff",
                "UPDATE public.t old=02010000000104018000000000000007ff new=02010000000104018000000000000008ff",
            ]
        );
    }
}
