//! Durations as Go writes them (`20s`, `1m30s`, `2m0s`, `1.5h`, `300ms`), the form
//! KubeletConfiguration uses: parsed, and written as `time.Duration.String` does.

use std::time::Duration;

/// Why a duration string is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not `<number><unit>...`.
    #[error("invalid duration {0:?}")]
    Syntax(String),
    /// A unit Go does not know.
    #[error("unknown unit {unit:?} in duration {input:?}")]
    Unit {
        /// The unit.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// Below zero: no period or timeout may be.
    #[error("duration {0:?} must not be negative")]
    Negative(String),
    /// More than a `Duration` (or Go's int64 nanoseconds) holds.
    #[error("invalid duration {0:?}: too large")]
    Overflow(String),
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration (`time.ParseDuration`); negative durations are refused since every
/// duration here is a period or a timeout.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let syntax = || DurationError::Syntax(input.to_string());
    let (negative, mut s) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(syntax());
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, rest) = s.split_at(int_len);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(syntax());
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::Syntax(input.to_string()));
        }
        let per = unit_nanos(unit).ok_or_else(|| DurationError::Unit {
            unit: unit.to_string(),
            input: input.to_string(),
        })?;
        let overflow = || DurationError::Overflow(input.to_string());
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut nanos = whole.checked_mul(per).ok_or_else(overflow)?;
        // The fraction scaled by the unit; digits beyond nanosecond precision are dropped,
        // as Go drops them.
        let mut scale = per;
        for d in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos = nanos
                .checked_add(u128::from(d - b'0') * scale)
                .ok_or_else(overflow)?;
        }
        total = total.checked_add(nanos).ok_or_else(overflow)?;
        s = rest;
    }
    // Go's durations are int64 nanoseconds.
    if total > i64::MAX as u128 {
        return Err(DurationError::Overflow(input.to_string()));
    }
    if negative && total > 0 {
        return Err(DurationError::Negative(input.to_string()));
    }
    let secs = (total / 1_000_000_000) as u64;
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// For clap: a Go duration flag value.
pub fn parse_duration_flag(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// A duration as Go's `time.Duration.String` writes it: `0s`, `500ms`, `20s`, `1m30s`,
/// `2h0m0s`, `1.5s`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 {
        let (unit, scale) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", decimal(nanos, scale));
    }
    let secs = nanos / 1_000_000_000;
    let (h, m) = (secs / 3600, (secs / 60) % 60);
    let s = decimal(nanos % 60_000_000_000, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// `n / scale` with its fraction, trailing zeros trimmed.
fn decimal(n: u128, scale: u128) -> String {
    let (whole, frac) = (n / scale, n % scale);
    if frac == 0 {
        return whole.to_string();
    }
    let width = scale.to_string().len() - 1;
    let frac = format!("{frac:0width$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("20s"), Duration::from_secs(20));
        assert_eq!(d("1m30s"), Duration::from_secs(90));
        assert_eq!(d("2m0s"), Duration::from_secs(120));
        assert_eq!(d("1.5h"), Duration::from_secs(5400));
        assert_eq!(d("300ms"), Duration::from_millis(300));
        assert_eq!(d("1h2m3s4ms5us6ns"), Duration::new(3723, 4_005_006));
        assert_eq!(d("10\u{b5}s"), Duration::from_micros(10));
        assert_eq!(d(".5s"), Duration::from_millis(500));
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("-0s"), Duration::ZERO);
        assert_eq!(d("+5s"), Duration::from_secs(5));
    }

    #[test]
    fn go_s_string_form() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_nanos(5)), "5ns");
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(format_duration(ms(500)), "500ms");
        assert_eq!(format_duration(s(20)), "20s");
        assert_eq!(format_duration(ms(1500)), "1.5s");
        assert_eq!(format_duration(s(60)), "1m0s");
        assert_eq!(format_duration(s(90)), "1m30s");
        assert_eq!(format_duration(s(120)), "2m0s");
        assert_eq!(format_duration(s(7200)), "2h0m0s");
        assert_eq!(format_duration(s(3661)), "1h1m1s");
    }

    #[test]
    fn refusals() {
        assert!(
            matches!(parse_duration("20x"), Err(DurationError::Unit { unit, .. }) if unit == "x")
        );
        assert!(matches!(
            parse_duration("20"),
            Err(DurationError::Syntax(_))
        ));
        assert!(matches!(parse_duration(""), Err(DurationError::Syntax(_))));
        assert!(matches!(parse_duration("s"), Err(DurationError::Syntax(_))));
        assert!(matches!(
            parse_duration("1.s.s"),
            Err(DurationError::Syntax(_))
        ));
        assert!(matches!(
            parse_duration("-1s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_duration("9999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn a_fraction_on_the_largest_whole_number_is_an_overflow_not_a_panic() {
        // u128::MAX / 3_600_000_000_000 hours, plus most of another hour: the fraction's
        // addition once overflowed u128 in debug builds.
        let whole = u128::MAX / 3_600_000_000_000;
        let input = format!("{whole}.99999h");
        assert!(matches!(
            parse_duration(&input),
            Err(DurationError::Overflow(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_a_duration_or_an_error(s in "\\PC{0,30}") {
            let _ = parse_duration(&s);
        }

        #[test]
        fn duration_shaped_text_is_a_duration_or_an_error(
            s in "[+-]?([0-9]{0,40}(\\.[0-9]{0,12})?(ns|us|µs|ms|s|m|h)){1,4}"
        ) {
            let _ = parse_duration(&s);
        }
    }
}
