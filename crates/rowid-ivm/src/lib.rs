//! The operator tree of pg_trickle stream tables, and the Row Identity V2 each operator gives
//! the rows it outputs (spec/stream-tables.md). Pure Rust, tested without a server: the
//! extension reads PostgreSQL's analysis of a stream table's query into a [`plan::Plan`] and
//! asks this crate which identity each result row has and how to derive it in SQL.
//!
//! - [`plan`]: the operators (scan, filter, projection, inner join, aggregate, distinct, set
//!   operations) and their output columns;
//! - [`identity`]: each operator's identity rule (domain, fields, unique or multiset) and the
//!   `pgtrickle.encode_row_id_v2` expression that derives it;
//! - [`sql`]: the statement that computes a stream table's rows with their identities (what
//!   a FULL refresh stores).
//!
//! - [`delta`]: the one-statement DIFFERENTIAL refresh of the operators that have a delta
//!   rule, and the fill that sets a frontier;
//! - [`schedule`]: the `schedule` of a stream table read, and which stream tables a
//!   scheduler tick refreshes, in dependency order;
//! - [`report`]: what a failed refresh records, its values reduced to length and fingerprint.

#![forbid(unsafe_code)]

pub mod delta;
pub mod identity;
pub mod plan;
pub mod report;
pub mod schedule;
pub mod sql;
