//! Numbers as `json.dumps(normalise(value))` writes them: floats as Python's `repr`
//! (integral ones as exact integers, the non-finite ones as `NaN`, `Infinity`, `-Infinity`)
//! and integers in decimal.

use crate::canon::push_small;

/// Writes a float as `json.dumps(normalise(f))` does: integral floats as exact integers
/// (`-0.0` as `0`, `1e23` as `99999999999999991611392`), others as Python's `repr`, and
/// the non-finite ones as `NaN`, `Infinity`, `-Infinity`.
pub fn write_float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else if is_integral(f) {
        write_integral_float(out, f);
    } else if !write_short_decimal(out, f) {
        write_float_repr(out, f);
    }
}

/// True for a finite `f` without a fraction. Not `f64::fract`: without SSE4.1, which builds
/// for any x86-64 cannot assume, that is a library call.
#[inline]
fn is_integral(f: f64) -> bool {
    // Every float from 2^52 up is an integer; below, the conversion truncates exactly.
    f.abs() >= 4_503_599_627_370_496.0 || (f as i64) as f64 == f
}

/// Writes `f` (finite, not integral) as Python's `repr` when it is the float of a decimal
/// with at most three fraction digits and under 1e12 (prices, percentages, most numbers
/// people write), and returns whether it did; one multiplication and one division instead
/// of a shortest-digits search.
///
/// Such a decimal has at most 15 significant digits, and no two decimals that short read as
/// the same float (DBL_DIG), so the shortest decimal that reads back as `f`, which `repr`
/// writes, is that decimal with its trailing zeros trimmed.
fn write_short_decimal(out: &mut Vec<u8>, f: f64) -> bool {
    if !(1e-3..1e12).contains(&f.abs()) {
        return false;
    }
    let scaled = f * 1000.0;
    // Nearest integer (the candidate; the check below decides): |scaled| < 1e15 < 2^53.
    let thousandths = (scaled + 0.5f64.copysign(scaled)) as i64;
    // Exact numerator, correctly rounded division: equal exactly when the decimal
    // `thousandths / 1000` reads as `f`.
    if thousandths as f64 / 1000.0 != f {
        return false;
    }
    let (mut digits, mut places) = (thousandths.unsigned_abs(), 3);
    // `f` is not integral, so at least one fraction digit stays.
    while digits % 10 == 0 && places > 1 {
        digits /= 10;
        places -= 1;
    }
    let unit = 10u64.pow(places);
    if thousandths < 0 {
        out.push(b'-');
    }
    push_small(out, itoa::Buffer::new().format(digits / unit).as_bytes());
    out.push(b'.');
    let fraction = digits % unit;
    for place in (0..places).rev() {
        out.push(b'0' + (fraction / 10u64.pow(place) % 10) as u8);
    }
    true
}

/// Python's `repr` of a finite float (`float_repr_style == 'short'`): the shortest digits
/// that round-trip, in positional notation when the decimal exponent is in [-4, 16),
/// otherwise as `d.ddde±XX` with at least two exponent digits.
pub fn write_float_repr(out: &mut Vec<u8>, f: f64) {
    let mut buffer = zmij::Buffer::new();
    let shortest = buffer.format_finite(f);
    // Between 1e-4 and 1e16 (where every non-integral float lies above 1e-4) Python writes
    // positional notation, and so does zmij when it writes no exponent: same digits, same
    // layout, nothing to redo.
    if f.abs() >= 1e-4 && !shortest.contains(['e', 'E']) {
        push_small(out, shortest.as_bytes());
        return;
    }
    let (negative, digits, point) = split_decimal(shortest);
    if negative {
        out.push(b'-');
    }
    let digits = digits.as_slice();
    let n = digits.len() as i32;
    if point <= -4 || point > 16 {
        out.push(digits[0]);
        if n > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        let exponent = point - 1;
        out.push(b'e');
        out.push(if exponent < 0 { b'-' } else { b'+' });
        let magnitude = exponent.unsigned_abs();
        if magnitude < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(itoa::Buffer::new().format(magnitude).as_bytes());
    } else if point <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-point) as usize));
        out.extend_from_slice(digits);
    } else if point >= n {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', (point - n) as usize));
        out.extend_from_slice(b".0");
    } else {
        out.extend_from_slice(&digits[..point as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[point as usize..]);
    }
}

