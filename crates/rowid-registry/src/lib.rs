//! # rowid-registry: what may become a Row Identity V2, and how it is indexed
//!
//! This crate owns the rules above the bytes: each supported type's contract (order claim,
//! volatility, size rule, DDL invalidations, supported majors), resolution of a field's type
//! with rejections that name the expression, type and property, the collation policy, static
//! size bounds against PostgreSQL's B-tree limits, the storage index plan, source-key
//! eligibility and the SQL shapes of exact matching. The bytes themselves belong to
//! `rowid-codec`; catalog access belongs to the caller.
//!
//! Pure Rust, no PostgreSQL and no pgrx: catalog facts come in as plain data
//! ([`catalog`]), so every rule here is unit-testable and shared by the extension, the WAL
//! path and Rust tools. The normative description is `spec/registry.md`.
//!
//! | spec/registry.md | what | code |
//! |---|---|---|
//! | §2 | type contracts | [`entry::Entry`], [`entry::BUILTINS`], [`entry::ENUM`] |
//! | §2, §4 | resolution and rejections | [`resolve_field`], [`resolve_schema`], [`Rejection`] |
//! | §3.1 | worst-case sizes | [`size::payload_bound`], [`IdentitySchema::max_encoded_len`] |
//! | §3.2 | B-tree limits | [`size::bt_max_item_size`], [`size::max_indexable_datum`] |
//! | §3.3 | index plan | [`plan_index`] |
//! | §5 | SQL shapes | [`sql`] |
//! | §6 | SCAN_KEY eligibility | [`choose_scan_key`] |
//!
//! The change buffer (spec/change-buffer.md), one table shape for every capture path, and
//! the version check before a buffer is written or read: [`buffer`]. Replica storage
//! (spec/replica.md), tables kept equal to their sources by identity, and every statement
//! that applies changes to them: [`replica`].
//!
//! Identity schema messages (spec/identity-messages.md), the in-band form of a relation's
//! identity schema for WAL consumers: [`schema_message`]; the shape a row image reads each
//! column with (spec/row-images.md): [`image_shape`].

pub mod buffer;
pub mod catalog;
pub mod entry;
pub mod error;
pub mod image;
pub mod plan;
pub mod redefinition;
pub mod replica;
pub mod resolve;
pub mod schema_message;
pub mod size;
pub mod source_key;
pub mod sql;

pub use catalog::{
    Collation, CollationProvider, CompositeField, FieldSpec, OpClass, ServerContext, TypeRef,
};
pub use entry::{Entry, Invalidation, OrderClaim, SUPPORTED_MAJORS, SizeRule, Volatility};
pub use error::{FieldContext, Property, Rejection, Rejections};
pub use image::image_shape;
pub use plan::{IndexClass, IndexPlan, MaintenanceMode, Uniqueness, plan_for_bound, plan_index};
pub use resolve::{IdentitySchema, ResolvedField, resolve_field, resolve_schema};
pub use source_key::{
    IndexCandidate, Ineligible, KeyColumn, NoEligibleKey, ScanKey, choose_scan_key,
};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
