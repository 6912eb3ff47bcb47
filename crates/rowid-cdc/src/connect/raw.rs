//! Values as their binary send forms, untouched, in both directions: [`SendForm`] writes the
//! bytes as a parameter or a binary `COPY` field of any type (the server reads them with the
//! column's own receive function); [`RawCell`] reads a result column of any type as the bytes
//! the server sent (its send function's output: what pgoutput's binary tuples carry).

use bytes::{Bytes, BytesMut};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

/// A value's binary send form, written as it is (`None`: SQL NULL).
#[derive(Debug)]
pub struct SendForm<'a>(pub Option<&'a [u8]>);

impl ToSql for SendForm<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A result column's binary form as the server sent it (`None`: SQL NULL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCell(pub Option<Bytes>);

impl<'a> FromSql<'a> for RawCell {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawCell(Some(Bytes::copy_from_slice(raw))))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawCell(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}
