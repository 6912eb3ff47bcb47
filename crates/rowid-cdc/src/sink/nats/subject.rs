//! What the NATS sink writes besides the JSON line, without I/O (spec/nats.md): subjects and
//! their escaping, message ids, headers, and the slot's markers.

use crate::event::ChangeEvent;
use crate::lsn::Lsn;

/// One subject token for a name (a database, schema, table or slot name): every byte outside
/// `A-Z a-z 0-9 _ -` as `%` and two uppercase hex digits, so that no name can add a token
/// (`.`), a wildcard (`*`, `>`) or whitespace, and two names never share a token (`%` itself
/// is escaped).
pub fn token(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether `prefix` can start subjects: dot-separated non-empty tokens of printable ASCII
/// without wildcards.
pub fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>')
        })
}

/// `PREFIX.<database>.<schema>.<table>`: where a change of a table goes.
pub fn change_subject(prefix: &str, database: &str, schema: &str, table: &str) -> String {
    format!(
        "{prefix}.{}.{}.{}",
        token(database),
        token(schema),
        token(table)
    )
}

/// `PREFIX._slot.<slot>`: the slot's markers (two tokens after the prefix, so never a change
/// subject, which has three).
pub fn marker_subject(prefix: &str, slot: &str) -> String {
    format!("{prefix}._slot.{}", token(slot))
}

/// The subject filter a stream needs to hold every subject of `prefix`.
pub fn stream_filter(prefix: &str) -> String {
    format!("{prefix}.>")
}

/// A change's `Nats-Msg-Id`: the slot, the transaction's commit LSN and the change's
/// sequence in it (from 0). The same change sent again after a crash has the same id.
pub fn change_id(slot: &str, commit_lsn: Lsn, seq: u64) -> String {
    format!("{slot}:{:X}:{seq}", commit_lsn.0)
}

/// A marker's `Nats-Msg-Id`.
pub fn marker_id(slot: &str, commit_lsn: Lsn, marker: Marker) -> String {
    format!("{slot}:{:X}:{}", commit_lsn.0, marker.name())
}

/// The slot's markers around each transaction it publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Published before the transaction's first change.
    Open,
    /// Published after its last change, acknowledged after every change was.
    Commit,
}

impl Marker {
    /// `open`, `commit`.
    pub fn name(self) -> &'static str {
        match self {
            Marker::Open => "open",
            Marker::Commit => "commit",
        }
    }
}

/// A marker's body: which marker, of which transaction, and the last transaction committed
/// before it (an open marker's `after`: where delivery stands while it is open).
pub fn marker_body(marker: Marker, commit_lsn: Lsn, after: Option<Lsn>, changes: u64) -> String {
    let after = after.map_or("null".to_string(), |l| format!("\"{l}\""));
    format!(
        "{{\"marker\":\"{}\",\"commit_lsn\":\"{commit_lsn}\",\"after\":{after},\"changes\":{changes}}}",
        marker.name()
    )
}

/// A marker read back: which, its transaction, the one committed before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadMarker {
    /// Open or commit.
    pub marker: Marker,
    /// Its transaction's commit LSN.
    pub commit_lsn: Lsn,
    /// The last transaction committed before it, if any.
    pub after: Option<Lsn>,
}

/// Parses a marker's body; `None` when it is not one this sink wrote.
pub fn read_marker(body: &[u8]) -> Option<ReadMarker> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let marker = match v.get("marker")?.as_str()? {
        "open" => Marker::Open,
        "commit" => Marker::Commit,
        _ => return None,
    };
    let lsn = |s: &serde_json::Value| s.as_str().and_then(|s| s.parse::<Lsn>().ok());
    let commit_lsn = lsn(v.get("commit_lsn")?)?;
    let after = match v.get("after")? {
        serde_json::Value::Null => None,
        a => Some(lsn(a)?),
    };
    Some(ReadMarker {
        marker,
        commit_lsn,
        after,
    })
}

/// The headers of a change besides its id: `(name, value)`.
pub fn change_headers(event: &ChangeEvent) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("Rowid-Relation", event.relation.to_string()),
        ("Rowid-Op", event.op.name().to_string()),
        ("Rowid-Commit-Lsn", event.commit_lsn.to_string()),
    ];
    // The row the change is about: the new identity, or the old one for a delete.
    if let Some(id) = event.new_id.as_ref().or(event.old_id.as_ref()) {
        h.push(("Rowid-Identity", hex(id)));
    }
    h
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names become single tokens, injectively: separators, wildcards, spaces, `%` and
    /// non-ASCII escaped; two different names never give one token.
    #[test]
    fn tokens_escape_everything_a_subject_gives_meaning_to() {
        assert_eq!(token("orders_2024-x"), "orders_2024-x");
        assert_eq!(token("a.b"), "a%2Eb");
        assert_eq!(token("*"), "%2A");
        assert_eq!(token(">"), "%3E");
        assert_eq!(token("two words"), "two%20words");
        assert_eq!(token("50%"), "50%25");
        assert_eq!(token("Größe"), "Gr%C3%B6%C3%9Fe");
        assert_ne!(token("a.b"), token("a%2Eb"));
        assert_eq!(
            change_subject("cdc", "app", "public", "a.b"),
            "cdc.app.public.a%2Eb"
        );
        assert_eq!(marker_subject("cdc", "my slot"), "cdc._slot.my%20slot");
    }

    #[test]
    fn prefixes_are_plain_tokens() {
        assert!(valid_prefix("rowid_cdc"));
        assert!(valid_prefix("acme.cdc"));
        for bad in ["", ".", "a..b", "a.*", "a.>", "a b"] {
            assert!(!valid_prefix(bad), "{bad:?}");
        }
    }

    /// A marker reads back as written.
    #[test]
    fn markers_read_back() {
        let body = marker_body(Marker::Open, Lsn(0x1_0000_0010), Some(Lsn(0x20)), 0);
        assert_eq!(
            body,
            r#"{"marker":"open","commit_lsn":"1/10","after":"0/20","changes":0}"#
        );
        assert_eq!(
            read_marker(body.as_bytes()),
            Some(ReadMarker {
                marker: Marker::Open,
                commit_lsn: Lsn(0x1_0000_0010),
                after: Some(Lsn(0x20)),
            })
        );
        let body = marker_body(Marker::Commit, Lsn(0x30), None, 7);
        assert_eq!(
            read_marker(body.as_bytes()).map(|m| (m.marker, m.after)),
            Some((Marker::Commit, None))
        );
        assert_eq!(read_marker(b"{\"marker\":\"other\"}"), None);
        assert_eq!(read_marker(b"not json"), None);
        assert_eq!(change_id("s", Lsn(0x1_0000_00AB), 3), "s:1000000AB:3");
        assert_eq!(marker_id("s", Lsn(0x10), Marker::Commit), "s:10:commit");
    }
}
