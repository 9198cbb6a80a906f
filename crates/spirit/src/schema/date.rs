//! ISO-8601 date parsing to epoch milliseconds (the subset Elasticsearch's `strict_date_optional_time`
//! accepts): `yyyy-MM-dd`, optionally followed by `THH:mm[:ss[.fff]]` and `Z` or `±HH:mm`.

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

#[cfg(test)]
mod tests {
    use super::*;

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
