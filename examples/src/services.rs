//! The implementations of the demo services. They are plain trait implementations with async
//! handlers, callable directly (as the tests below do, with a trivial executor) or served
//! through the generated `*Server` wrappers.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use rpc_core::{Request, Response, Status, Streaming};

use crate::calc::calculator_server::Calculator;
use crate::calc::{
    AddReply, AddRequest, DivideReply, DivideRequest, EvaluateReply, EvaluateRequest,
    MultiplyReply, MultiplyRequest, SubtractReply, SubtractRequest, SumReply, SumRequest,
};
use crate::echo::echo_server::Echo;
use crate::echo::{EchoRepeatRequest, EchoReply, EchoRequest};
use crate::expr;

/// `calc.Calculator`: checked `int64` arithmetic and [`expr::evaluate`].
///
/// Overflow fails with OUT_OF_RANGE, a zero divisor with INVALID_ARGUMENT
/// (`division by zero: 1 / 0`), and an expression that does not evaluate with
/// INVALID_ARGUMENT naming the position (`syntax error at position 5: …`), or OUT_OF_RANGE
/// when its value is not a finite double.
#[derive(Debug, Clone, Copy, Default)]
pub struct CalculatorService;

fn overflow(a: i64, op: char, b: i64) -> Status {
    Status::out_of_range(format!(
        "integer overflow: {a} {op} {b} does not fit in an int64"
    ))
}

impl Calculator for CalculatorService {
    async fn add(&self, request: Request<AddRequest>) -> Result<Response<AddReply>, Status> {
        let AddRequest { a, b } = request.into_inner();
        tracing::debug!("Add({a}, {b})");
        let value = a.checked_add(b).ok_or_else(|| overflow(a, '+', b))?;
        Ok(Response::new(AddReply { value }))
    }

    async fn subtract(
        &self,
        request: Request<SubtractRequest>,
    ) -> Result<Response<SubtractReply>, Status> {
        let SubtractRequest { a, b } = request.into_inner();
        tracing::debug!("Subtract({a}, {b})");
        let value = a.checked_sub(b).ok_or_else(|| overflow(a, '-', b))?;
        Ok(Response::new(SubtractReply { value }))
    }

    async fn multiply(
        &self,
        request: Request<MultiplyRequest>,
    ) -> Result<Response<MultiplyReply>, Status> {
        let MultiplyRequest { a, b } = request.into_inner();
        tracing::debug!("Multiply({a}, {b})");
        let value = a.checked_mul(b).ok_or_else(|| overflow(a, '*', b))?;
        Ok(Response::new(MultiplyReply { value }))
    }

    async fn divide(
        &self,
        request: Request<DivideRequest>,
    ) -> Result<Response<DivideReply>, Status> {
        let DivideRequest { a, b } = request.into_inner();
        tracing::debug!("Divide({a}, {b})");
        if b == 0 {
            return Err(Status::invalid_argument(format!(
                "division by zero: {a} / 0"
            )));
        }
        // With b != 0, only i64::MIN / -1 overflows.
        let quotient = a.checked_div(b).ok_or_else(|| overflow(a, '/', b))?;
        let remainder = a.checked_rem(b).ok_or_else(|| overflow(a, '%', b))?;
        Ok(Response::new(DivideReply {
            quotient,
            remainder,
        }))
    }

    async fn evaluate(
        &self,
        request: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateReply>, Status> {
        let EvaluateRequest { expression } = request.into_inner();
        tracing::debug!("Evaluate({expression:?})");
        match expr::evaluate(&expression) {
            Ok(value) => Ok(Response::new(EvaluateReply { value })),
            Err(err) if err.is_invalid_input() => Err(Status::invalid_argument(err.to_string())),
            Err(err) => Err(Status::out_of_range(err.to_string())),
        }
    }

    async fn sum(
        &self,
        request: Request<Streaming<SumRequest>>,
    ) -> Result<Response<SumReply>, Status> {
        let mut numbers = request.into_inner();
        let mut total = SumReply::default();
        while let Some(SumRequest { value }) = numbers.message().await? {
            total.total = total
                .total
                .checked_add(value)
                .ok_or_else(|| overflow(total.total, '+', value))?;
            total.count += 1;
        }
        tracing::debug!("Sum of {} numbers: {}", total.count, total.total);
        Ok(Response::new(total))
    }

    type RunningTotalStream = BoxStream<'static, Result<SumReply, Status>>;

    async fn running_total(
        &self,
        request: Request<Streaming<SumRequest>>,
    ) -> Result<Response<Self::RunningTotalStream>, Status> {
        // Each number read yields the total so far; an overflow ends the stream with
        // OUT_OF_RANGE.
        let totals = request
            .into_inner()
            .scan(Some(SumReply::default()), |state, number| {
                let next = match (state.take(), number) {
                    (Some(mut total), Ok(SumRequest { value })) => {
                        match total.total.checked_add(value) {
                            Some(sum) => {
                                total.total = sum;
                                total.count += 1;
                                *state = Some(total);
                                Some(Ok(total))
                            }
                            None => Some(Err(overflow(total.total, '+', value))),
                        }
                    }
                    (Some(_), Err(status)) => Some(Err(status)),
                    (None, _) => None,
                };
                futures::future::ready(next)
            });
        Ok(Response::new(totals.boxed()))
    }
}

/// `echo.Echo`: replies with the request's payload. Cheap enough to run on the poller thread
/// (`Execution::Inline`).
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoService;

/// The most copies `EchoRepeat` sends.
pub const MAX_REPEAT: u32 = 100_000;

impl Echo for EchoService {
    async fn echo(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let EchoRequest { payload } = request.into_inner();
        Ok(Response::new(EchoReply { payload }))
    }

