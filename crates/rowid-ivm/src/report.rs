//! What a failed refresh leaves where the stream table's owner reads it (its catalog row, its
//! refresh history, the server log), spec/stream-tables.md §10.5, proposal §11.1: the
//! SQLSTATE and the server's message, with every value the message quotes replaced by its
//! length and fingerprint.
//!
//! PostgreSQL's messages quote values the statement met (`invalid input syntax for type
//! bigint: "4111 1111 1111 1111"`) the way they quote names (`column "n" does not exist`),
//! so a quoted span is kept only when the caller knows it as a name (a column, table,
//! schema, type or constraint of the stream table and its sources); any other is written as
//! `"(len=19 fp=1a2b3c4d)"`, the fingerprint the codec gives identities
//! ([`rowid_codec::probe::Fingerprint`]). A value that happens to equal a name stays: it
//! says nothing the catalogs do not.

use rowid_codec::probe::Fingerprint;

/// `message` with every span quoted in `"` or `'` that `is_name` does not accept replaced by
/// `(len=N fp=F)`, F the value's fingerprint in 8 hex digits. An opening quote without its
/// closing one quotes the rest.
pub fn redact(message: &str, is_name: impl Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(['"', '\'']) {
        let quote = rest[open..].chars().next().unwrap_or('"');
        out.push_str(&rest[..=open]);
        let inside = &rest[open + 1..];
        let (span, after, closed) = match inside.find(quote) {
            Some(close) => (&inside[..close], &inside[close + 1..], true),
            None => (inside, "", false),
        };
        if is_name(span) {
            out.push_str(span);
        } else {
            out.push_str(&format!("({})", Fingerprint::of(span.as_bytes())));
        }
        if closed {
            out.push(quote);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// What a failed refresh records: `message` redacted ([`redact`]) and its SQLSTATE.
pub fn refresh_failure(sqlstate: &str, message: &str, is_name: impl Fn(&str) -> bool) -> String {
    format!("{} (SQLSTATE {sqlstate})", redact(message, is_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &str) -> bool {
        ["n", "cards", "public"].contains(&n)
    }

    #[test]
    fn values_become_length_and_fingerprint_names_stay() {
        let card = "4111 1111 1111 1111";
        let got = refresh_failure(
            "22P02",
            &format!("invalid input syntax for type bigint: \"{card}\""),
            names,
        );
        assert!(!got.contains("4111"), "{got}");
        let fp = Fingerprint::of(card.as_bytes()).to_string();
        assert_eq!(
            got,
            format!("invalid input syntax for type bigint: \"({fp})\" (SQLSTATE 22P02)")
        );
        assert!(fp.starts_with("len=19 fp="), "{fp}");
        assert_eq!(
            redact("column \"n\" of relation \"cards\" does not exist", names),
            "column \"n\" of relation \"cards\" does not exist"
        );
        // Single quotes, several spans, a span left open.
        let got = redact("value 'x' and \"n\" and \"secret", names);
        assert!(got.starts_with("value '(len=1 fp="), "{got}");
        assert!(got.contains("' and \"n\" and \"(len=6 fp="), "{got}");
        assert!(!got.contains("secret"), "{got}");
        assert_eq!(redact("division by zero", names), "division by zero");
    }
}
