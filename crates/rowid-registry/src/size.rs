//! Static worst-case sizes of encoded fields and identities, and the B-tree limits they are
//! compared with (spec/registry.md §3).

use rowid_codec::limits::MAX_ENUM_LABEL_LEN;

use crate::entry::SizeRule;

/// Bytes of an identity outside its fields: version, domain, field count, `TUPLE_END`.
pub const IDENTITY_OVERHEAD: usize = 1 + 1 + 4 + 1;
/// Bytes of a field outside its payload: type tag and NULL/value state.
pub const FIELD_OVERHEAD: usize = 2;
/// The escape-and-terminate terminator.
const TERMINATOR: usize = 2;
/// `VARHDRSZ`: a varlena's 4-byte header (a size proof must not rely on the 1-byte short
/// header, which applies only to short values).
pub const VARHDRSZ: usize = 4;
/// `sizeof(IndexTupleData)`: item pointer (6) + `t_info` (2).
pub const INDEX_TUPLE_HEADER: usize = 8;
/// `MAXIMUM_ALIGNOF` on every platform PostgreSQL supports in practice (8).
pub const MAXALIGN: usize = 8;

const fn maxalign(n: usize) -> usize {
    n.div_ceil(MAXALIGN) * MAXALIGN
}

const fn maxalign_down(n: usize) -> usize {
    n / MAXALIGN * MAXALIGN
}

/// True for the block sizes PostgreSQL can be built with (1 kB to 32 kB, powers of two).
pub const fn valid_block_size(block_size: u32) -> bool {
    block_size.is_power_of_two() && block_size >= 1024 && block_size <= 32_768
}

/// PostgreSQL's `BTMaxItemSize` (nbtree.h, PostgreSQL 13 and later): the largest B-tree
/// index tuple, header included, leaving room for the heap-TID tiebreaker that suffix
/// truncation may append:
///
/// `MAXALIGN_DOWN((BLCKSZ - MAXALIGN(SizeOfPageHeaderData + 3 * sizeof(ItemIdData))
///   - MAXALIGN(sizeof(BTPageOpaqueData))) / 3) - MAXALIGN(sizeof(ItemPointerData))`
///
/// with `SizeOfPageHeaderData = 24`, `sizeof(ItemIdData) = 4`,
/// `sizeof(BTPageOpaqueData) = 16`, `sizeof(ItemPointerData) = 6`: 2704 at 8 kB.
pub const fn bt_max_item_size(block_size: u32) -> usize {
    let page = block_size as usize;
    maxalign_down((page - maxalign(24 + 3 * 4) - maxalign(16)) / 3) - maxalign(6)
}

/// The largest identity (bytes of the `bytea` value) whose single-column index tuple fits
/// `bt_max_item_size`: the tuple is `MAXALIGN(8 + 4 + len)` with no null bitmap (the column
/// is NOT NULL) and no reliance on compression. 2692 at 8 kB.
pub const fn max_indexable_datum(block_size: u32) -> usize {
    let limit = bt_max_item_size(block_size);
    // limit is a multiple of MAXALIGN, so MAXALIGN(h + len) <= limit iff h + len <= limit.
    limit - INDEX_TUPLE_HEADER - VARHDRSZ
}

/// Decodes `numeric(p, s)` typmods: `((p << 16) | (s & 0x7FF)) + VARHDRSZ`. Returns the
/// precision, or `None` for an unconstrained or malformed typmod.
pub fn numeric_precision(typmod: i32) -> Option<u32> {
    let t = typmod.checked_sub(VARHDRSZ as i32)?;
    if t < 0 {
        return None;
    }
    let precision = (t as u32 >> 16) & 0xFFFF;
    (1..=1000).contains(&precision).then_some(precision)
}

/// Worst-case payload of a field under `rule` (without the 2-byte field overhead); `None`
/// means unbounded. Uncertain typmods count as unbounded.
pub fn payload_bound(rule: SizeRule, typmod: i32, max_char_bytes: u32) -> Option<usize> {
    match rule {
        SizeRule::Fixed(n) => Some(n),
        SizeRule::Unbounded | SizeRule::Structural => None,
        SizeRule::EnumLabel => Some(MAX_ENUM_LABEL_LEN + TERMINATOR),
        SizeRule::NumericTypmod => {
            // p significant digits, aligned anywhere against base-10000 groups, touch at
            // most (p + 6) / 4 groups; each escaped group takes at most 4 bytes (a zero
            // group is 00 FF 00 FF). Class 1 + weight 2 + digits + terminator.
            let p = numeric_precision(typmod)? as usize;
            Some(1 + 2 + 4 * ((p + 6) / 4) + TERMINATOR)
        }
        SizeRule::CharTypmod => {
            // varchar(n)/char(n): typmod = n + VARHDRSZ; characters never contain 0x00, so
            // nothing is escaped.
            let n = usize::try_from(typmod.checked_sub(VARHDRSZ as i32)?).ok()?;
            if n == 0 {
                return None;
            }
            Some(n * max_char_bytes as usize + TERMINATOR)
        }
        SizeRule::BitTypmod => {
            // bit(n)/varbit(n): typmod = n; packed bytes escaped (at worst doubled), then the
            // terminator and the 4-byte length.
            let n = usize::try_from(typmod).ok().filter(|&n| n > 0)?;
            Some(2 * n.div_ceil(8) + TERMINATOR + 4)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btree_limits_match_postgresql() {
        assert_eq!(bt_max_item_size(8192), 2704);
        assert_eq!(max_indexable_datum(8192), 2692);
        assert_eq!(bt_max_item_size(32_768), 10_896);
        assert_eq!(bt_max_item_size(1024), 312);
        assert!(valid_block_size(8192) && !valid_block_size(8000) && !valid_block_size(65_536));
    }

    #[test]
    fn typmods() {
        // numeric(10, 2): ((10 << 16) | 2) + 4
        assert_eq!(numeric_precision((10 << 16 | 2) + 4), Some(10));
        assert_eq!(numeric_precision(-1), None);
        // numeric(5, -3) (PostgreSQL 15+): scale stored in 11 bits.
        assert_eq!(numeric_precision((5 << 16 | (-3i32 & 0x7FF)) + 4), Some(5));
        assert_eq!(payload_bound(SizeRule::CharTypmod, 64 + 4, 4), Some(258));
        assert_eq!(payload_bound(SizeRule::CharTypmod, -1, 4), None);
        assert_eq!(payload_bound(SizeRule::BitTypmod, 9, 4), Some(10));
    }
}
