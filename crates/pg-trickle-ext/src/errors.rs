//! Codec errors to `ereport`: the one place errors cross into SQL.

use pgrx::prelude::*;
use rowid_codec::{Error, TypeTag};

/// Raises a codec error as an SQL error naming the field: the one the error names, else
/// `current`, the field being encoded when it happened (a resource limit inside a nested
/// value carries no field index of its own).
pub fn codec_error<'a>(
    e: &Error,
    current: Option<usize>,
    field_name: impl Fn(usize) -> Option<&'a str>,
) -> ! {
    let (code, field) = match e {
        Error::LimitExceeded { .. } => (PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED, None),
        Error::InvalidValue { field, .. } => (
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            Some(*field as usize),
        ),
        _ => (PgSqlErrorCode::ERRCODE_DATA_EXCEPTION, None),
    };
    let name = field
        .or(current)
        .and_then(&field_name)
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    ereport!(
        ERROR,
        code,
        format!("pgtrickle.encode_row_id_v2{name}: {e}")
    );
}

/// Raises an error for a datum the reader could not interpret.
pub fn malformed(name: &str, tag: TypeTag) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!(
            "pgtrickle.encode_row_id_v2: field {name}: malformed {} datum",
            tag.name()
        )
    );
}
