//! Resource quantities (`500m`, `64Mi`, `1e3`, `1.5`) as the Kubernetes API spells them,
//! parsed exactly into nano-units so requests, limits and sizes compare without rounding
//! surprises.

use std::fmt;

/// Why a quantity string is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not of the form `<number><suffix>`.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Syntax,
    /// A suffix this grammar does not know (`Zi`, `X`, ...).
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// Beyond what we represent (about 1.7e29 units).
    #[error("quantity too large")]
    TooLarge,
}

/// A parsed quantity, held as an exact count of nano-units (values finer than a nano-unit are
/// rounded up, as the API server does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ParsedQuantity {
    nanos: i128,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

impl ParsedQuantity {
    /// A quantity of `units` whole units.
    pub fn from_units(units: i64) -> Self {
        Self {
            nanos: i128::from(units) * NANOS_PER_UNIT,
        }
    }

    /// A quantity of `nanos` nano-units (a sum of quantities, to round once as Go does).
    pub fn from_nanos(nanos: i128) -> Self {
        Self { nanos }
    }

    /// The exact value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// Below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in whole units, rounded up (Go's `Quantity.Value()`): bytes for memory.
    pub fn value_ceil(&self) -> i128 {
        ceil_div(self.nanos, NANOS_PER_UNIT)
    }

    /// The value in thousandths, rounded up (Go's `Quantity.MilliValue()`): millicores for cpu.
    pub fn milli_ceil(&self) -> i128 {
        ceil_div(self.nanos, 1_000_000)
    }
}

impl fmt::Display for ParsedQuantity {
    /// Whole units when exact, else nano-units with an `n` suffix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % NANOS_PER_UNIT == 0 {
            write!(f, "{}", self.nanos / NANOS_PER_UNIT)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

/// Rounds towards positive infinity, as `Quantity.ScaledValue` does.
fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

/// Parses a quantity: `[+-]<digits>[.<digits>]<suffix>`, the suffix one of the binary
/// (`Ki`..`Ei`), decimal (`n`, `u`, `m`, ``, `k`, `M`..`E`) or exponent (`e3`, `E-2`) forms.
pub fn parse_quantity(s: &str) -> Result<ParsedQuantity, QuantityError> {
    let bytes = s.as_bytes();
    let mut i = 0;
    let negative = match bytes.first() {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let int_start = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = &s[int_start..i];
    let mut frac_digits = "";
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = &s[frac_start..i];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(QuantityError::Syntax);
    }
    let scale = suffix_scale(&s[i..])?;

    // mantissa = the digits without the point; value = mantissa * 10^-frac * scale.
    let mut mantissa: i128 = 0;
    for d in int_digits.bytes().chain(frac_digits.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(d - b'0')))
            .ok_or(QuantityError::TooLarge)?;
    }
    let frac_len = i32::try_from(frac_digits.len()).map_err(|_| QuantityError::TooLarge)?;
    let nanos = match scale {
        Scale::Binary(shift) => {
            let m = mantissa
                .checked_mul(1i128 << shift)
                .ok_or(QuantityError::TooLarge)?;
            scale_pow10(m, 9 - frac_len)?
        }
        // A manifest may say `1e2147483647`: the exponent arithmetic is checked, never wrapped.
        Scale::Decimal(exp) => {
            let exp = exp
                .checked_add(9)
                .and_then(|e| e.checked_sub(frac_len))
                .ok_or(QuantityError::TooLarge)?;
            scale_pow10(mantissa, exp)?
        }
    };
    Ok(ParsedQuantity {
        nanos: if negative { -nanos } else { nanos },
    })
}

/// What a suffix multiplies by.
enum Scale {
    /// 2^n.
    Binary(u32),
    /// 10^n.
    Decimal(i32),
}

fn suffix_scale(suffix: &str) -> Result<Scale, QuantityError> {
    Ok(match suffix {
        "Ki" => Scale::Binary(10),
        "Mi" => Scale::Binary(20),
        "Gi" => Scale::Binary(30),
        "Ti" => Scale::Binary(40),
        "Pi" => Scale::Binary(50),
        "Ei" => Scale::Binary(60),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "" => Scale::Decimal(0),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        s if s.starts_with(['e', 'E']) => {
            let exp = &s[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(QuantityError::Syntax);
            }
            Scale::Decimal(exp.parse().map_err(|_| QuantityError::TooLarge)?)
        }
        s if s.bytes().all(|b| b.is_ascii_alphabetic()) => return Err(QuantityError::Suffix),
        _ => return Err(QuantityError::Syntax),
    })
}