/// Splits a shortest-digit rendering such as `-0.000025`, `1.5e-7` or `1e+16` into its
/// sign, its significant digits (no leading or trailing zeros) and the position of the
/// decimal point relative to the first significant digit (value = 0.DIGITS × 10^point).
fn split_decimal(text: &str) -> (bool, Digits, i32) {
    let bytes = text.as_bytes();
    let negative = bytes.first() == Some(&b'-');
    let unsigned = if negative { &bytes[1..] } else { bytes };
    let (mantissa, exponent) = match unsigned.iter().position(|&b| b == b'e' || b == b'E') {
        Some(e) => (&unsigned[..e], parse_exponent(&unsigned[e + 1..])),
        None => (unsigned, 0),
    };
    let integer_len = mantissa
        .iter()
        .position(|&b| b == b'.')
        .unwrap_or(mantissa.len()) as i32;
    let mut digits = Digits::default();
    let mut leading_zeros = 0i32;
    for &b in mantissa.iter().filter(|&&b| b != b'.') {
        if b == b'0' && digits.len == 0 {
            leading_zeros += 1;
        } else {
            digits.push(b);
        }
    }
    digits.trim_trailing_zeros();
    (negative, digits, integer_len - leading_zeros + exponent)
}

fn parse_exponent(text: &[u8]) -> i32 {
    let (negative, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = digits
        .iter()
        .fold(0i32, |acc, &b| acc * 10 + i32::from(b - b'0'));
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// Up to 17 significant digits (all a shortest round-trip f64 rendering can have), on the stack.
#[derive(Default)]
struct Digits {
    bytes: [u8; 24],
    len: usize,
}

impl Digits {
    fn push(&mut self, b: u8) {
        if self.len < self.bytes.len() {
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }
    fn trim_trailing_zeros(&mut self) {
        while self.len > 1 && self.bytes[self.len - 1] == b'0' {
            self.len -= 1;
        }
    }
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Writes an integral finite float as the exact integer `int(f)` is.
fn write_integral_float(out: &mut Vec<u8>, f: f64) {
    if f.abs() < 18446744073709551616.0 {
        // |f| < 2^64: the conversion is exact.
        if f <= -1.0 {
            out.push(b'-');
        }
        push_small(out, itoa::Buffer::new().format(f.abs() as u64).as_bytes());
        return;
    }
    if f < 0.0 {
        out.push(b'-');
    }
    write_big_integral(out, f.abs());
}

/// Exact decimal of a float ≥ 2^64, which is mantissa × 2^exponent with exponent > 11.
fn write_big_integral(out: &mut Vec<u8>, f: f64) {
    let bits = f.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let mantissa = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    // Little-endian limbs in base 10^9, multiplied up by 2^exponent a few bits at a time.
    const BASE: u64 = 1_000_000_000;
    let mut limbs: Vec<u64> = vec![
        mantissa % BASE,
        mantissa / BASE % BASE,
        mantissa / BASE / BASE,
    ];
    let mut remaining = exponent;
    while remaining > 0 {
        let step = remaining.min(29);
        remaining -= step;
        let mut carry = 0u64;
        for limb in limbs.iter_mut() {
            let value = (*limb << step) + carry;
            *limb = value % BASE;
            carry = value / BASE;
        }
        while carry > 0 {
            limbs.push(carry % BASE);
            carry /= BASE;
        }
    }
    while limbs.len() > 1 && limbs.last() == Some(&0) {
        limbs.pop();
    }
    let mut itoa_buffer = itoa::Buffer::new();
    let mut iter = limbs.iter().rev();
    if let Some(first) = iter.next() {
        out.extend_from_slice(itoa_buffer.format(*first).as_bytes());
    }
    for limb in iter {
        let text = itoa_buffer.format(*limb);
        out.extend(std::iter::repeat_n(b'0', 9 - text.len()));
        out.extend_from_slice(text.as_bytes());
    }
}

pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    push_small(out, itoa::Buffer::new().format(value).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(f: f64) -> String {
        let mut out = Vec::new();
        write_float(&mut out, f);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn short_decimals_are_written_as_repr_writes_them() {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut taken = 0;
        for n in 0..400_000 {
            let r = next();
            let f = match n % 4 {
                // Decimals of up to four places, of every magnitude up to 1e13.
                0 => {
                    (r % 10u64.pow(1 + (r >> 60) as u32 % 13)) as f64
                        / 10f64.powi((r >> 56) as i32 % 5)
                }
                1 => -((r % 100_000) as f64) / 1000.0,
                // Neighbours of such decimals, and arbitrary floats.
                2 => f64::from_bits(
                    ((r % 1_000_000) as f64 / 100.0)
                        .to_bits()
                        .wrapping_add(r >> 62)
                        .wrapping_sub(1),
                ),
                _ => f64::from_bits(r),
            };
            if !f.is_finite() || f.fract() == 0.0 {
                assert!(!f.is_finite() || is_integral(f), "{f:e}");
                continue;
            }
            assert!(!is_integral(f), "{f:e}");
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            if write_short_decimal(&mut fast, f) {
                taken += 1;
                write_float_repr(&mut slow, f);
                assert_eq!(fast, slow, "{f:e}");
            }
        }
        assert!(taken > 100_000, "{taken}");
        assert_eq!(float(0.001), "0.001");
        assert_eq!(float(-250.75), "-250.75");
        assert_eq!(float(999_999_999_999.999), "999999999999.999");
    }

    #[test]
    fn floats_follow_python_repr() {
        let cases = [
            (1e-5, "1e-05"),
            (2.5e-5, "2.5e-05"),
            (1e-4, "0.0001"),
            (0.00012345, "0.00012345"),
            (5e-324, "5e-324"),
            (0.1, "0.1"),
            (0.3, "0.3"),
            (-1.5, "-1.5"),
            (123.25, "123.25"),
            (1e15 + 0.5, "1000000000000000.5"),
            (1.7976931348623157e-300, "1.7976931348623157e-300"),
            (2.2250738585072014e-308, "2.2250738585072014e-308"),
            (1e-7, "1e-07"),
            (-1.234e-100, "-1.234e-100"),
        ];
        for (value, expected) in cases {
            assert_eq!(float(value), expected, "{value:e}");
        }
    }

    #[test]
    fn integral_floats_are_exact_integers() {
        assert_eq!(float(-0.0), "0");
        assert_eq!(float(0.0), "0");
        assert_eq!(float(3.0), "3");
        assert_eq!(float(-3.0), "-3");
        assert_eq!(float(1e16), "10000000000000000");
        assert_eq!(float(1e23), "99999999999999991611392");
        assert_eq!(float(-1e23), "-99999999999999991611392");
        assert_eq!(float(18446744073709551616.0), "18446744073709551616");
        assert_eq!(
            float(1e308),
            "1000000000000000010979063629440455417404923096773118463368106829031575854049114915371633289784946888990\
             6124966972117251561159028374314008832830700919814604603127166450293302718569748969958855904333838446616\
             5001178426897626212945177628091195786707458122783970171784415105291802893207873272974885715430223118336"
        );
    }

    #[test]
    fn non_finite_floats_are_spelled_like_python() {
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(f64::INFINITY), "Infinity");
        assert_eq!(float(f64::NEG_INFINITY), "-Infinity");
    }
}