    type EchoRepeatStream = BoxStream<'static, Result<EchoReply, Status>>;

    async fn echo_repeat(
        &self,
        request: Request<EchoRepeatRequest>,
    ) -> Result<Response<Self::EchoRepeatStream>, Status> {
        let EchoRepeatRequest {
            payload,
            count,
            interval_ms,
        } = request.into_inner();
        if count > MAX_REPEAT {
            return Err(Status::invalid_argument(format!(
                "count {count} is above the limit of {MAX_REPEAT}"
            )));
        }
        let interval = Duration::from_millis(interval_ms.into());
        let copies = futures::stream::iter(0..count).then(move |i| {
            let payload = payload.clone();
            async move {
                if i > 0 && !interval.is_zero() {
                    // No async runtime needed: futures-timer's thread wakes the task.
                    futures_timer::Delay::new(interval).await;
                }
                Ok(EchoReply { payload })
            }
        });
        Ok(Response::new(copies.boxed()))
    }
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use rpc_core::codegen::Code;

    use super::*;

    fn fails<T: std::fmt::Debug>(
        r: impl std::future::Future<Output = Result<Response<T>, Status>>,
        code: Code,
        message: &str,
    ) {
        match block_on(r).map(Response::into_inner) {
            Err(status) => {
                assert_eq!(status.code(), code, "{status}");
                assert!(
                    status.message().starts_with(message),
                    "{status} does not start with {message:?}"
                );
            }
            Ok(v) => panic!("expected {code}, got {v:?}"),
        }
    }

    #[test]
    fn arithmetic() {
        let c = CalculatorService;
        let r = |a, b| Request::new(AddRequest { a, b });
        assert_eq!(block_on(c.add(r(7, 5))).unwrap().into_inner().value, 12);
        fails(c.add(r(i64::MAX, 1)), Code::OutOfRange, "integer overflow");
        let r = |a, b| Request::new(SubtractRequest { a, b });
        assert_eq!(
            block_on(c.subtract(r(7, 12))).unwrap().into_inner().value,
            -5
        );
        fails(
            c.subtract(r(i64::MIN, 1)),
            Code::OutOfRange,
            "integer overflow",
        );
        let r = |a, b| Request::new(MultiplyRequest { a, b });
        assert_eq!(
            block_on(c.multiply(r(-6, 7))).unwrap().into_inner().value,
            -42
        );
        fails(
            c.multiply(r(i64::MAX, 2)),
            Code::OutOfRange,
            "integer overflow",
        );
    }

    #[test]
    fn division() {
        let c = CalculatorService;
        let r = |a, b| Request::new(DivideRequest { a, b });
        let d = block_on(c.divide(r(17, 5))).unwrap().into_inner();
        assert_eq!((d.quotient, d.remainder), (3, 2));
        let d = block_on(c.divide(r(-17, 5))).unwrap().into_inner();
        assert_eq!((d.quotient, d.remainder), (-3, -2));
        fails(
            c.divide(r(1, 0)),
            Code::InvalidArgument,
            "division by zero: 1 / 0",
        );
        fails(
            c.divide(r(i64::MIN, -1)),
            Code::OutOfRange,
            "integer overflow",
        );
    }

    #[test]
    fn evaluation() {
        let c = CalculatorService;
        let r = |s: &str| {
            Request::new(EvaluateRequest {
                expression: s.to_owned(),
            })
        };
        assert_eq!(
            block_on(c.evaluate(r("2 * (3 + 4) ^ 2")))
                .unwrap()
                .into_inner()
                .value,
            98.0
        );
        fails(
            c.evaluate(r("2 + * 3")),
            Code::InvalidArgument,
            "syntax error at position 5",
        );
        fails(
            c.evaluate(r("1 / 0")),
            Code::InvalidArgument,
            "division by zero",
        );
        fails(
            c.evaluate(r("10 ^ 400")),
            Code::OutOfRange,
            "result out of range",
        );
    }

    #[test]
    fn echo_returns_the_payload() {
        let payload = vec![1u8, 2, 3, 255];
        let reply = block_on(EchoService.echo(Request::new(EchoRequest {
            payload: payload.clone(),
        })))
        .unwrap()
        .into_inner();
        assert_eq!(reply.payload, payload);
    }
}
