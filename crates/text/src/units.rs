//! How numbers and units are written in every text output: one place, so
//! the same duration reads the same in `report`, `whatif`, `replay`,
//! `critical-path`, `barriers`, `spin` and `diff`.
//!
//! Three duration styles, each for a reason: [`ns`] picks the unit (a
//! report row spans nanoseconds to seconds); [`ms`] always writes
//! milliseconds (the replay family compares walls, and one unit down a
//! column is easier to compare than a mix); [`short_ns`] is the compact
//! form of narrow tables (the spinlock table).

/// A duration for humans: 3 decimals and the unit that fits
/// (`850 ns`, `12.500 us`, `3.250 ms`, `1.500 s`).
pub fn ns(v: u64) -> String {
    let f = v as f64;
    if v < 1_000 {
        format!("{v} ns")
    } else if v < 1_000_000 {
        format!("{:.3} us", f / 1e3)
    } else if v < 1_000_000_000 {
        format!("{:.3} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

/// [`ns`] of a fractional duration (means), rounded to the nanosecond.
pub fn ns_f64(v: f64) -> String {
    ns(v.round() as u64)
}

/// Always milliseconds, 3 decimals (`1461.250 ms`).
pub fn ms(v: u64) -> String {
    ms_f64(v as f64)
}

/// [`ms`] of a duration that may be fractional or negative (a change).
pub fn ms_f64(v: f64) -> String {
    format!("{:.3} ms", v / 1e6)
}

/// Compact duration for narrow tables: one decimal, no space (`850ns`,
/// `12.5us`, `3.2ms`, `1.50s`).
pub fn short_ns(v: u64) -> String {
    match v {
        0..=999 => format!("{v}ns"),
        1_000..=999_999 => format!("{:.1}us", v as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.2}s", v as f64 / 1e9),
    }
}

/// A ratio as a percentage with one decimal (`0.123` -> `12.3%`).
pub fn pct(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

/// An integer with thousands separators (`1,234,567`).
pub fn count(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_duration_style_writes_its_unit() {
        assert_eq!(ns(850), "850 ns");
        assert_eq!(ns(12_500), "12.500 us");
        assert_eq!(ns(3_250_000), "3.250 ms");
        assert_eq!(ns(1_500_000_000), "1.500 s");
        assert_eq!(ns_f64(849.6), "850 ns");
        assert_eq!(ms(1_461_250_000), "1461.250 ms");
        assert_eq!(ms_f64(-2.5e6), "-2.500 ms");
        assert_eq!(short_ns(850), "850ns");
        assert_eq!(short_ns(12_500), "12.5us");
        assert_eq!(short_ns(3_250_000), "3.2ms");
        assert_eq!(short_ns(1_500_000_000), "1.50s");
    }

    #[test]
    fn counts_and_percentages() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(pct(0.1234), "12.3%");
        assert_eq!(pct(1.0), "100.0%");
    }
}
