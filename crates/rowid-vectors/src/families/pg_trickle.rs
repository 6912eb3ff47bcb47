//! `pg-trickle.json`: pg_trickle's shipped V2 (spec/wire-format.md Appendix A). Its published
//! check vectors are valid identities here where the bytes agree; its bytes for the families
//! that differ, and its extra domain, are rejected, so the two formats are never read as one.

use rowid_codec::{OwnedValue, TypeTag};

use super::build::{bad, field, null, one};
use crate::{Family, InvalidCase};

/// A must-fail case that reproduces pg_trickle's bytes for a value.
fn theirs(comment: &str, hex: &str, error: &'static str) -> InvalidCase {
    InvalidCase {
        flags: vec!["pg-trickle"],
        ..bad(comment, hex, error)
    }
}

pub(super) fn pg_trickle() -> Family {
    let flags = &["pg-trickle"];
    Family {
        file: "pg-trickle.json",
        spec: "wire-format.md Appendix A",
        valid: vec![
            one(
                "pg_trickle check vector 1: int4 1",
                field(TypeTag::Int4, OwnedValue::Int4(1), "1", "(1)::int4"),
                flags,
            ),
            one(
                "pg_trickle check vector 2: int4 NULL",
                null(TypeTag::Int4, "int4"),
                flags,
            ),
            one(
                "pg_trickle check vector 3: text 'a'",
                field(
                    TypeTag::Text,
                    OwnedValue::Text(b"a".to_vec()),
                    "\"a\"",
                    "'a'::text",
                ),
                flags,
            ),
        ],
        invalid: vec![
            theirs(
                "pg_trickle check vector 4: text holding a NUL byte (no PostgreSQL text can)",
                "02 01 00000001 09 01 61 00ff 62 0000 ff",
                "NonCanonical",
            ),
            theirs(
                "pg_trickle's numeric 1.5: exponent of the last digit, digit count, ASCII digits",
                "02 01 00000001 08 01 03 7fffffff 00000002 3135 ff",
                "NonCanonical",
            ),
            theirs(
                "pg_trickle's inet 192.168.1.5/24: family, prefix length, address",
                "02 01 00000001 14 01 02 18 c0a80105 ff",
                "Truncated",
            ),
            theirs(
                "pg_trickle's varbit B'101': bit length before the escaped bits",
                "02 01 00000001 19 01 00000003 a0 0000 ff",
                "NonCanonical",
            ),
            theirs(
                "pg_trickle's domain 08 (MDM_SOURCE_KEY_V1) is not assigned here",
                "02 08 00000001 03 01 80000001 ff",
                "UnknownDomain",
            ),
        ],
        ..Family::default()
    }
}
