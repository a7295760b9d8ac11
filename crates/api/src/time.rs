//! Wall-clock timestamps as the API shows them: RFC 3339, UTC, milliseconds.

/// The last instant shown: `9999-12-31T23:59:59.999Z`. Later instants are
/// shown as this one, so every timestamp stays valid RFC 3339 (four-digit
/// year).
pub const MAX_SHOWN_MS: u64 = 253_402_300_799_999;

/// `unix_ms` (milliseconds since 1970-01-01T00:00:00Z) as
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, clamped to [`MAX_SHOWN_MS`].
pub fn format_rfc3339_ms(unix_ms: u64) -> String {
    let ms = unix_ms.min(MAX_SHOWN_MS);
    let days = ms / 86_400_000;
    let in_day = ms % 86_400_000;
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let mut text = [0u8; 24];
    for (at, value, width) in [
        (0, y, 4),
        (5, m, 2),
        (8, d, 2),
        (11, h, 2),
        (14, min, 2),
        (17, s, 2),
        (20, milli, 3),
    ] {
        write_digits(&mut text[at..at + width], value);
    }
    for (at, sep) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ] {
        text[at] = sep;
    }
    text.iter().map(|&b| char::from(b)).collect()
}

/// `value` in decimal, zero-padded to fill `out` (its high digits cut).
fn write_digits(out: &mut [u8], mut value: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The proleptic Gregorian date `days` days after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        // Seconds from `date -u -d ... +%s`.
        for (secs, ms, text) in [
            (0u64, 0u64, "1970-01-01T00:00:00.000Z"),
            (1_795_982_400, 0, "2026-11-29T20:00:00.000Z"),
            (1_795_982_430, 0, "2026-11-29T20:00:30.000Z"),
            (951_868_799, 999, "2000-02-29T23:59:59.999Z"),
            (68_214_896, 7, "1972-02-29T12:34:56.007Z"),
            (4_107_542_400, 0, "2100-03-01T00:00:00.000Z"),
            (1_735_603_200, 0, "2024-12-31T00:00:00.000Z"),
            (253_402_300_799, 999, "9999-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(format_rfc3339_ms(secs * 1000 + ms), text);
        }
    }

    #[test]
    fn day_boundaries_and_clamp() {
        assert_eq!(format_rfc3339_ms(86_399_999), "1970-01-01T23:59:59.999Z");
        assert_eq!(format_rfc3339_ms(86_400_000), "1970-01-02T00:00:00.000Z");
        // 1900 was not a leap year, 2000 was; 2100 is not: Feb 28 -> Mar 1.
        assert_eq!(
            format_rfc3339_ms(4_107_542_400_000 - 1),
            "2100-02-28T23:59:59.999Z"
        );
        assert_eq!(format_rfc3339_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn every_day_follows_the_last() {
        // Walk 1970..2500 a day at a time: dates are consecutive.
        let mut prev = civil_from_days(0);
        assert_eq!(prev, (1970, 1, 1));
        for day in 1..(530 * 366) {
            let next = civil_from_days(day);
            let (py, pm, pd) = prev;
            let leap = py % 4 == 0 && (py % 100 != 0 || py % 400 == 0);
            let len = match pm {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let expect = if pd < len {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!(next, expect, "day {day}");
            prev = next;
        }
    }
}
