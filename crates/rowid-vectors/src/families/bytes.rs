//! `bytea-uuid-mac.json`: wire-format §5.8 (bytea), §5.9 (uuid), §5.16 (macaddr).

use rowid_codec::{OwnedValue, TypeTag};
use rowid_testkit::hex::from_hex;

use super::build::{field, one};
use crate::Family;

pub(super) fn bytea_uuid() -> Family {
    let uuid = |hex: &str| -> [u8; 16] {
        from_hex(hex)
            .and_then(|v| v.try_into().ok())
            .unwrap_or([0; 16])
    };
    Family {
        file: "bytea-uuid-mac.json",
        spec: "wire-format.md §5.8, §5.9, §5.16",
        valid: vec![
            one(
                "empty bytea",
                field(
                    TypeTag::Bytea,
                    OwnedValue::Bytea(vec![]),
                    "\\x",
                    "'\\x'::bytea",
                ),
                &["edge"],
            ),
            one(
                "zero bytes are escaped",
                field(
                    TypeTag::Bytea,
                    OwnedValue::Bytea(vec![0, 0xFF, 0]),
                    "\\x00ff00",
                    "'\\x00ff00'::bytea",
                ),
                &["escape"],
            ),
            one(
                "single zero byte",
                field(
                    TypeTag::Bytea,
                    OwnedValue::Bytea(vec![0]),
                    "\\x00",
                    "'\\x00'::bytea",
                ),
                &["escape"],
            ),
            one(
                "uuid",
                field(
                    TypeTag::Uuid,
                    OwnedValue::Uuid(uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11")),
                    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
                ),
                &[],
            ),
            one(
                "nil uuid",
                field(
                    TypeTag::Uuid,
                    OwnedValue::Uuid([0; 16]),
                    "00000000-0000-0000-0000-000000000000",
                    "'00000000-0000-0000-0000-000000000000'::uuid",
                ),
                &["edge"],
            ),
            one(
                "macaddr",
                field(
                    TypeTag::Macaddr,
                    OwnedValue::Macaddr([8, 0, 0x2b, 1, 2, 3]),
                    "08:00:2b:01:02:03",
                    "'08:00:2b:01:02:03'::macaddr",
                ),
                &[],
            ),
            one(
                "macaddr8",
                field(
                    TypeTag::Macaddr8,
                    OwnedValue::Macaddr8([8, 0, 0x2b, 1, 2, 3, 4, 5]),
                    "08:00:2b:01:02:03:04:05",
                    "'08:00:2b:01:02:03:04:05'::macaddr8",
                ),
                &[],
            ),
        ],
        ..Family::default()
    }
}
