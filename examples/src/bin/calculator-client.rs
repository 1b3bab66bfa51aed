//! Runs a scripted set of calls against a `calculator-server` and checks every outcome.
//!
//! ```text
//! calculator-client [--connect ADDR:PORT] [--transport auto|tcp|verbs]
//! ```
//!
//! Connects to `--connect` (default `127.0.0.1:50051`) over `--transport` (default `auto`)
//! and prints each call with its result or its status:
//!
//! ```text
//! Add(7, 5) = 12
//! Divide(1, 0) -> INVALID_ARGUMENT: division by zero: 1 / 0
//! Evaluate("2 * (3 + 4) ^ 2") = 98
//! Evaluate("2 + * 3") -> INVALID_ARGUMENT: syntax error at position 5: expected a number or '(', found '*'
//! Sum(1, 2, ..., 100) [client streaming] = 5050
//! RunningTotal(5, -2, 10, 100) [bidirectional] = 5 3 13 113
//! ```
//!
//! The script knows what each call should return, errors included; a call whose outcome
//! differs is marked `MISMATCH`. The exit status is 0 when every outcome was as expected and 1
//! otherwise (including when the server cannot be reached), so scripts can use this binary as
//! an end-to-end check.

use std::process::ExitCode;

use rpc_core::codegen::Code;
use rpc_core::{Request, Status};
use rpc_examples::calc::calculator_client::blocking::CalculatorClient;
use rpc_examples::calc::{
    AddRequest, DivideRequest, EvaluateRequest, MultiplyRequest, SubtractRequest, SumRequest,
};
use rpc_examples::cli::{self, ClientArgs};
use rpc_examples::expr;

const DEFAULT_CONNECT: &str = "127.0.0.1:50051";

