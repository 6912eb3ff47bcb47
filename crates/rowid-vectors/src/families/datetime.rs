//! `datetime.json`: wire-format §5.10–§5.14 (date, time, timestamps, timetz, interval).

use rowid_codec::{Interval, OwnedValue, Timetz, TypeTag};

use super::build::{field, one};
use crate::Family;

pub(super) fn datetime() -> Family {
    let iv = |m, d, us, display: &str, comment: &str, flags: &[&'static str]| {
        one(
            comment,
            field(
                TypeTag::Interval,
                OwnedValue::Interval(Interval::from_fields(m, d, us)),
                display,
                &format!("'{display}'::interval"),
            ),
            flags,
        )
    };
    let tz = |time, zone, display: &str, comment: &str| {
        one(
            comment,
            field(
                TypeTag::Timetz,
                OwnedValue::Timetz(Timetz { time, zone }),
                display,
                &format!("'{display}'::timetz"),
            ),
            &[],
        )
    };
    let hour = 3_600_000_000i64;
    Family {
        file: "datetime.json",
        spec: "wire-format.md §5.10–§5.14",
        valid: vec![
            one(
                "-infinity",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(i32::MIN),
                    "-infinity",
                    "'-infinity'::date",
                ),
                &["edge"],
            ),
            one(
                "day before the epoch",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(-1),
                    "1999-12-31",
                    "'1999-12-31'::date",
                ),
                &[],
            ),
            one(
                "epoch",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(0),
                    "2000-01-01",
                    "'2000-01-01'::date",
                ),
                &[],
            ),
            one(
                "infinity",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(i32::MAX),
                    "infinity",
                    "'infinity'::date",
                ),
                &["edge"],
            ),
            one(
                "midnight",
                field(
                    TypeTag::Time,
                    OwnedValue::Time(0),
                    "00:00:00",
                    "'00:00:00'::time",
                ),
                &["edge"],
            ),
            one(
                "noon",
                field(
                    TypeTag::Time,
                    OwnedValue::Time(12 * hour),
                    "12:00:00",
                    "'12:00:00'::time",
                ),
                &[],
            ),
            one(
                "24:00 is a valid time",
                field(
                    TypeTag::Time,
                    OwnedValue::Time(24 * hour),
                    "24:00:00",
                    "'24:00:00'::time",
                ),
                &["edge"],
            ),
            one(
                "timestamp",
                field(
                    TypeTag::Timestamp,
                    OwnedValue::Timestamp(1_000_000),
                    "2000-01-01 00:00:01",
                    "'2000-01-01 00:00:01'::timestamp",
                ),
                &[],
            ),
            one(
                "timestamp -infinity",
                field(
                    TypeTag::Timestamp,
                    OwnedValue::Timestamp(i64::MIN),
                    "-infinity",
                    "'-infinity'::timestamp",
                ),
                &["edge"],
            ),
            one(
                "timestamp before the epoch",
                field(
                    TypeTag::Timestamp,
                    OwnedValue::Timestamp(-86_400_000_000),
                    "1999-12-31 00:00:00",
                    "'1999-12-31 00:00:00'::timestamp",
                ),
                &[],
            ),
            one(
                "timestamptz is UTC",
                field(
                    TypeTag::Timestamptz,
                    OwnedValue::Timestamptz(1_000_000),
                    "2000-01-01 02:00:01+02",
                    "'2000-01-01 02:00:01+02'::timestamptz",
                ),
                &["setting-independence"],
            ),
            one(
                "timestamptz infinity",
                field(
                    TypeTag::Timestamptz,
                    OwnedValue::Timestamptz(i64::MAX),
                    "infinity",
                    "'infinity'::timestamptz",
                ),
                &["edge"],
            ),
            tz(0, -3600, "00:00:00+01", "zone is seconds west of UTC"),
            tz(
                hour,
                0,
                "01:00:00+00",
                "same instant as 00:00+01, different zone: not equal",
            ),
            tz(0, 0, "00:00:00+00", "UTC midnight"),
            iv(1, 0, 0, "1 mon", "one month", &[]),
            iv(0, 30, 0, "30 days", "30 days = 1 mon", &["normalisation"]),
            iv(0, 1, 0, "1 day", "one day", &[]),
            iv(
                0,
                0,
                24 * hour,
                "24 hours",
                "24 hours = 1 day",
                &["normalisation"],
            ),
            iv(
                0,
                -1,
                24 * hour - 1_000_000,
                "-1 days +23:59:59",
                "-1 day 23:59:59 = -1 s",
                &["normalisation"],
            ),
            iv(0, 0, -1_000_000, "-00:00:01", "-1 s", &["normalisation"]),
            iv(
                i32::MAX,
                i32::MAX,
                i64::MAX,
                "infinity",
                "PostgreSQL 17 +infinity: beyond 64 bits",
                &["edge", "pg17"],
            ),
            iv(
                178_956_970,
                0,
                0,
                "178956970 mons",
                "largest month count: comparison value exceeds int64",
                &["edge"],
            ),
        ],
        ..Family::default()
    }
}
