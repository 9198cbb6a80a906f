//! ISO-8601 date parsing to epoch milliseconds (the subset Elasticsearch's `strict_date_optional_time`
//! accepts): `yyyy-MM-dd`, optionally followed by `THH:mm[:ss[.fff]]` and `Z` or `±HH:mm`; formatting back
//! (UTC, as Elasticsearch prints dates), and the calendar units date histograms round to.

/// Parses a date string to milliseconds since the Unix epoch, or `None` if it is not a date.
pub fn parse_date_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        if part.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(part).ok()?.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    let mut ms = days_from_civil(y, m, d) * 86_400_000;
    let mut i = 10;
    if i == b.len() {
        return Some(ms);
    }
    if b[i] != b'T' && b[i] != b' ' {
        return None;
    }
    let (hh, mm) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
    if b.get(i + 3) != Some(&b':') || hh > 23 || mm > 59 {
        return None;
    }
    ms += (hh * 3600 + mm * 60) * 1000;
    i += 6;
    if b.get(i) == Some(&b':') {
        let ss = num(i + 1..i + 3)?;
        if ss > 60 {
            return None;
        }
        ms += ss * 1000;
        i += 3;
        if b.get(i) == Some(&b'.') {
            let start = i + 1;
            let mut end = start;
            while end < b.len() && b[end].is_ascii_digit() {
                end += 1;
            }
            if end == start {
                return None;
            }
            let frac = &s[start..end.min(start + 3)];
            let scale = [100, 10, 1][frac.len() - 1];
            ms += frac.parse::<i64>().ok()? * scale;
            i = end;
        }
    }
    match b.get(i) {
        None => Some(ms),
        Some(b'Z') if i + 1 == b.len() => Some(ms),
        Some(&sign @ (b'+' | b'-')) if b.len() == i + 6 && b[i + 3] == b':' => {
            let off = (num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?) * 60_000;
            Some(if sign == b'+' { ms - off } else { ms + off })
        }
        _ => None,
    }
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of day `z` since 1970-01-01 as (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

/// Milliseconds since the epoch as Elasticsearch prints a date: `2015-05-23T01:02:03.000Z` (UTC).
pub fn format_date_millis(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
}

/// A calendar unit of a date histogram (`calendar_interval`): its buckets follow the calendar (months and
/// years of different lengths), in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarUnit {
    Minute,
    Hour,
    Day,
    /// Weeks start on Monday, as in Elasticsearch.
    Week,
    Month,
    Quarter,
    Year,
}

impl CalendarUnit {
    /// The start of the unit holding `ms`.
    pub fn floor(self, ms: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        let fixed = |unit: i64| ms.div_euclid(unit) * unit;
        let (days, month_start) = (ms.div_euclid(DAY), |y: i64, m: i64| days_from_civil(y, m, 1) * DAY);
        match self {
            CalendarUnit::Minute => fixed(60_000),
            CalendarUnit::Hour => fixed(3_600_000),
            CalendarUnit::Day => fixed(DAY),
            // 1970-01-01 was a Thursday: Monday is three days later.
            CalendarUnit::Week => ((days - 4).div_euclid(7) * 7 + 4) * DAY,
            CalendarUnit::Month => {
                let (y, m, _) = civil_from_days(days);
                month_start(y, m)
            }
            CalendarUnit::Quarter => {
                let (y, m, _) = civil_from_days(days);
                month_start(y, (m - 1) / 3 * 3 + 1)
            }
            CalendarUnit::Year => month_start(civil_from_days(days).0, 1),
        }
    }

