//! Connecting to PostgreSQL, for the source and for the PostgreSQL sink alike:
//!
//! - [`conninfo`]: libpq connection strings and URIs, `PGPASSWORD`, the password file;
//! - [`tls`]: `sslmode` and `sslrootcert` as libpq reads them;
//! - [`net`]: SQL sessions that refuse clear-text passwords without TLS, and what they saw of
//!   the server (TLS, the authentication method, the certificate);
//! - [`raw`]: values as their binary send forms, in parameters, results and binary `COPY`.

pub mod conninfo;
pub mod net;
pub mod raw;
pub mod tls;
