//! A bounded-memory histogram of nanosecond durations for percentiles.
//!
//! The first [`EXACT_SAMPLES`] values are kept as they are, so small
//! objects (most fixtures, rarely used locks) get exact percentiles. Past
//! that the values move into log-linear buckets: each power of two is cut
//! into [`SUB_BUCKETS`] equal parts, so a bucket's width is at most 1/64 of
//! its lower bound. A percentile read from the buckets is reported as the
//! bucket's upper bound, clamped to the exact maximum: it is never below
//! the true value and at most 1/64 (1.6 %) above it.
//!
//! Why not a full HDR histogram with a fixed range: locks number in the
//! thousands and most have short holds, so buckets are allocated only up
//! to the largest power of two seen (a 1 ms maximum needs 20 x 64 counters).

use serde::Serialize;

/// Values kept verbatim before switching to buckets.
pub const EXACT_SAMPLES: usize = 256;
/// Buckets per power of two (relative precision 1/64).
pub const SUB_BUCKETS: u64 = 64;
const SUB_BITS: u32 = 6;

/// Histogram of durations plus exact count, total and maximum.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    count: u64,
    total: u128,
    max: u64,
    exact: Vec<u64>,
    buckets: Vec<u32>,
    /// Set once `exact` has spilled into `buckets`.
    spilled: bool,
}

/// Summary of a histogram as it appears in reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Sum of all values, ns.
    pub total: u64,
    /// Values that the mean, max and p99 are over (for lock waits: the
    /// waits that took time, see [`Histogram::nonzero_summary`]).
    pub count: u64,
    /// Mean value, ns (0 when empty).
    pub mean: f64,
    /// Largest value, ns (exact).
    pub max: u64,
    /// 99th percentile, ns: exact while a histogram holds at most
    /// [`EXACT_SAMPLES`] values, else at most 1/64 above the true value.
    pub p99: u64,
}

fn bucket_of(v: u64) -> usize {
    if v < SUB_BUCKETS {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) - SUB_BUCKETS; // 0..SUB_BUCKETS
    ((u64::from(shift) + 1) * SUB_BUCKETS + sub) as usize
}

