//! `bool.json`: wire-format §5.1.

use rowid_codec::{OwnedValue, TypeTag};

use super::build::{field, null, one};
use crate::Family;

pub(super) fn bool_family() -> Family {
    Family {
        file: "bool.json",
        spec: "wire-format.md §5.1",
        valid: vec![
            one(
                "false",
                field(TypeTag::Bool, OwnedValue::Bool(false), "false", "false"),
                &[],
            ),
            one(
                "true",
                field(TypeTag::Bool, OwnedValue::Bool(true), "true", "true"),
                &[],
            ),
            one("NULL bool", null(TypeTag::Bool, "bool"), &["null"]),
        ],
        ..Family::default()
    }
}
