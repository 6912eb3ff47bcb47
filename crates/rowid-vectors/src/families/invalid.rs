//! `invalid.json`: bytes the strict decoder must reject (wire-format §8).

use rowid_codec::limits::MAX_FIELDS;
use rowid_testkit::hex::from_hex;

use super::build::bad;
use crate::{Family, InvalidCase};

pub(super) fn invalid() -> Family {
    let too_many = format!("0201{:08x}ff", MAX_FIELDS + 1);
    let long_label = format!("0201000000011a01{}0000ff", "61".repeat(64));
    let mut cases = vec![
        bad("empty input", "", "Truncated"),
        bad("version byte 01", "01 01 00000000 ff", "UnknownVersion"),
        bad("domain 00", "02 00 00000000 ff", "UnknownDomain"),
        bad("domain 08", "02 08 00000000 ff", "UnknownDomain"),
        bad("header truncated", "02 01 0000", "Truncated"),
        bad(
            "declares one field, holds none",
            "02 01 00000001 ff",
            "FieldCountMismatch",
        ),
        bad(
            "reserved tag 1b",
            "02 01 00000001 1b 00 ff",
            "UnknownTypeTag",
        ),
        bad(
            "reserved structural tag 46 (41-45 are assigned since the structural families)",
            "02 01 00000001 46 00 ff",
            "UnknownTypeTag",
        ),
        bad(
            "state byte 02",
            "02 01 00000001 03 02 ff",
            "InvalidNullState",
        ),
        bad("missing TUPLE_END", "02 01 00000000 00", "MissingTupleEnd"),
        bad("no TUPLE_END at all", "02 01 00000000", "Truncated"),
        bad(
            "byte after TUPLE_END",
            "02 01 00000000 ff 00",
            "TrailingBytes",
        ),
        bad(
            "int4 payload truncated",
            "02 01 00000001 03 01 8000 ff",
            "Truncated",
        ),
        bad("bool byte 02", "02 01 00000001 01 01 02 ff", "NonCanonical"),
        bad(
            "float8 -0 image",
            "02 01 00000001 07 01 7fffffffffffffff ff",
            "NonCanonical",
        ),
        bad(
            "float8 NaN with payload",
            "02 01 00000001 07 01 fff8000000000001 ff",
            "NonCanonical",
        ),
        bad(
            "float8 negative NaN image",
            "02 01 00000001 07 01 0007ffffffffffff ff",
            "NonCanonical",
        ),
        bad(
            "float4 -0 image",
            "02 01 00000001 06 01 7fffffff ff",
            "NonCanonical",
        ),
        bad(
            "numeric unknown class",
            "02 01 00000001 08 01 06 ff",
            "NonCanonical",
        ),
        bad(
            "numeric leading zero group",
            "02 01 00000001 08 01 03 8000 00ff00ff 00ff01 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric trailing zero group",
            "02 01 00000001 08 01 03 8000 00ff01 00ff00ff 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric group 10000",
            "02 01 00000001 08 01 03 8000 2710 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric odd digit bytes",
            "02 01 00000001 08 01 03 8000 01 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric positive without digits",
            "02 01 00000001 08 01 03 8000 0000 ff",
            "NonCanonical",
        ),
        bad(
            "text with escaped NUL",
            "02 01 00000001 09 01 61 00ff 0000 ff",
            "NonCanonical",
        ),
        bad(
            "bad escape 00 01",
            "02 01 00000001 09 01 61 0001 0000 ff",
            "InvalidEscape",
        ),
        bad(
            "unterminated text",
            "02 01 00000001 09 01 61 62",
            "Truncated",
        ),
        bad(
            "bpchar with trailing space",
            "02 01 00000001 0b 01 61 20 0000 ff",
            "NonCanonical",
        ),
        bad(
            "time past 24:00",
            "02 01 00000001 0f 01 000000141dd76001 ff",
            "NonCanonical",
        ),
        bad(
            "timetz zone 57600",
            "02 01 00000001 12 01 8000000000000000 8000e100 ff",
            "NonCanonical",
        ),
        bad(
            "timetz local time negative",
            "02 01 00000001 12 01 7fffffffffffffff 80000000 ff",
            "NonCanonical",
        ),
        bad(
            "interval above the largest comparison value",
            "02 01 00000001 13 01 ffffffffffffffffffffffffffffffff ff",
            "NonCanonical",
        ),
        bad(
            "inet family 04",
            "02 01 00000001 14 01 04 00000000 00 00000000 ff",
            "NonCanonical",
        ),
        bad(
            "inet prefix 33",
            "02 01 00000001 14 01 02 c0a80105 21 c0a80105 ff",
            "NonCanonical",
        ),
        bad(
            "inet network part not masked",
            "02 01 00000001 14 01 02 c0a80105 18 c0a80105 ff",
            "NonCanonical",
        ),
        bad(
            "cidr with host bits",
            "02 01 00000001 15 01 02 0a000000 08 0a000001 ff",
            "NonCanonical",
        ),
        bad(
            "bit pad bits set",
            "02 01 00000001 18 01 a1 0000 00000003 ff",
            "NonCanonical",
        ),
        bad(
            "bit byte count mismatch",
            "02 01 00000001 18 01 a0 0000 00000009 ff",
            "NonCanonical",
        ),
        bad(
            "child identity with bad version",
            "02 04 00000001 40 01 01 01 00ff00ff00ff00ff ff 0000 ff",
            "UnknownVersion",
        ),
        bad(
            "child identity with trailing byte",
            "02 04 00000001 40 01 02 01 00ff00ff00ff00ff ff 01 0000 ff",
            "TrailingBytes",
        ),
        bad(
            "child identity unterminated",
            "02 04 00000001 40 01 02 01 00ff00ff00ff00ff ff",
            "Truncated",
        ),
    ];
    cases.push(bad(
        "field count above MAX_FIELDS",
        &too_many,
        "LimitExceeded",
    ));
    cases.push(bad(
        "enum label longer than 63 bytes",
        &long_label,
        "LimitExceeded",
    ));
    cases.push(deep_nesting());
    Family {
        file: "invalid.json",
        spec: "wire-format.md §7, §8",
        invalid: cases,
        ..Family::default()
    }
}

/// 33 nested child identities: one more than `MAX_DEPTH` allows. Built by escaping by hand so
/// the encoder (which refuses it) is not involved.
fn deep_nesting() -> InvalidCase {
    let mut id = from_hex("02 01 00000000 ff").unwrap_or_default();
    for _ in 0..32 {
        let mut outer = from_hex("02 04 00000001 40 01").unwrap_or_default();
        for &b in &id {
            if b == 0 {
                outer.extend_from_slice(&[0x00, 0xFF]);
            } else {
                outer.push(b);
            }
        }
        outer.extend_from_slice(&[0x00, 0x00, 0xFF]);
        id = outer;
    }
    InvalidCase {
        comment: "nesting depth 33 exceeds MAX_DEPTH".to_string(),
        bytes: id,
        error: "LimitExceeded",
        flags: vec!["limit"],
    }
}
