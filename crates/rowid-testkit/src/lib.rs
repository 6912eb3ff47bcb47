//! # rowid-testkit: what every test of the workspace shares
//!
//! Not published; a dev-dependency of the crates and a dependency of `xtask`. It owns:
//!
//! - [`decoders`]: the codec's three decoders judged against each other;
//! - [`hex`]: lower-case hex without separators, and back;
//! - [`sql`]: SQL string quoting, and SQL literals of codec values (for servers that judge
//!   the same pairs the model judges);
//! - [`numeric`]: decimal text to a codec numeric;
//! - [`psql`]: a psql runner, for a cluster given by its connection arguments;
//! - [`session`]: a psql session kept open across a test's steps;
//! - [`cluster`]: throwaway PostgreSQL clusters on a unix socket;
//! - [`rng`]: a small deterministic generator, so generated cases reproduce;
//! - `model` (feature `model`): PostgreSQL's equality and B-tree comparators restated
//!   independently of the encoder, with proptest generators of scalar values.

// Test support: a broken fixture is a programming error, reported loudly.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

pub mod cluster;
pub mod decoders;
pub mod hex;
#[cfg(feature = "model")]
pub mod model;
pub mod numeric;
pub mod psql;
pub mod rng;
pub mod session;
pub mod sql;
