//! What a load run measures and how it is reported: every measured call's latency (kept
//! and sorted: exact nearest-rank percentiles), the call rate over the measured phase, and
//! the failures, printed as one JSON line.
//!
//! ```
//! use std::time::Duration;
//! use rpc_benches::report::{LoadParams, LoadResult, Tally};
//!
//! let params = LoadParams { size: 64, outstanding: 1, count: 4, warmup: 0 };
//! let mut tally = Tally::new(4);
//! for us in [10, 20, 30, 40] {
//!     tally.success(Duration::from_micros(us), true);
//! }
//! let result = LoadResult::new("ours", "tcp", params, tally, Duration::from_millis(1));
//! assert_eq!(
//!     result.to_json(),
//!     r#"{"system":"ours","transport":"tcp","size":64,"outstanding":1,"count":4,"p50_us":20.000,"p99_us":40.000,"p999_us":40.000,"calls_per_s":4000.0,"errors":0}"#
//! );
//! ```

use std::time::Duration;

/// The load of one `rpc-bench load` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadParams {
    /// Payload bytes per request (and reply).
    pub size: usize,
    /// Calls kept in flight on the one connection.
    pub outstanding: usize,
    /// Measured calls.
    pub count: u64,
    /// Unmeasured calls made first.
    pub warmup: u64,
}

/// After this many failed calls in a row a run gives up (the server is most likely gone)
/// and counts every call it did not make as failed.
pub const GIVE_UP_AFTER: u32 = 100;

/// The outcome of the calls of one run (or of one of its tasks), as they complete.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    latencies_ns: Vec<u64>,
    errors: u64,
    failed_in_a_row: u32,
    first_error: Option<String>,
}

impl Tally {
    /// An empty tally with room for `measured` latencies.
    pub fn new(measured: u64) -> Tally {
        Tally {
            latencies_ns: Vec::with_capacity(usize::try_from(measured).unwrap_or(0)),
            ..Tally::default()
        }
    }

    /// A call whose reply matched its request; its latency is kept if `measured`.
    pub fn success(&mut self, latency: Duration, measured: bool) {
        self.failed_in_a_row = 0;
        if measured {
            self.latencies_ns
                .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
        }
    }

    /// A call that failed or whose reply differed from its request.
    pub fn failure(&mut self, what: impl FnOnce() -> String) {
        self.errors += 1;
        self.failed_in_a_row += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
    }

    /// Calls that were never made (the run gave up or lost its connection) count as failed.
    pub fn not_made(&mut self, calls: u64, why: impl FnOnce() -> String) {
        if calls == 0 {
            return;
        }
        self.errors += calls;
        if self.first_error.is_none() {
            self.first_error = Some(why());
        }
    }

    /// Records `what` as the first failure's description if none is recorded yet, without
    /// counting a failure (for the cause behind failures counted elsewhere).
    pub fn note(&mut self, what: String) {
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }

    /// Whether the run should stop: [`GIVE_UP_AFTER`] failures in a row.
    pub fn gave_up(&self) -> bool {
        self.failed_in_a_row >= GIVE_UP_AFTER
    }

    /// Failed calls so far.
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// The first failure's description.
    pub fn first_error(&self) -> Option<&str> {
        self.first_error.as_deref()
    }

