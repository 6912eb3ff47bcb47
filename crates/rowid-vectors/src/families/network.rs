//! `network.json`: wire-format §5.15 (inet, cidr).

use rowid_codec::{Inet, OwnedValue, TypeTag};

use super::build::{field, one};
use crate::Family;

pub(super) fn network() -> Family {
    let inet = |n: Inet, text: &str, comment: &str| {
        one(
            comment,
            field(
                TypeTag::Inet,
                OwnedValue::Inet(n),
                text,
                &format!("'{text}'::inet"),
            ),
            &[],
        )
    };
    let cidr = |n: Inet, text: &str, comment: &str| {
        one(
            comment,
            field(
                TypeTag::Cidr,
                OwnedValue::Cidr(n),
                text,
                &format!("'{text}'::cidr"),
            ),
            &[],
        )
    };
    let mut v6 = [0u8; 16];
    v6[15] = 1;
    let mut db8 = [0u8; 16];
    db8[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    Family {
        file: "network.json",
        spec: "wire-format.md §5.15",
        valid: vec![
            inet(
                Inet::v4([192, 168, 1, 5], 24),
                "192.168.1.5/24",
                "inet keeps host bits",
            ),
            inet(
                Inet::v4([192, 168, 1, 5], 32),
                "192.168.1.5",
                "host address",
            ),
            inet(
                Inet::v4([10, 1, 0, 0], 8),
                "10.1.0.0/8",
                "short prefix sorts by network first",
            ),
            inet(Inet::v4([0, 0, 0, 0], 0), "0.0.0.0/0", "zero prefix"),
            inet(Inet::v6(v6, 128), "::1", "IPv6 sorts after IPv4"),
            cidr(Inet::v4([10, 0, 0, 0], 8), "10.0.0.0/8", "cidr"),
            cidr(
                Inet::v4([10, 0, 0, 0], 16),
                "10.0.0.0/16",
                "longer prefix, same network bits",
            ),
            cidr(Inet::v6(db8, 32), "2001:db8::/32", "cidr IPv6"),
        ],
        ..Family::default()
    }
}