/// `m * 10^exp`, rounding up when `exp` is negative.
fn scale_pow10(m: i128, exp: i32) -> Result<i128, QuantityError> {
    if exp >= 0 {
        let p = 10i128
            .checked_pow(exp.unsigned_abs())
            .ok_or(QuantityError::TooLarge)?;
        m.checked_mul(p).ok_or(QuantityError::TooLarge)
    } else {
        match 10i128.checked_pow(exp.unsigned_abs()) {
            Some(p) => Ok(ceil_div(m, p)),
            // Smaller than any representable power: a positive remainder rounds up to 1.
            None => Ok(i128::from(m > 0)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn units(s: &str) -> i128 {
        parse_quantity(s).unwrap().value_ceil()
    }

    #[test]
    fn binary_and_decimal_suffixes() {
        assert_eq!(units("10Mi"), 10 * 1024 * 1024);
        assert_eq!(units("1Ki"), 1024);
        assert_eq!(units("1Ei"), 1 << 60);
        assert_eq!(units("2k"), 2000);
        assert_eq!(units("1G"), 1_000_000_000);
        assert_eq!(units("128974848"), 128_974_848);
        assert_eq!(units("129e6"), 129_000_000);
        assert_eq!(units("1.5Gi"), 1_610_612_736);
        assert_eq!(units("+3"), 3);
    }

    #[test]
    fn milli_values() {
        assert_eq!(parse_quantity("500m").unwrap().milli_ceil(), 500);
        assert_eq!(parse_quantity("0.5").unwrap().milli_ceil(), 500);
        assert_eq!(parse_quantity("1").unwrap().milli_ceil(), 1000);
        assert_eq!(parse_quantity(".1").unwrap().milli_ceil(), 100);
        assert_eq!(parse_quantity("1.").unwrap().milli_ceil(), 1000);
        // Finer than a milli rounds up.
        assert_eq!(parse_quantity("100u").unwrap().milli_ceil(), 1);
        assert_eq!(parse_quantity("1n").unwrap().nanos(), 1);
        assert_eq!(parse_quantity("1e-12").unwrap().nanos(), 1);
    }

    #[test]
    fn comparisons_across_suffixes() {
        assert!(parse_quantity("1").unwrap() == parse_quantity("1000m").unwrap());
        assert!(parse_quantity("1Gi").unwrap() > parse_quantity("1G").unwrap());
        assert!(parse_quantity("-1").unwrap().is_negative());
        assert_eq!(parse_quantity("0").unwrap(), ParsedQuantity::default());
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_quantity("10Zi"), Err(QuantityError::Suffix));
        assert_eq!(parse_quantity(""), Err(QuantityError::Syntax));
        assert_eq!(parse_quantity("Mi"), Err(QuantityError::Syntax));
        assert_eq!(parse_quantity("1 Mi"), Err(QuantityError::Syntax));
        assert_eq!(parse_quantity("1e"), Err(QuantityError::Syntax));
        assert_eq!(parse_quantity("--1"), Err(QuantityError::Syntax));
        assert_eq!(parse_quantity("1e40"), Err(QuantityError::TooLarge));
    }

    #[test]
    fn extreme_exponents_are_errors_or_round_up_never_overflow() {
        // `9 + exp - frac_len` once overflowed i32 here: a panic in debug builds (every static
        // pod skipped), a 1-byte limit in release ones.
        assert_eq!(parse_quantity("1e2147483647"), Err(QuantityError::TooLarge));
        assert_eq!(
            parse_quantity("1.5e2147483647"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(parse_quantity("1e2147483648"), Err(QuantityError::TooLarge));
        assert_eq!(units("1e-2147483648"), 1);
        assert_eq!(units("0.5e-2147483648"), 1);
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_a_value_or_an_error(s in "\\PC{0,40}") {
            let _ = parse_quantity(&s);
        }

        #[test]
        fn quantity_shaped_text_is_a_value_or_an_error(
            s in "[+-]?[0-9]{0,25}(\\.[0-9]{0,25})?([eE][+-]?[0-9]{1,12}|[numkMGTPE]|[KMGTPE]i)?"
        ) {
            let _ = parse_quantity(&s);
        }
    }
}
