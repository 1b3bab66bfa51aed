//! `rpc-bench stream`: the message rate of ONE server stream of ours.
//!
//! The client calls `EchoRepeat` (server streaming) on an `ours` server started with
//! `--async` (the handler returns [`crate::ours::Repeat`], which always has its next message
//! ready, so the call's flow control alone paces the stream) and reads the messages with the
//! blocking API ([`rpc_core::Streaming::blocking_message`]), checking each against the
//! request's payload. First one unmeasured stream of `--warmup` messages on the same
//! connection, then the measured one of `--count`: its rate is `count` over the time from
//! issuing the call to reading the end of the stream (the trailers), so the call's set-up
//! is included (one round trip, negligible against 10⁴–10⁵ messages).
//!
//! ```text
//! rpc-bench serve --system ours --async --listen 127.0.0.1:50070 &
//! rpc-bench stream --connect 127.0.0.1:50070 --size 64 --count 100000
//! {"system":"ours","transport":"tcp","kind":"server_stream","size":64,"count":100000,..}
//! ```

use std::time::{Duration, Instant};

use rpc_core::{Client, Request, Response, TransportKind};

use crate::echo::echo_client::blocking::EchoClient;
use crate::echo::EchoRepeatRequest;
use crate::payload::Payload;
use crate::report::json_escape;

/// Most messages one `EchoRepeat` call may ask for (the field is a `u32`).
pub const MAX_COUNT: u64 = u32::MAX as u64;

/// A stream's deadline: far above what any stream of the benchmark takes, so that a stalled
/// stream fails the run instead of hanging it.
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(300);

/// What `rpc-bench stream` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamParams {
    /// Payload bytes of each message.
    pub size: usize,
    /// Messages of the measured stream.
    pub count: u64,
    /// Messages of the unmeasured stream before it (0: none).
    pub warmup: u64,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamResult {
    /// The transport the stream went over.
    pub transport: String,
    /// The run's parameters.
    pub params: StreamParams,
    /// Messages of the measured stream that arrived and matched.
    pub received: u64,
    /// `received` over the measured stream's wall time.
    pub messages_per_s: f64,
    /// From issuing the measured call to its first message, µs (`None`: no message came).
    pub first_message_us: Option<f64>,
    /// Failures: a stream that failed or ended early (each missing message counts), a
    /// message that differed from the request's payload, a connection that did not open.
    pub errors: u64,
    /// The first failure, for stderr.
    pub first_error: Option<String>,
}

impl StreamResult {
    /// The one-line JSON object.
    pub fn to_json(&self) -> String {
        let first = self
            .first_message_us
            .map_or_else(|| "null".to_owned(), |v| format!("{v:.3}"));
        format!(
            "{{\"system\":\"ours\",\"transport\":\"{}\",\"kind\":\"server_stream\",\"size\":{},\
             \"count\":{},\"received\":{},\"messages_per_s\":{:.1},\"first_message_us\":{first},\
             \"errors\":{}}}",
            json_escape(&self.transport),
            self.params.size,
            self.params.count,
            self.received,
            self.messages_per_s,
            self.errors
        )
    }
}

/// One stream's outcome.
struct Outcome {
    received: u64,
    first_message: Option<Duration>,
    elapsed: Duration,
    errors: u64,
    first_error: Option<String>,
}

impl Outcome {
    fn fail(&mut self, errors: u64, why: impl FnOnce() -> String) {
        self.errors += errors;
        if self.first_error.is_none() {
            self.first_error = Some(why());
        }
    }
}

/// Reads one stream of `count` copies of `payload.request(seq)`.
fn one_stream(echo: &EchoClient, payload: &Payload, seq: u64, count: u64) -> Outcome {
    let expected = payload.request(seq);
    let mut request = Request::new(EchoRepeatRequest {
        payload: expected.clone(),
        count: count as u32,
        interval_ms: 0,
    });
    request.set_timeout(STREAM_TIMEOUT);
    let mut outcome = Outcome {
        received: 0,
        first_message: None,
        elapsed: Duration::ZERO,
        errors: 0,
        first_error: None,
    };
    let start = Instant::now();
    let mut stream = match echo.echo_repeat(request).map(Response::into_inner) {
        Ok(stream) => stream,
        Err(status) => {
            outcome.fail(count, || format!("stream {seq}: the call failed: {status}"));
            return outcome;
        }
    };
    let mut mismatched = 0u64;
    loop {
        match stream.blocking_message() {
            Ok(Some(reply)) => {
                if outcome.first_message.is_none() {
                    outcome.first_message = Some(start.elapsed());
                }
                if reply.payload == expected {
                    outcome.received += 1;
                } else {
                    mismatched += 1;
                }
            }
            Ok(None) => break,
            Err(status) => {
                let got = outcome.received + mismatched;
                outcome.fail(0, || {
                    format!("stream {seq}: failed after {got} of {count} messages: {status}")
                });
                break;
            }
        }
    }
    outcome.elapsed = start.elapsed();
    if mismatched > 0 {
        outcome.fail(mismatched, || {
            format!("stream {seq}: {mismatched} messages differed from the request's payload")
        });
    }
    let got = outcome.received + mismatched;
    if got < count {
        outcome.fail(count - got, || {
            format!("stream {seq}: ended after {got} of {count} messages")
        });
    } else if got > count {
        outcome.fail(got - count, || {
            format!("stream {seq}: {got} messages instead of {count}")
        });
    }
    outcome
}

/// Runs the warm-up stream, then the measured one, against the `--async` server at `addr`.
pub fn run(addr: &str, transport: TransportKind, params: StreamParams) -> StreamResult {
    let mut result = StreamResult {
        transport: transport.as_str().to_owned(),
        params,
        received: 0,
        messages_per_s: 0.0,
        first_message_us: None,
        errors: 0,
        first_error: None,
    };
    let client = match Client::builder().transport(transport).connect(addr) {
        Ok(client) => client,
        Err(err) => {
            result.errors = params.count + params.warmup;
            result.first_error = Some(format!(
                "cannot connect to {addr} over {}: {err}",
                transport.as_str()
            ));
            return result;
        }
    };
    result.transport = client.transport_name().to_owned();
    let echo = EchoClient::new(client);
    let payload = Payload::new(params.size);
    let mut errors = 0;
    let mut first_error = None;
    if params.warmup > 0 {
        let warm = one_stream(&echo, &payload, 0, params.warmup);
        errors += warm.errors;
        first_error = warm.first_error;
    }
    let measured = one_stream(&echo, &payload, 1, params.count);
    let secs = measured.elapsed.as_secs_f64();
    result.received = measured.received;
    result.messages_per_s = if secs > 0.0 {
        measured.received as f64 / secs
    } else {
        0.0
    };
    result.first_message_us = measured.first_message.map(|d| d.as_secs_f64() * 1e6);
    result.errors = errors + measured.errors;
    result.first_error = first_error.or(measured.first_error);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line() {
        let r = StreamResult {
            transport: "tcp".to_owned(),
            params: StreamParams {
                size: 64,
                count: 10,
                warmup: 0,
            },
            received: 10,
            messages_per_s: 1234.56,
            first_message_us: Some(12.5),
            errors: 0,
            first_error: None,
        };
        assert_eq!(
            r.to_json(),
            r#"{"system":"ours","transport":"tcp","kind":"server_stream","size":64,"count":10,"received":10,"messages_per_s":1234.6,"first_message_us":12.500,"errors":0}"#
        );
    }
}
