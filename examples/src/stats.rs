//! Latency statistics for the benchmark clients: record every call's duration, then read
//! percentiles (nearest-rank, exact: the samples are kept and sorted) and a call rate.
//!
//! ```
//! use std::time::Duration;
//! use rpc_examples::stats::Latencies;
//!
//! let mut latencies = Latencies::new();
//! for us in 1..=1000 {
//!     latencies.record(Duration::from_micros(us));
//! }
//! let summary = latencies.summary().unwrap();
//! assert_eq!(summary.p50, Duration::from_micros(500));
//! assert_eq!(summary.p99, Duration::from_micros(990));
//! assert_eq!(summary.p999, Duration::from_micros(999));
//! ```

use std::fmt;
use std::time::Duration;

/// A set of recorded call durations.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    samples: Vec<Duration>,
}

impl Latencies {
    /// An empty set.
    pub fn new() -> Latencies {
        Latencies::default()
    }

    /// An empty set with room for `capacity` samples, so that recording does not allocate.
    pub fn with_capacity(capacity: usize) -> Latencies {
        Latencies {
            samples: Vec::with_capacity(capacity),
        }
    }

    /// Records one call's duration.
    pub fn record(&mut self, duration: Duration) {
        self.samples.push(duration);
    }

    /// Adds all of `other`'s samples (e.g. another thread's) to this set.
    pub fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
    }

    /// The number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The distribution's summary, or `None` if no sample was recorded. Sorts the samples.
    pub fn summary(&mut self) -> Option<Summary> {
        if self.samples.is_empty() {
            return None;
        }
        self.samples.sort_unstable();
        let sorted = &self.samples;
        let total_nanos: u128 = sorted.iter().map(Duration::as_nanos).sum();
        let mean_nanos = total_nanos / sorted.len() as u128;
        Some(Summary {
            count: sorted.len(),
            min: sorted[0],
            mean: Duration::from_nanos(u64::try_from(mean_nanos).unwrap_or(u64::MAX)),
            p50: percentile(sorted, 50.0),
            p99: percentile(sorted, 99.0),
            p999: percentile(sorted, 99.9),
            max: sorted[sorted.len() - 1],
        })
    }
}

/// The summary of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Fastest call.
    pub min: Duration,
    /// Arithmetic mean.
    pub mean: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// Slowest call.
    pub max: Duration,
}

impl fmt::Display for Summary {
    /// One line, in microseconds: `p50 12.3 µs, p99 45.6 µs, p99.9 78.9 µs (min …, mean …,
    /// max …)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs (min {:.1}, mean {:.1}, max {:.1})",
            micros(self.p50),
            micros(self.p99),
            micros(self.p999),
            micros(self.min),
            micros(self.mean),
            micros(self.max)
        )
    }
}

/// The `p`-th percentile (0 < `p` ≤ 100) of `sorted` by the nearest-rank method: the smallest
/// sample that at least `p` percent of the samples are less than or equal to.
///
/// # Panics
///
/// If `sorted` is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    assert!(!sorted.is_empty(), "percentile of no samples");
    // The rank is computed in parts per thousand of a percent so that 99.9 % of 1000 samples is
    // exactly rank 999 (in floating point, 0.999 * 1000 is 999.0000000000001).
    let n = sorted.len() as u128;
    let p_milli = (p.clamp(0.0, 100.0) * 1000.0).round() as u128;
    let rank = (p_milli * n).div_ceil(100_000).max(1);
    sorted[(rank - 1) as usize]
}

/// `d` in microseconds, with fractions.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The rate of `calls` completed in `elapsed`; 0 when no time elapsed.
pub fn calls_per_second(calls: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        calls as f64 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<Duration> = (1..=1000).map(us).collect();
        assert_eq!(percentile(&sorted, 50.0), us(500));
        assert_eq!(percentile(&sorted, 99.0), us(990));
        assert_eq!(percentile(&sorted, 99.9), us(999));
        assert_eq!(percentile(&sorted, 100.0), us(1000));
        assert_eq!(percentile(&sorted, 0.0), us(1));

        let ten: Vec<Duration> = (1..=10).map(us).collect();
        assert_eq!(percentile(&ten, 50.0), us(5));
        assert_eq!(percentile(&ten, 99.0), us(10));
        assert_eq!(percentile(&ten, 99.9), us(10));
        assert_eq!(percentile(&[us(7)], 50.0), us(7));
    }

    #[test]
    fn summary_sorts_and_merges() {
        let mut a = Latencies::with_capacity(4);
        assert!(a.summary().is_none());
        for n in [40, 10, 30] {
            a.record(us(n));
        }
        let mut b = Latencies::new();
        b.record(us(20));
        a.merge(b);
        assert_eq!(a.len(), 4);
        let s = a.summary().unwrap();
        assert_eq!(s.count, 4);
        assert_eq!(s.min, us(10));
        assert_eq!(s.max, us(40));
        assert_eq!(s.mean, us(25));
        assert_eq!(s.p50, us(20));
        assert_eq!(s.p99, us(40));
        assert_eq!(
            s.to_string(),
            "p50 20.0 µs, p99 40.0 µs, p99.9 40.0 µs (min 10.0, mean 25.0, max 40.0)"
        );
    }

    #[test]
    fn rate() {
        assert_eq!(calls_per_second(500, Duration::from_millis(250)), 2000.0);
        assert_eq!(calls_per_second(5, Duration::ZERO), 0.0);
    }
}