    /// Adds another tally (another task's, or the warm-up's failures) to this one.
    pub fn merge(&mut self, other: Tally) {
        self.latencies_ns.extend(other.latencies_ns);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Nearest-rank percentile of sorted samples, in microseconds.
fn percentile_us(sorted_ns: &[u64], p: f64) -> Option<f64> {
    if sorted_ns.is_empty() {
        return None;
    }
    let rank = (p * sorted_ns.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted_ns.len()) - 1;
    Some(sorted_ns[i] as f64 / 1000.0)
}

/// The summary `rpc-bench load` prints.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// `ours`, `tcp` or `tonic`.
    pub system: String,
    /// The transport the calls went over (`tcp`, `verbs`, ...).
    pub transport: String,
    /// The load.
    pub params: LoadParams,
    /// Median latency in µs (`None` without a successful measured call).
    pub p50_us: Option<f64>,
    /// 99th percentile in µs.
    pub p99_us: Option<f64>,
    /// 99.9th percentile in µs.
    pub p999_us: Option<f64>,
    /// Successful measured calls per second of the measured phase.
    pub calls_per_s: f64,
    /// Failed or mismatched calls (warm-up included), plus calls never made.
    pub errors: u64,
    /// The first failure, for stderr.
    pub first_error: Option<String>,
}

impl LoadResult {
    /// Summarizes a run whose measured phase took `elapsed`.
    pub fn new(
        system: &str,
        transport: &str,
        params: LoadParams,
        mut tally: Tally,
        elapsed: Duration,
    ) -> LoadResult {
        tally.latencies_ns.sort_unstable();
        let ok = tally.latencies_ns.len() as f64;
        let secs = elapsed.as_secs_f64();
        LoadResult {
            system: system.to_owned(),
            transport: transport.to_owned(),
            params,
            p50_us: percentile_us(&tally.latencies_ns, 0.50),
            p99_us: percentile_us(&tally.latencies_ns, 0.99),
            p999_us: percentile_us(&tally.latencies_ns, 0.999),
            calls_per_s: if secs > 0.0 { ok / secs } else { 0.0 },
            errors: tally.errors,
            first_error: tally.first_error,
        }
    }

    /// A run that could not start (no connection): every call failed.
    pub fn failed(system: &str, transport: &str, params: LoadParams, why: String) -> LoadResult {
        let mut tally = Tally::new(0);
        tally.not_made(params.count + params.warmup, || why);
        LoadResult::new(system, transport, params, tally, Duration::ZERO)
    }

    /// The one-line JSON object.
    pub fn to_json(&self) -> String {
        let us = |v: Option<f64>| v.map_or_else(|| "null".to_owned(), |v| format!("{v:.3}"));
        format!(
            "{{\"system\":\"{}\",\"transport\":\"{}\",\"size\":{},\"outstanding\":{},\"count\":{},\
             \"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"calls_per_s\":{:.1},\"errors\":{}}}",
            json_escape(&self.system),
            json_escape(&self.transport),
            self.params.size,
            self.params.outstanding,
            self.params.count,
            us(self.p50_us),
            us(self.p99_us),
            us(self.p999_us),
            self.calls_per_s,
            self.errors
        )
    }
}

/// Escapes a string for a JSON string literal.
pub fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let samples: Vec<u64> = (1..=1000).map(|us| us * 1000).collect();
        assert_eq!(percentile_us(&samples, 0.5), Some(500.0));
        assert_eq!(percentile_us(&samples, 0.99), Some(990.0));
        assert_eq!(percentile_us(&samples, 0.999), Some(999.0));
        assert_eq!(percentile_us(&[], 0.5), None);
        assert_eq!(percentile_us(&[7000], 0.999), Some(7.0));
    }

    #[test]
    fn failed_run_prints_nulls() {
        let params = LoadParams {
            size: 1,
            outstanding: 2,
            count: 10,
            warmup: 1,
        };
        let r = LoadResult::failed("tonic", "tcp", params, "refused".to_owned());
        assert_eq!(r.errors, 11);
        assert!(r.to_json().contains("\"p50_us\":null"));
        assert!(r.to_json().ends_with("\"calls_per_s\":0.0,\"errors\":11}"));
    }

    #[test]
    fn give_up_after_consecutive_failures() {
        let mut t = Tally::new(0);
        for _ in 0..GIVE_UP_AFTER - 1 {
            t.failure(|| "x".to_owned());
        }
        t.success(Duration::from_micros(1), false);
        t.failure(|| "y".to_owned());
        assert!(!t.gave_up());
        for _ in 0..GIVE_UP_AFTER {
            t.failure(|| "z".to_owned());
        }
        assert!(t.gave_up());
        assert_eq!(t.first_error(), Some("x"));
    }

    #[test]
    fn escapes() {
        assert_eq!(json_escape("a\"b\\c\n"), "a\\\"b\\\\c\\u000a");
    }
}