/// Largest value that falls into bucket `b`.
fn bucket_high(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB_BUCKETS {
        return b;
    }
    let shift = b / SUB_BUCKETS - 1;
    let sub = b % SUB_BUCKETS;
    let low = (SUB_BUCKETS + sub) << shift;
    low.saturating_add((1u64 << shift) - 1)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one value.
    pub fn record(&mut self, v: u64) {
        self.count += 1;
        self.total += u128::from(v);
        self.max = self.max.max(v);
        if !self.spilled {
            if self.exact.len() < EXACT_SAMPLES {
                self.exact.push(v);
                return;
            }
            self.spilled = true;
            for x in std::mem::take(&mut self.exact) {
                self.bump(x);
            }
        }
        self.bump(v);
    }

    fn bump(&mut self, v: u64) {
        let b = bucket_of(v);
        if b >= self.buckets.len() {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] = self.buckets[b].saturating_add(1);
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values (saturated to u64).
    pub fn total(&self) -> u64 {
        u64::try_from(self.total).unwrap_or(u64::MAX)
    }

    /// Largest value.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `q`-quantile (0 < q <= 1) by the nearest-rank method: the
    /// smallest value with at least `ceil(q * count)` values at or below it.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        self.value_at_rank(rank)
    }

    /// Total, mean, max and p99.
    pub fn summary(&self) -> Summary {
        Summary {
            total: self.total(),
            count: self.count,
            mean: if self.count == 0 {
                0.0
            } else {
                self.total as f64 / self.count as f64
            },
            max: self.max,
            p99: self.quantile(0.99),
        }
    }

    /// Values equal to 0.
    fn zeros(&self) -> u64 {
        if self.spilled {
            // Bucket 0 holds exactly the value 0 (buckets below
            // SUB_BUCKETS are one value wide).
            self.buckets.first().map_or(0, |&n| u64::from(n))
        } else {
            self.exact.iter().filter(|&&v| v == 0).count() as u64
        }
    }

    /// Total, mean, max and p99 over the values above 0 only. A lock's
    /// wait histogram holds one value per attempt, and an attempt that got
    /// the lock at once waited 0 ns: with them the p99 of a lock taken
    /// 20,000 times with 100 contended waits is 0 ns and the mean is
    /// diluted by the uncontended majority. The mean and p99 a user wants
    /// are those of the waits that happened. (The total is the same.)
    pub fn nonzero_summary(&self) -> Summary {
        let zeros = self.zeros();
        let n = self.count - zeros.min(self.count);
        if n == 0 {
            return Summary {
                total: self.total(),
                ..Summary::default()
            };
        }
        // The nearest rank among the non-zero values, shifted past the
        // zeros (which sort first).
        let rank = ((0.99 * n as f64).ceil() as u64).clamp(1, n);
        Summary {
            total: self.total(),
            count: n,
            mean: self.total as f64 / n as f64,
            max: self.max,
            p99: self.value_at_rank(zeros + rank),
        }
    }

    /// The value of 1-based `rank` in sorted order (bucket upper bound,
    /// clamped to the maximum, once spilled).
    fn value_at_rank(&self, rank: u64) -> u64 {
        if !self.spilled {
            let mut v = self.exact.clone();
            v.sort_unstable();
            return v[(rank.clamp(1, v.len() as u64) - 1) as usize];
        }
        let mut seen = 0u64;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                return bucket_high(b).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_below_threshold() {
        let mut h = Histogram::new();
        for v in 1..=100u64 {
            h.record(v * 10);
        }
        let s = h.summary();
        assert_eq!(s.total, 50_500);
        assert_eq!(s.max, 1000);
        assert_eq!(s.p99, 990);
        assert_eq!(s.mean, 505.0);
    }

    #[test]
    fn bucketed_p99_is_bounded() {
        let mut h = Histogram::new();
        // 10_000 values 1..=10_000: true p99 = 9_900.
        for v in 1..=10_000u64 {
            h.record(v);
        }
        let p = h.quantile(0.99);
        assert!((9_900..=9_900 + 9_900 / 64).contains(&p), "p99 {p}");
        assert_eq!(h.max(), 10_000);
        assert_eq!(h.count(), 10_000);
    }

    /// A lock taken 100,020 times of which 20 waited must show
    /// the mean and p99 of those 20 waits, not 0 ns.
    #[test]
    fn nonzero_summary_is_over_contended_waits() {
        for uncontended in [230u64, 100_000] {
            let mut h = Histogram::new();
            for _ in 0..uncontended {
                h.record(0);
            }
            for v in 1..=20u64 {
                h.record(v * 1000);
            }
            if uncontended > 99 * 20 {
                assert_eq!(h.summary().p99, 0, "over all attempts the p99 is 0 ns");
            }
            let s = h.nonzero_summary();
            assert_eq!(s.count, 20);
            assert_eq!(s.total, 210_000);
            assert_eq!(s.mean, 10_500.0);
            assert_eq!(s.max, 20_000);
            // Nearest rank ceil(0.99 * 20) = 20: the largest.
            if uncontended < EXACT_SAMPLES as u64 {
                assert_eq!(s.p99, 20_000);
            } else {
                assert!((19_700..=20_000).contains(&s.p99), "{}", s.p99);
            }
        }
        let s = Histogram::new().nonzero_summary();
        assert_eq!((s.count, s.total, s.p99), (0, 0, 0));
    }

    #[test]
    fn bucket_bounds_cover_every_value() {
        for v in [0u64, 1, 63, 64, 65, 127, 128, 1000, 1 << 40, u64::MAX] {
            let b = bucket_of(v);
            assert!(bucket_high(b) >= v, "{v}");
            if b > 0 {
                assert!(bucket_high(b - 1) < v, "{v}");
            }
        }
    }
}
