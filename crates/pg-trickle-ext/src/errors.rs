//! Every error that reaches SQL, raised with its SQLSTATE: the one place `ereport!` is called.
//! Messages name the function, and where there is one the field (position and name), its
//! type and the property that failed; an identity is never printed.

use pgrx::prelude::*;
use rowid_codec::{Error, TypeTag};
use rowid_registry::Rejection;

/// Raises a codec error of `function` as an SQL error naming the field: the one the error
/// names, else `current`, the field being encoded when it happened (a resource limit inside a
/// nested value carries no field index of its own).
pub fn codec_error<'a>(
    function: &str,
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
    ereport!(ERROR, code, format!("{function}{name}: {e}"));
}

/// A datum the reader could not interpret (a corrupted or foreign value).
pub fn malformed(function: &str, name: &str, tag: TypeTag) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("{function}: field {name}: malformed {} datum", tag.name())
    );
}

/// A registry rejection (unsupported type, collation, operator class, index, ...), raised by
/// `function` with the registry's SQLSTATE (feature_not_supported or
/// invalid_parameter_value).
pub fn rejected(function: &str, r: &Rejection) -> ! {
    let code = if r.sqlstate() == "22023" {
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
    } else {
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED
    };
    ereport!(ERROR, code, format!("{function}: {r}"));
}

/// An argument value the function does not accept.
pub fn invalid_argument(function: &str, message: String) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("{function}: {message}")
    );
}

/// A NULL argument where SQL NULL has no meaning.
pub fn null_argument(function: &str, message: &str) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("{function}: {message}")
    );
}

/// Bytes that are not a Row Identity V2 where one is required.
pub fn not_an_identity(function: &str, e: &Error) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_INVALID_BINARY_REPRESENTATION,
        format!("{function}: not a Row Identity V2: {e}")
    );
}

/// A catalog query that failed (an internal error: the queries are fixed).
pub fn catalog_query(e: &pgrx::spi::SpiError) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("pg_trickle_ext: catalog query failed: {e}")
    );
}

/// A change buffer this library may not write or read (other columns, other versions).
pub fn invalid_buffer(function: &str, message: &str) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("{function}: {message}")
    );
}

/// A lock another session holds and may not hold this one up (lock_not_available).
pub fn lock_held(function: &str, message: &str) -> ! {
    ereport!(
        ERROR,
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        format!("{function}: {message}")
    );
}

/// A refusal raised with `sqlstate`: invalid_parameter_value (22023), insufficient_privilege
/// (42501), object_not_in_prerequisite_state (55000), query_canceled (57014); anything else
/// is feature_not_supported (0A000).
pub fn refused(function: &str, sqlstate: &str, message: &str) -> ! {
    let code = match sqlstate {
        "22023" => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        "42501" => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        "42P17" => PgSqlErrorCode::ERRCODE_INVALID_OBJECT_DEFINITION,
        "55000" => PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "57014" => PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
        _ => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
    };
    ereport!(ERROR, code, format!("{function}: {message}"));
}
