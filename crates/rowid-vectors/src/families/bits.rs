//! `bits.json`: wire-format §5.17 (bit, varbit).

use rowid_codec::{OwnedBits, OwnedValue, TypeTag};

use super::build::{field, one};
use crate::Family;

pub(super) fn bits() -> Family {
    let b = |varbit: bool, len: u32, bytes: &[u8], text: &str, sql: &str, comment: &str| {
        let v = OwnedBits {
            bit_len: len,
            bytes: bytes.to_vec(),
        };
        let (tag, value) = if varbit {
            (TypeTag::Varbit, OwnedValue::Varbit(v))
        } else {
            (TypeTag::Bit, OwnedValue::Bit(v))
        };
        one(comment, field(tag, value, text, sql), &[])
    };
    Family {
        file: "bits.json",
        spec: "wire-format.md §5.17",
        valid: vec![
            b(false, 3, &[0xA0], "101", "B'101'::bit(3)", "bit(3)"),
            b(true, 0, &[], "", "B''::varbit", "empty varbit"),
            b(
                true,
                1,
                &[0x80],
                "1",
                "B'1'::varbit",
                "B'1' < B'10' (same byte, shorter)",
            ),
            b(true, 2, &[0x80], "10", "B'10'::varbit", "B'10'"),
            b(
                true,
                8,
                &[0x00],
                "00000000",
                "B'00000000'::varbit",
                "zero byte escaped",
            ),
            b(
                true,
                9,
                &[0xFF, 0x80],
                "111111111",
                "B'111111111'::varbit",
                "two bytes",
            ),
        ],
        ..Family::default()
    }
}
