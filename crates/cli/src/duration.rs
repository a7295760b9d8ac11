//! Durations on the command line: `500ms`, `10s`, `2m`, `1h 30m`, or a bare
//! number of milliseconds (what every duration flag took before units).

/// A duration flag's value, in whole milliseconds.
pub fn millis(arg: &str) -> Result<u64, String> {
    let arg = arg.trim();
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) {
        return arg
            .parse::<u64>()
            .map_err(|_| format!("{arg:?} does not fit in 64 bits"));
    }
    let d = humantime::parse_duration(arg).map_err(|e| {
        format!("{arg:?} is not a duration (500ms, 10s, 2m; a bare number is milliseconds): {e}")
    })?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!("{arg:?}: durations are whole milliseconds"));
    }
    u64::try_from(d.as_millis()).map_err(|_| format!("{arg:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::millis;

    #[test]
    fn units_and_bare_milliseconds() {
        for (arg, ms) in [
            ("1500", 1500),
            ("0", 0),
            ("500ms", 500),
            ("10s", 10_000),
            ("2m", 120_000),
            ("1h 30m", 5_400_000),
            ("1m30s", 90_000),
        ] {
            assert_eq!(millis(arg), Ok(ms), "{arg}");
        }
        for bad in [
            "",
            "ten",
            "-5",
            "10 parsecs",
            "1500us",
            "99999999999999999999",
        ] {
            assert!(millis(bad).is_err(), "{bad}");
        }
    }
}