    /// The start of the unit after the one starting at `start` (a value [`floor`](Self::floor) returned).
    pub fn next(self, start: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        let add_months = |n: i64| {
            let (y, m, _) = civil_from_days(start.div_euclid(DAY));
            let k = y * 12 + (m - 1) + n;
            days_from_civil(k.div_euclid(12), k.rem_euclid(12) + 1, 1) * DAY
        };
        match self {
            CalendarUnit::Minute => start + 60_000,
            CalendarUnit::Hour => start + 3_600_000,
            CalendarUnit::Day => start + DAY,
            CalendarUnit::Week => start + 7 * DAY,
            CalendarUnit::Month => add_months(1),
            CalendarUnit::Quarter => add_months(3),
            CalendarUnit::Year => add_months(12),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_and_calendar_units() {
        for s in [
            "1970-01-01T00:00:00.000Z",
            "2015-05-23T01:02:03.500Z",
            "2016-02-29T23:59:59.999Z",
            "1969-12-31T23:00:00.000Z",
        ] {
            assert_eq!(format_date_millis(parse_date_millis(s).unwrap()), s);
        }
        for z in [-800_000, -1, 0, 1, 59, 365, 11_016, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z, "day {z}");
        }
        let at = |s: &str| parse_date_millis(s).unwrap();
        let t = at("2015-05-23T13:45:10.250Z");
        assert_eq!(CalendarUnit::Minute.floor(t), at("2015-05-23T13:45:00Z"));
        assert_eq!(CalendarUnit::Hour.floor(t), at("2015-05-23T13:00:00Z"));
        assert_eq!(CalendarUnit::Day.floor(t), at("2015-05-23"));
        assert_eq!(CalendarUnit::Week.floor(t), at("2015-05-18"), "the Monday before");
        assert_eq!(CalendarUnit::Week.floor(at("2015-05-18")), at("2015-05-18"), "a Monday is its own week");
        assert_eq!(CalendarUnit::Month.floor(t), at("2015-05-01"));
        assert_eq!(CalendarUnit::Quarter.floor(t), at("2015-04-01"));
        assert_eq!(CalendarUnit::Year.floor(t), at("2015-01-01"));
        assert_eq!(CalendarUnit::Year.floor(at("1969-07-20")), at("1969-01-01"));
        assert_eq!(CalendarUnit::Month.next(at("2016-01-01")), at("2016-02-01"));
        assert_eq!(CalendarUnit::Month.next(at("2016-12-01")), at("2017-01-01"));
        assert_eq!(CalendarUnit::Quarter.next(at("2016-10-01")), at("2017-01-01"));
        assert_eq!(CalendarUnit::Year.next(at("1969-01-01")), at("1970-01-01"));
        assert_eq!(CalendarUnit::Week.next(at("2015-05-18")), at("2015-05-25"));
        // Every unit's next start is its own floor, and later than the start.
        for u in [
            CalendarUnit::Minute,
            CalendarUnit::Hour,
            CalendarUnit::Day,
            CalendarUnit::Week,
            CalendarUnit::Month,
            CalendarUnit::Quarter,
            CalendarUnit::Year,
        ] {
            for ms in [t, at("1969-12-31T23:59:59Z"), at("2000-02-29T12:00:00Z")] {
                let f = u.floor(ms);
                assert!(f <= ms && ms < u.next(f), "{u:?} {ms}");
                assert_eq!(u.floor(u.next(f)), u.next(f), "{u:?}");
            }
        }
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date_millis("1970-01-01"), Some(0));
        assert_eq!(parse_date_millis("2015-05-23"), Some(1_432_339_200_000));
        assert_eq!(parse_date_millis("2015-05-23T01:02:03Z"), Some(1_432_339_200_000 + 3_723_000));
        assert_eq!(
            parse_date_millis("2015-05-23T01:02:03.5+01:00"),
            Some(1_432_339_200_000 + 3_723_500 - 3_600_000)
        );
        assert_eq!(parse_date_millis("2016-02-29"), Some(1_456_704_000_000));
        for bad in [
            "2015-02-29",
            "2015-13-01",
            "hello",
            "2015-05-23T",
            "2015-05-23x",
            "20150523",
            "2015-05-23T25:00",
        ] {
            assert_eq!(parse_date_millis(bad), None, "{bad}");
        }
    }
}