/// What a call of the script should return.
enum Expect {
    /// Success, with this result as printed.
    Value(&'static str),
    /// Failure with this code and a message that starts with this text.
    Error(Code, &'static str),
}

impl Expect {
    fn matches(&self, outcome: &Result<String, Status>) -> bool {
        match (self, outcome) {
            (Expect::Value(want), Ok(got)) => want == got,
            (Expect::Error(code, prefix), Err(status)) => {
                status.code() == *code && status.message().starts_with(prefix)
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            Expect::Value(v) => format!("= {v}"),
            Expect::Error(code, prefix) => format!("-> {code}: {prefix}..."),
        }
    }
}

/// Runs and reports the calls of the script.
#[derive(Default)]
struct Script {
    calls: usize,
    mismatches: usize,
}

impl Script {
    /// Reports `call`'s `outcome`, comparing it with `expect`.
    fn check(&mut self, call: &str, outcome: Result<String, Status>, expect: Expect) {
        self.calls += 1;
        let line = match &outcome {
            Ok(value) => format!("{call} = {value}"),
            Err(status) => format!("{call} -> {status}"),
        };
        if expect.matches(&outcome) {
            println!("{line}");
        } else {
            self.mismatches += 1;
            println!("{line}    <-- MISMATCH: expected {}", expect.describe());
        }
    }
}

/// `Evaluate("…")` with long expressions shortened.
fn evaluate_label(expression: &str) -> String {
    let chars: Vec<char> = expression.chars().collect();
    if chars.len() <= 40 {
        format!("Evaluate({expression:?})")
    } else {
        let head: String = chars[..16].iter().collect();
        let tail: String = chars[chars.len() - 8..].iter().collect();
        format!("Evaluate(\"{head}…{tail}\" [{} chars])", chars.len())
    }
}

fn run(calc: &CalculatorClient, script: &mut Script) {
    for (a, b, expect) in [
        (7, 5, Expect::Value("12")),
        (-40, 2, Expect::Value("-38")),
        (
            i64::MAX,
            1,
            Expect::Error(Code::OutOfRange, "integer overflow"),
        ),
    ] {
        let outcome = calc
            .add(AddRequest { a, b })
            .map(|r| r.into_inner().value.to_string());
        script.check(&format!("Add({a}, {b})"), outcome, expect);
    }
    for (a, b, expect) in [(7, 12, Expect::Value("-5")), (0, 0, Expect::Value("0"))] {
        let outcome = calc
            .subtract(SubtractRequest { a, b })
            .map(|r| r.into_inner().value.to_string());
        script.check(&format!("Subtract({a}, {b})"), outcome, expect);
    }
    for (a, b, expect) in [
        (-6, 7, Expect::Value("-42")),
        (
            i64::MAX,
            2,
            Expect::Error(Code::OutOfRange, "integer overflow"),
        ),
    ] {
        let outcome = calc
            .multiply(MultiplyRequest { a, b })
            .map(|r| r.into_inner().value.to_string());
        script.check(&format!("Multiply({a}, {b})"), outcome, expect);
    }
    for (a, b, expect) in [
        (17, 5, Expect::Value("3 remainder 2")),
        (-17, 5, Expect::Value("-3 remainder -2")),
        (
            1,
            0,
            Expect::Error(Code::InvalidArgument, "division by zero"),
        ),
        (
            i64::MIN,
            -1,
            Expect::Error(Code::OutOfRange, "integer overflow"),
        ),
    ] {
        let outcome = calc.divide(DivideRequest { a, b }).map(|r| {
            let r = r.into_inner();
            format!("{} remainder {}", r.quotient, r.remainder)
        });
        script.check(&format!("Divide({a}, {b})"), outcome, expect);
    }

    let too_deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
    let too_long = "1+".repeat(expr::MAX_LEN / 2) + "1";
    for (expression, expect) in [
        ("2 * (3 + 4) ^ 2", Expect::Value("98")),
        ("2 ^ 3 ^ 2", Expect::Value("512")),
        ("-2 ^ 2", Expect::Value("-4")),
        ("1.5e3 / 4 % 7", Expect::Value("4")),
        ("(1 + 2) * -(3 - 5) / 4", Expect::Value("1.5")),
        (
            "2 + * 3",
            Expect::Error(Code::InvalidArgument, "syntax error at position 5"),
        ),
        (
            "(1 + 2",
            Expect::Error(Code::InvalidArgument, "syntax error at position 7"),
        ),
        (
            "1 / (2 - 2)",
            Expect::Error(Code::InvalidArgument, "division by zero at position 3"),
        ),
        (
            "10 ^ 400",
            Expect::Error(Code::OutOfRange, "result out of range"),
        ),
        (
            &too_deep,
            Expect::Error(Code::InvalidArgument, "expression nested too deeply"),
        ),
        (
            &too_long,
            Expect::Error(Code::InvalidArgument, "expression too long"),
        ),
    ] {
        let outcome = calc
            .evaluate(EvaluateRequest {
                expression: expression.to_owned(),
            })
            .map(|r| r.into_inner().value.to_string());
        script.check(&evaluate_label(expression), outcome, expect);
    }

    // The same stubs, asynchronously: start 32 calls (fewer than the default ring's 64 slots,
    // so none waits for credit), then collect their results.
    let pending: Vec<_> = (0..32)
        .map(|i| {
            (
                i,
                rpc_examples::calc::calculator_client::CalculatorClient::from(calc.clone())
                    .add(AddRequest { a: i, b: i * i }),
            )
        })
        .collect();
    let wrong = pending
        .into_iter()
        .filter_map(
            |(i, fut)| match fut.wait().map(rpc_core::Response::into_inner) {
                Ok(reply) if reply.value == i + i * i => None,
                Ok(reply) => Some(format!("Add({i}, {}) = {}", i * i, reply.value)),
                Err(status) => Some(format!("Add({i}, {}) -> {status}", i * i)),
            },
        )
        .collect::<Vec<_>>();
    let outcome = match wrong.first() {
        None => Ok("all 32 correct".to_owned()),
        Some(first) => Err(Status::internal(format!(
            "{} of 32 wrong, first: {first}",
            wrong.len()
        ))),
    };
    script.check(
        "32 x Add(i, i * i) [async, all in flight at once]",
        outcome,
        Expect::Value("all 32 correct"),
    );

    // Client streaming: a stream of numbers in, their sum out (blocking, then async).
    let outcome = calc
        .sum((1..=100).map(|value| SumRequest { value }))
        .map(|r| r.into_inner().total.to_string());
    script.check(
        "Sum(1, 2, ..., 100) [client streaming]",
        outcome,
        Expect::Value("5050"),
    );
    let outcome = calc
        .sum([i64::MAX, 1].map(|value| SumRequest { value }))
        .map(|r| r.into_inner().total.to_string());
    script.check(
        "Sum(i64::MAX, 1) [client streaming]",
        outcome,
        Expect::Error(Code::OutOfRange, "integer overflow"),
    );
    let numbers = futures::stream::iter((1..=10).map(|value| SumRequest { value }));
    let outcome = futures::executor::block_on(
        rpc_examples::calc::calculator_client::CalculatorClient::from(calc.clone()).sum(numbers),
    )
    .map(|r| r.into_inner().total.to_string());
    script.check(
        "Sum(1, 2, ..., 10) [client streaming, async]",
        outcome,
        Expect::Value("55"),
    );

    // Bidirectional: each number sent is answered with the total so far before the next
    // one goes out.
    let outcome = running_total(calc, &[5, -2, 10, 100]);
    script.check(
        "RunningTotal(5, -2, 10, 100) [bidirectional]",
        outcome,
        Expect::Value("5 3 13 113"),
    );

    // A per-call timeout on one request.
    let request =
        Request::new(AddRequest { a: 20, b: 22 }).with_timeout(std::time::Duration::from_secs(2));
    let outcome = calc.add(request).map(|r| r.into_inner().value.to_string());
    script.check("Add(20, 22) [2 s timeout]", outcome, Expect::Value("42"));
}

/// The totals a RunningTotal call answers `numbers` with, space-separated.
fn running_total(calc: &CalculatorClient, numbers: &[i64]) -> Result<String, Status> {
    let mut call = calc.running_total(())?;
    let mut totals = Vec::new();
    for &value in numbers {
        call.send(&SumRequest { value })?;
        match call.recv()? {
            Some(step) => totals.push(step.total.to_string()),
            None => return Err(Status::internal("the totals ended early")),
        }
    }
    call.close_send();
    match call.recv()? {
        None => Ok(totals.join(" ")),
        Some(extra) => Err(Status::internal(format!("an extra total: {}", extra.total))),
    }
}

fn main() -> ExitCode {
    let args = cli::parse_or_exit(
        &ClientArgs::usage("calculator-client", DEFAULT_CONNECT),
        |args| ClientArgs::parse(args, DEFAULT_CONNECT),
    );
    rpc_examples::init_tracing();

    let client = match rpc_examples::connect(&args) {
        Ok(client) => client,
        Err(err) => {
            eprintln!(
                "calculator-client: cannot connect to {} over {}: {err}",
                args.connect, args.transport
            );
            return ExitCode::FAILURE;
        }
    };
    println!(
        "connected to {} (transport: {})",
        args.connect,
        client.transport_name()
    );
    let calc = CalculatorClient::new(client);
    let mut script = Script::default();
    run(&calc, &mut script);

    if script.mismatches == 0 {
        println!("all {} calls returned what they should", script.calls);
        ExitCode::SUCCESS
    } else {
        println!(
            "{} of {} calls did NOT return what they should",
            script.mismatches, script.calls
        );
        ExitCode::FAILURE
    }
}
