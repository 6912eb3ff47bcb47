//! The vector cases, one module per file under `vectors/` (one type family each). Append
//! new cases at the end of a family so existing ids stay stable.

mod array;
mod bits;
mod bool;
mod build;
mod bytes;
mod character;
mod composite;
mod datetime;
mod floats;
mod integers;
mod invalid;
mod jsonb;
mod network;
mod numeric;
mod pg_trickle;
mod probe;
mod range;
mod structure;

use crate::Family;

/// Every family, in file-name order.
pub fn families() -> Vec<Family> {
    let mut all = vec![
        bool::bool_family(),
        integers::integers(),
        floats::floats(),
        numeric::numerics(),
        character::character(),
        bytes::bytea_uuid(),
        datetime::datetime(),
        network::network(),
        bits::bits(),
        structure::structure(),
        array::arrays(),
        range::ranges(),
        jsonb::jsonb(),
        composite::composites(),
        invalid::invalid(),
        pg_trickle::pg_trickle(),
        probe::probes(),
    ];
    all.sort_by_key(|f| f.file);
    all
}
