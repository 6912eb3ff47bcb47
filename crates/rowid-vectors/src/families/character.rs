//! `character.json`: wire-format §5.6 (text, varchar), §5.7 (bpchar), §5.18 (enum).

use rowid_codec::{OwnedValue, TypeTag};

use super::build::{field, one};
use crate::Family;

pub(super) fn character() -> Family {
    let t = |tag: TypeTag, s: &str, sql: &str, comment: &str, flags: &[&'static str]| {
        let bytes = s.as_bytes().to_vec();
        let value = match tag {
            TypeTag::Text => OwnedValue::Text(bytes),
            TypeTag::Varchar => OwnedValue::Varchar(bytes),
            TypeTag::Bpchar => OwnedValue::Bpchar(bytes),
            _ => OwnedValue::Enum(bytes),
        };
        one(comment, field(tag, value, &format!("{s:?}"), sql), flags)
    };
    Family {
        file: "character.json",
        spec: "wire-format.md §5.6, §5.7, §5.18",
        setup: vec!["CREATE TYPE rowid_vec_mood AS ENUM ('sad', 'ok', 'happy')"],
        valid: vec![
            t(TypeTag::Text, "", "''::text", "empty text", &["edge"]),
            t(TypeTag::Text, "ab", "'ab'::text", "text", &[]),
            t(
                TypeTag::Text,
                "ab ",
                "'ab '::text",
                "text keeps trailing spaces",
                &[],
            ),
            t(TypeTag::Text, "é", "'é'::text", "UTF-8 bytes", &[]),
            t(
                TypeTag::Varchar,
                "abc",
                "'abc'::varchar(10)",
                "varchar",
                &[],
            ),
            t(
                TypeTag::Bpchar,
                "ab  ",
                "'ab'::char(4)",
                "bpchar pad removed",
                &["normalisation"],
            ),
            t(
                TypeTag::Bpchar,
                "ab",
                "'ab'::bpchar",
                "bpchar without pad: same bytes",
                &["normalisation"],
            ),
            t(
                TypeTag::Bpchar,
                "   ",
                "''::char(3)",
                "all-space bpchar is empty",
                &["normalisation", "edge"],
            ),
            t(
                TypeTag::Enum,
                "sad",
                "'sad'::rowid_vec_mood",
                "enum label",
                &[],
            ),
            t(
                TypeTag::Enum,
                "happy",
                "'happy'::rowid_vec_mood",
                "enum label (not ordered)",
                &[],
            ),
        ],
        ..Family::default()
    }
}
