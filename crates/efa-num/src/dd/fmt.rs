//! Decimal output of [`Dd`]: `Display` (`{}`: 32 significant digits, trailing zeros dropped,
//! plain notation for 10⁻⁵ ≤ |x| < 10³², else as `{:e}`; `{:.N}`: N decimals, plain),
//! `LowerExp` (`{:e}`: 32 significant digits trimmed; `{:.Ne}`: N decimals), `Debug` (as
//! `Display`; `{:#?}` shows the two words). NaN and ±∞ print as f64 does. Digits past the
//! 34th significant one print as 0. Width, fill, alignment and `+` are honoured.

use super::Dd;
use std::fmt;

/// Significant digits printed by default.
const DEFAULT_DIGITS: usize = 32;
/// Significant digits ever generated (past the precision of the value).
const MAX_DIGITS: usize = 34;

/// `(digits, e)`: the first `n ≤ 34` significant decimal digits of the finite `a > 0`, rounded
/// half up on the next digit, with `a ≈ d₁.d₂d₃… × 10ᵉ` (`n = 0` gives either no digit or,
/// when `a` rounds up to `10^(e+1)`, the digit 1 with `e + 1`).
fn digits(a: Dd, n: usize) -> (Vec<u8>, i32) {
    let mut e = a.hi.log10().floor() as i32;
    let mut y = scale_pow10(a, -e);
    if y.hi >= 10.0 {
        y = y.div_f64(10.0);
        e += 1;
    } else if y.hi < 1.0 {
        y = y.mul_f64(10.0);
        e -= 1;
    }
    let mut out = Vec::with_capacity(n + 1);
    for _ in 0..=n {
        let d = y.floor_dd().hi.clamp(0.0, 9.0);
        out.push(d as u8);
        y = y.add_f64(-d).mul_f64(10.0);
    }
    let up = out.pop().is_some_and(|d| d >= 5);
    if up && !carry(&mut out) {
        out.insert(0, 1);
        out.truncate(n.max(1));
        e += 1;
    }
    (out, e)
}

/// Adds one unit in the last digit; false if it carries out of the first (all were 9).
fn carry(d: &mut [u8]) -> bool {
    for x in d.iter_mut().rev() {
        if *x == 9 {
            *x = 0;
        } else {
            *x += 1;
            return true;
        }
    }
    false
}

/// `a·10ᵏ` (in two steps for |k| > 280 so that 10ᵏ stays in range).
fn scale_pow10(a: Dd, k: i32) -> Dd {
    if k.abs() > 280 {
        let s = 200 * k.signum();
        return scale_pow10(a * Dd::from_f64(10.0).powi_dd(s), k - s);
    }
    let p = Dd::from_f64(10.0).powi_dd(k.abs());
    if k < 0 {
        a / p
    } else {
        a * p
    }
}

fn push_digits(s: &mut String, d: &[u8]) {
    s.extend(d.iter().map(|&x| char::from(b'0' + x)));
}

/// `|x|` in plain notation with `prec` decimals.
fn fixed(a: Dd, prec: usize) -> String {
    let mut s = String::new();
    if a.hi == 0.0 {
        s.push('0');
    } else {
        let e0 = a.hi.log10().floor() as i32;
        let sig = e0 + 1 + prec as i32;
        let (mut d, e) = if sig < 0 {
            (Vec::new(), e0)
        } else {
            digits(a, (sig as usize).min(MAX_DIGITS))
        };
        // Digits for positions 10^e down to 10^-prec.
        let want = (e + 1 + prec as i32).max(0) as usize;
        d.resize(want, 0);
        let int_len = (e + 1).max(0) as usize;
        if int_len == 0 {
            s.push('0');
        } else {
            push_digits(&mut s, &d[..int_len]);
        }
        if prec > 0 {
            s.push('.');
            let lead = (-(e + 1)).max(0) as usize;
            let zeros = lead.min(prec);
            s.extend(std::iter::repeat_n('0', zeros));
            push_digits(&mut s, &d[int_len..][..prec - zeros]);
        }
        return s;
    }
    if prec > 0 {
        s.push('.');
        s.extend(std::iter::repeat_n('0', prec));
    }
    s
}

/// `|x|` as `d.ddd…e±k`: `prec` decimals, or the default digits with trailing zeros dropped.
fn scientific(a: Dd, prec: Option<usize>) -> String {
    if a.hi == 0.0 {
        return match prec {
            Some(p) if p > 0 => format!("0.{}e0", "0".repeat(p)),
            _ => "0e0".to_string(),
        };
    }
    let n = prec.map_or(DEFAULT_DIGITS, |p| p + 1);
    let (mut d, e) = digits(a, n.min(MAX_DIGITS));
    d.resize(n, 0);
    if prec.is_none() {
        while d.len() > 1 && d.last() == Some(&0) {
            d.pop();
        }
    }
    let mut s = String::new();
    push_digits(&mut s, &d[..1]);
    if d.len() > 1 {
        s.push('.');
        push_digits(&mut s, &d[1..]);
    }
    s.push_str(&format!("e{e}"));
    s
}

/// `|x|` for `{}`: plain with the default digits (trailing zeros dropped) when
/// 10⁻⁵ ≤ |x| < 10³², else scientific.
fn shortest(a: Dd) -> String {
    if a.hi == 0.0 {
        return "0".to_string();
    }
    let (_, e) = digits(a, DEFAULT_DIGITS);
    if !(-5..32).contains(&e) {
        return scientific(a, None);
    }
    let decimals = (DEFAULT_DIGITS as i32 - 1 - e).max(0) as usize;
    let s = fixed(a, decimals);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Writes NaN/∞ as f64 does, else the magnitude from `body` with the sign and padding.
fn write_with(f: &mut fmt::Formatter<'_>, x: Dd, body: impl Fn(Dd) -> String) -> fmt::Result {
    if x.is_nan() {
        return f.pad_integral(true, "", "NaN");
    }
    let neg = x.hi.is_sign_negative();
    if x.hi.is_infinite() {
        return f.pad_integral(!neg, "", "inf");
    }
    let a = if neg { -x } else { x };
    f.pad_integral(!neg, "", &body(a))
}

impl fmt::Display for Dd {
    /// Decimal value: `{}` 32 significant digits (see the module docs), `{:.N}` N decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match f.precision() {
            Some(p) => write_with(f, *self, |a| fixed(a, p)),
            None => write_with(f, *self, shortest),
        }
    }
}

impl fmt::LowerExp for Dd {
    /// Scientific notation: `{:e}` 32 significant digits trimmed, `{:.Ne}` N decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = f.precision();
        write_with(f, *self, |a| scientific(a, p))
    }
}

impl fmt::Debug for Dd {
    /// As `Display`; `{:#?}` prints the two words, `Dd { hi: …, lo: … }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct("Dd")
                .field("hi", &self.hi)
                .field("lo", &self.lo)
                .finish();
        }
        fmt::Display::fmt(self, f)
    }
}
