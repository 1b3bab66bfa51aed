//! The implementations of the demo services. They are plain trait implementations, callable
//! directly (as the tests below do) or served through the generated `*Server` wrappers.

use rpc_core::{Request, Status};

use crate::calc::calculator_server::Calculator;
use crate::calc::{
    AddReply, AddRequest, DivideReply, DivideRequest, EvaluateReply, EvaluateRequest,
    MultiplyReply, MultiplyRequest, SubtractReply, SubtractRequest,
};
use crate::echo::echo_server::Echo;
use crate::echo::{EchoReply, EchoRequest};
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
    fn add(&self, request: Request<AddRequest>) -> Result<AddReply, Status> {
        let AddRequest { a, b } = request.into_inner();
        tracing::debug!("Add({a}, {b})");
        let value = a.checked_add(b).ok_or_else(|| overflow(a, '+', b))?;
        Ok(AddReply { value })
    }

    fn subtract(&self, request: Request<SubtractRequest>) -> Result<SubtractReply, Status> {
        let SubtractRequest { a, b } = request.into_inner();
        tracing::debug!("Subtract({a}, {b})");
        let value = a.checked_sub(b).ok_or_else(|| overflow(a, '-', b))?;
        Ok(SubtractReply { value })
    }

    fn multiply(&self, request: Request<MultiplyRequest>) -> Result<MultiplyReply, Status> {
        let MultiplyRequest { a, b } = request.into_inner();
        tracing::debug!("Multiply({a}, {b})");
        let value = a.checked_mul(b).ok_or_else(|| overflow(a, '*', b))?;
        Ok(MultiplyReply { value })
    }

    fn divide(&self, request: Request<DivideRequest>) -> Result<DivideReply, Status> {
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
        Ok(DivideReply {
            quotient,
            remainder,
        })
    }

    fn evaluate(&self, request: Request<EvaluateRequest>) -> Result<EvaluateReply, Status> {
        let EvaluateRequest { expression } = request.into_inner();
        tracing::debug!("Evaluate({expression:?})");
        match expr::evaluate(&expression) {
            Ok(value) => Ok(EvaluateReply { value }),
            Err(err) if err.is_invalid_input() => Err(Status::invalid_argument(err.to_string())),
            Err(err) => Err(Status::out_of_range(err.to_string())),
        }
    }
}

/// `echo.Echo`: replies with the request's payload. Cheap enough to run on the poller thread
/// (`Execution::Inline`).
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoService;

impl Echo for EchoService {
    fn echo(&self, request: Request<EchoRequest>) -> Result<EchoReply, Status> {
        let EchoRequest { payload } = request.into_inner();
        Ok(EchoReply { payload })
    }
}

#[cfg(test)]
mod tests {
    use rpc_core::codegen::Code;

    use super::*;

    fn fails<T: std::fmt::Debug>(r: Result<T, Status>, code: Code, message: &str) {
        match r {
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
        assert_eq!(c.add(r(7, 5)).unwrap().value, 12);
        fails(c.add(r(i64::MAX, 1)), Code::OutOfRange, "integer overflow");
        let r = |a, b| Request::new(SubtractRequest { a, b });
        assert_eq!(c.subtract(r(7, 12)).unwrap().value, -5);
        fails(
            c.subtract(r(i64::MIN, 1)),
            Code::OutOfRange,
            "integer overflow",
        );
        let r = |a, b| Request::new(MultiplyRequest { a, b });
        assert_eq!(c.multiply(r(-6, 7)).unwrap().value, -42);
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
        let d = c.divide(r(17, 5)).unwrap();
        assert_eq!((d.quotient, d.remainder), (3, 2));
        let d = c.divide(r(-17, 5)).unwrap();
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
        assert_eq!(c.evaluate(r("2 * (3 + 4) ^ 2")).unwrap().value, 98.0);
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
        let reply = EchoService
            .echo(Request::new(EchoRequest {
                payload: payload.clone(),
            }))
            .unwrap();
        assert_eq!(reply.payload, payload);
    }
}
