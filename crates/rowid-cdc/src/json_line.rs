//! The JSON line of a change event (the format in the crate README), apart from the event's
//! data ([`crate::event`]).

use std::fmt::Write as _;

use crate::event::ChangeEvent;

/// Seconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;

/// A PostgreSQL timestamp (microseconds since 2000-01-01 UTC) as RFC 3339 in UTC with
/// microseconds, e.g. `2026-12-01T09:30:00.123456Z`.
pub fn rfc3339_utc(pg_micros: i64) -> String {
    let unix_micros = i128::from(pg_micros) + i128::from(PG_EPOCH_UNIX_SECS) * 1_000_000;
    let secs = unix_micros.div_euclid(1_000_000);
    let micros = unix_micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i128) -> (i128, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i128::from(m <= 2);
    (y, m, d)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2 + 2);
    out.push('"');
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out.push('"');
}

fn push_str(out: &mut String, s: &str) {
    // serde_json's escaping of a string into a String cannot fail.
    out.push_str(&serde_json::Value::from(s).to_string());
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
    let _ = write!(out, ",\"op\":\"{}\",\"domain\":", event.op.name());
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
    let _ = write!(out, ",\"backfilled\":{}", event.backfilled);
    if let Some(u) = &event.unidentified {
        let _ = write!(out, ",\"change\":\"{}\",\"reason\":", u.change.name());
        push_str(out, &u.reason);
    }
    out.push_str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Op, Unidentified};
    use crate::lsn::Lsn;
    use rowid_codec::Domain;

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
            domain: Some(Domain::ScanKey),
            key: vec!["id".into()],
            old_id: Some(vec![0x02, 0xff]),
            new_id: None,
            backfilled: true,
            unidentified: None,
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
        assert_eq!(v["backfilled"], true);
        assert_eq!(v["commit_time"], "2000-01-01T00:00:00.000000Z");
        assert!(v.get("reason").is_none());

        let u = ChangeEvent {
            op: Op::Unidentified,
            domain: None,
            key: vec![],
            old_id: None,
            backfilled: false,
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
}
