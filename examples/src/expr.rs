//! The arithmetic expression evaluator behind `Calculator.Evaluate`.
//!
//! Grammar, from loosest to tightest binding:
//!
//! ```text
//! expression := term (('+' | '-') term)*          left-associative
//! term       := unary (('*' | '/' | '%') unary)*  left-associative
//! unary      := ('-' | '+') unary | power
//! power      := primary ('^' unary)?             right-associative: 2^3^2 = 2^9
//! primary    := number | '(' expression ')'
//! number     := digits ['.' [digits]] [exponent] | '.' digits [exponent]
//! exponent   := ('e' | 'E') ['+' | '-'] digits
//! ```
//!
//! Power binds tighter than unary minus, as in mathematics: `-2 ^ 2` is `-4`, and `2 ^ -1` is
//! `0.5`. `%` is the floating-point remainder (the sign of the dividend, like C's `fmod`).
//! Whitespace may appear between any two tokens.
//!
//! The evaluator is a recursive-descent parser that computes while it parses. It is safe on
//! hostile input: the expression is limited to [`MAX_LEN`] characters and its nesting (of
//! parentheses, signs and exponents) to [`MAX_DEPTH`] levels, so `((((…` cannot overflow the
//! stack. A syntax error takes precedence over an arithmetic error found earlier in the text,
//! and every error names the 1-based character position where it was found:
//!
//! ```
//! use rpc_examples::expr::evaluate;
//!
//! assert_eq!(evaluate("2 * (3 + 4) ^ 2"), Ok(98.0));
//! assert_eq!(
//!     evaluate("2 + * 3").unwrap_err().to_string(),
//!     "syntax error at position 5: expected a number or '(', found '*'"
//! );
//! ```

use std::fmt;

/// The longest expression accepted, in characters.
pub const MAX_LEN: usize = 4096;

/// The deepest nesting accepted: parentheses, unary signs and exponents each add a level.
pub const MAX_DEPTH: usize = 64;

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The text does not follow the grammar; the payload says what was expected there.
    Syntax {
        /// What the parser expected, e.g. `a number or '('`.
        expected: &'static str,
        /// What it found instead; `None` at the end of the input.
        found: Option<char>,
    },
    /// A number literal too large for a double, such as `1e999`.
    NumberOutOfRange,
    /// A division or remainder by zero (also: zero raised to a negative power).
    DivisionByZero,
    /// An operation whose result is not a finite double (overflow, or a root of a negative
    /// number such as `(-8) ^ 0.5`).
    NotFinite,
    /// The expression is longer than [`MAX_LEN`] characters.
    TooLong {
        /// Its length, in characters.
        len: usize,
    },
    /// The expression nests deeper than [`MAX_DEPTH`] levels.
    TooDeep,
}

/// An evaluation error: what went wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    /// The 1-based character position of the error (the length plus one for the end of the
    /// input; 0 for [`ErrorKind::TooLong`], which concerns the whole text).
    pub position: usize,
    /// What went wrong.
    pub kind: ErrorKind,
}

impl EvalError {
    /// Whether this is a mistake in the text ([`ErrorKind::Syntax`], [`ErrorKind::TooLong`],
    /// [`ErrorKind::TooDeep`], [`ErrorKind::NumberOutOfRange`], [`ErrorKind::DivisionByZero`])
    /// rather than a result that does not fit in a double ([`ErrorKind::NotFinite`]).
    pub fn is_invalid_input(&self) -> bool {
        !matches!(self.kind, ErrorKind::NotFinite)
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pos = self.position;
        match &self.kind {
            ErrorKind::Syntax { expected, found } => {
                write!(
                    f,
                    "syntax error at position {pos}: expected {expected}, found "
                )?;
                match found {
                    Some(c) => write!(f, "{c:?}"),
                    None => f.write_str("end of input"),
                }
            }
            ErrorKind::NumberOutOfRange => {
                write!(f, "number out of range at position {pos}")
            }
            ErrorKind::DivisionByZero => write!(f, "division by zero at position {pos}"),
            ErrorKind::NotFinite => write!(
                f,
                "result out of range at position {pos}: not a finite number"
            ),
            ErrorKind::TooLong { len } => write!(
                f,
                "expression too long: {len} characters, at most {MAX_LEN} allowed"
            ),
            ErrorKind::TooDeep => write!(
                f,
                "expression nested too deeply at position {pos}: at most {MAX_DEPTH} levels allowed"
            ),
        }
    }
}

impl std::error::Error for EvalError {}

/// Evaluates `input` (see the [module docs](self) for the grammar).
pub fn evaluate(input: &str) -> Result<f64, EvalError> {
    // Cheap bound first, so that a huge input is not even scanned: a char is at most 4 bytes.
    if input.len() > MAX_LEN * 4 || input.chars().count() > MAX_LEN {
        return Err(EvalError {
            position: 0,
            kind: ErrorKind::TooLong {
                len: input.chars().count(),
            },
        });
    }
    let mut parser = Parser {
        chars: input.chars().collect(),
        pos: 0,
        depth: 0,
        arithmetic_error: None,
    };
    let value = parser.expression()?;
    parser.skip_whitespace();
    if parser.pos < parser.chars.len() {
        return Err(parser.syntax_error("an operator or the end of the input"));
    }
    match parser.arithmetic_error {
        Some(err) => Err(err),
        None => Ok(value),
    }
}

struct Parser {
    chars: Vec<char>,
    /// 0-based index of the next character.
    pos: usize,
    depth: usize,
    /// The first arithmetic error met; reported only if the whole text parses, so that a syntax
    /// error anywhere wins.
    arithmetic_error: Option<EvalError>,
}

impl Parser {
    fn skip_whitespace(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    /// The next non-whitespace character, without consuming it.
    fn peek(&mut self) -> Option<char> {
        self.skip_whitespace();
        self.chars.get(self.pos).copied()
    }

    fn syntax_error(&self, expected: &'static str) -> EvalError {
        EvalError {
            position: self.pos + 1,
            kind: ErrorKind::Syntax {
                expected,
                found: self.chars.get(self.pos).copied(),
            },
        }
    }

    /// Records an arithmetic error at the 0-based index `at` (the first one wins) and returns
    /// a placeholder value so that parsing can go on.
    fn arithmetic(&mut self, at: usize, kind: ErrorKind) -> f64 {
        if self.arithmetic_error.is_none() {
            self.arithmetic_error = Some(EvalError {
                position: at + 1,
                kind,
            });
        }
        f64::NAN
    }

    /// Checks an operation's result, recording [`ErrorKind::NotFinite`] at `at` if needed.
    /// Operands that are already NaN stem from an error recorded earlier.
    fn checked(&mut self, at: usize, operands: [f64; 2], result: f64) -> f64 {
        if !result.is_finite() && operands.iter().all(|v| !v.is_nan()) {
            self.arithmetic(at, ErrorKind::NotFinite)
        } else {
            result
        }
    }

    fn expression(&mut self) -> Result<f64, EvalError> {
        let mut value = self.term()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            let at = self.pos;
            self.pos += 1;
            let rhs = self.term()?;
            let result = if op == '+' { value + rhs } else { value - rhs };
            value = self.checked(at, [value, rhs], result);
        }
        Ok(value)
    }

    fn term(&mut self) -> Result<f64, EvalError> {
        let mut value = self.unary()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek() {
            let at = self.pos;
            self.pos += 1;
            let rhs = self.unary()?;
            value = if op != '*' && rhs == 0.0 {
                self.arithmetic(at, ErrorKind::DivisionByZero)
            } else {
                let result = match op {
                    '*' => value * rhs,
                    '/' => value / rhs,
                    _ => value % rhs,
                };
                self.checked(at, [value, rhs], result)
            };
        }
        Ok(value)
    }

    /// Every recursion of the grammar passes through here (parentheses via `primary`,
    /// exponents via `power`), so this is where the nesting depth is bounded.
    fn unary(&mut self) -> Result<f64, EvalError> {
        self.skip_whitespace();
        if self.depth >= MAX_DEPTH {
            return Err(EvalError {
                position: self.pos + 1,
                kind: ErrorKind::TooDeep,
            });
        }
        self.depth += 1;
        let result = match self.peek() {
            Some('-') => {
                self.pos += 1;
                self.unary().map(|v| -v)
            }
            Some('+') => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        };
        self.depth -= 1;
        result
    }

    fn power(&mut self) -> Result<f64, EvalError> {
        let base = self.primary()?;
        if self.peek() != Some('^') {
            return Ok(base);
        }
        let at = self.pos;
        self.pos += 1;
        let exponent = self.unary()?;
        if base == 0.0 && exponent < 0.0 {
            return Ok(self.arithmetic(at, ErrorKind::DivisionByZero));
        }
        let result = base.powf(exponent);
        Ok(self.checked(at, [base, exponent], result))
    }

    fn primary(&mut self) -> Result<f64, EvalError> {
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                let value = self.expression()?;
                if self.peek() != Some(')') {
                    return Err(self.syntax_error("an operator or ')'"));
                }
                self.pos += 1;
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            _ => Err(self.syntax_error("a number or '('")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.chars.get(self.pos).is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<f64, EvalError> {
        let start = self.pos;
        let mut mantissa_digits = self.digits();
        if self.chars.get(self.pos) == Some(&'.') {
            self.pos += 1;
            mantissa_digits += self.digits();
        }
        if mantissa_digits == 0 {
            // A lone '.': point at it.
            self.pos = start;
            return Err(self.syntax_error("a number or '('"));
        }
        if matches!(self.chars.get(self.pos), Some('e' | 'E')) {
            self.pos += 1;
            if matches!(self.chars.get(self.pos), Some('+' | '-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax_error("a digit in the exponent"));
            }
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        // The text is ASCII digits with an optional point and exponent: Rust's float syntax.
        let value: f64 = text
            .parse()
            .map_err(|_| self.syntax_error("a number or '('"))?;
        if value.is_finite() {
            Ok(value)
        } else {
            Ok(self.arithmetic(start, ErrorKind::NumberOutOfRange))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(s: &str) -> f64 {
        evaluate(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn err(s: &str) -> String {
        match evaluate(s) {
            Ok(v) => panic!("{s:?} evaluated to {v}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(eval("42"), 42.0);
        assert_eq!(eval("3.25"), 3.25);
        assert_eq!(eval(".5"), 0.5);
        assert_eq!(eval("2."), 2.0);
        assert_eq!(eval("1e3"), 1000.0);
        assert_eq!(eval("1.5E+2"), 150.0);
        assert_eq!(eval("25e-2"), 0.25);
        assert_eq!(eval("007"), 7.0);
    }

    #[test]
    fn precedence() {
        assert_eq!(eval("1 + 2 * 3"), 7.0);
        assert_eq!(eval("(1 + 2) * 3"), 9.0);
        assert_eq!(eval("2 * (3 + 4) ^ 2"), 98.0);
        assert_eq!(eval("10 - 4 / 2"), 8.0);
        assert_eq!(eval("7 + 10 % 4"), 9.0);
        assert_eq!(eval("2 * 3 ^ 2"), 18.0);
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("(-2) ^ 2"), 4.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("-3 * -2"), 6.0);
        assert_eq!(eval("1 - -1"), 2.0);
        assert_eq!(eval("+4 - +1"), 3.0);
    }

    #[test]
    fn associativity() {
        assert_eq!(eval("10 - 3 - 2"), 5.0);
        assert_eq!(eval("64 / 4 / 2"), 8.0);
        assert_eq!(eval("100 % 30 % 7"), 3.0);
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("(2 ^ 3) ^ 2"), 64.0);
        assert_eq!(eval("2 ^ -1 ^ 2"), 0.5);
    }

    #[test]
    fn remainder_has_the_sign_of_the_dividend() {
        assert_eq!(eval("-7 % 3"), -1.0);
        assert_eq!(eval("7 % -3"), 1.0);
        assert_eq!(eval("5.5 % 2"), 1.5);
    }

    #[test]
    fn whitespace_anywhere_between_tokens() {
        assert_eq!(eval(" \t( 1+2 )*\n3 "), 9.0);
        assert_eq!(eval("1+2"), 3.0);
    }

    #[test]
    fn syntax_errors_name_position_and_expectation() {
        assert_eq!(
            err("2 + * 3"),
            "syntax error at position 5: expected a number or '(', found '*'"
        );
        assert_eq!(
            err(""),
            "syntax error at position 1: expected a number or '(', found end of input"
        );
        assert_eq!(
            err("1 +"),
            "syntax error at position 4: expected a number or '(', found end of input"
        );
        assert_eq!(
            err("(1 + 2"),
            "syntax error at position 7: expected an operator or ')', found end of input"
        );
        assert_eq!(
            err("1 2"),
            "syntax error at position 3: expected an operator or the end of the input, found '2'"
        );
        assert_eq!(
            err("2 * )"),
            "syntax error at position 5: expected a number or '(', found ')'"
        );
        assert_eq!(
            err("1e+"),
            "syntax error at position 4: expected a digit in the exponent, found end of input"
        );
        assert_eq!(
            err("3 + ."),
            "syntax error at position 5: expected a number or '(', found '.'"
        );
        assert_eq!(
            err("1 + x"),
            "syntax error at position 5: expected a number or '(', found 'x'"
        );
    }

    #[test]
    fn positions_count_characters_not_bytes() {
        assert_eq!(
            err("1 + é"),
            "syntax error at position 5: expected a number or '(', found 'é'"
        );
        assert_eq!(evaluate("(é) + 1").unwrap_err().position, 2);
        assert_eq!(evaluate("1 + ä + x").unwrap_err().position, 5);
        assert_eq!(
            err("(1 ÷ 2)"),
            "syntax error at position 4: expected an operator or ')', found '÷'"
        );
    }

    #[test]
    fn division_by_zero() {
        assert_eq!(err("1 / 0"), "division by zero at position 3");
        assert_eq!(err("1 + 5 % (2 - 2)"), "division by zero at position 7");
        assert_eq!(err("0 ^ -1"), "division by zero at position 3");
        assert_eq!(eval("0 / 5"), 0.0);
    }

    #[test]
    fn a_syntax_error_wins_over_an_earlier_arithmetic_error() {
        assert_eq!(
            err("1 / 0 + * 2"),
            "syntax error at position 9: expected a number or '(', found '*'"
        );
    }

    #[test]
    fn results_must_be_finite() {
        assert_eq!(
            err("1e308 * 10"),
            "result out of range at position 7: not a finite number"
        );
        assert_eq!(
            err("(-8) ^ 0.5"),
            "result out of range at position 6: not a finite number"
        );
        assert_eq!(err("1e999"), "number out of range at position 1");
        assert!(!evaluate("10 ^ 400").unwrap_err().is_invalid_input());
        assert!(evaluate("1 / 0").unwrap_err().is_invalid_input());
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = format!(
            "{}1{}",
            "(".repeat(MAX_DEPTH - 1),
            ")".repeat(MAX_DEPTH - 1)
        );
        assert_eq!(eval(&ok), 1.0);
        let too_deep = format!("{}1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(
            err(&too_deep),
            format!(
                "expression nested too deeply at position {}: at most {MAX_DEPTH} levels allowed",
                MAX_DEPTH + 1
            )
        );
        // Hostile inputs of maximal length fail cleanly rather than overflowing the stack.
        for hostile in ["(", "-", "2^", "+"] {
            let s = hostile.repeat(MAX_LEN / hostile.len());
            assert_eq!(
                evaluate(&s).unwrap_err().kind,
                ErrorKind::TooDeep,
                "{hostile}"
            );
        }
        // Long flat expressions are fine: only nesting is limited.
        let flat = vec!["1"; MAX_LEN / 2].join("+");
        assert_eq!(eval(&flat), (MAX_LEN / 2) as f64);
    }

    #[test]
    fn length_is_bounded() {
        let s = "1".repeat(MAX_LEN + 1);
        assert_eq!(
            err(&s),
            format!(
                "expression too long: {} characters, at most {MAX_LEN} allowed",
                MAX_LEN + 1
            )
        );
        assert_eq!(eval(&format!("{}1", " ".repeat(MAX_LEN - 1))), 1.0);
        let huge = "(".repeat(10 * 1024 * 1024);
        assert!(matches!(
            evaluate(&huge).unwrap_err().kind,
            ErrorKind::TooLong { .. }
        ));
    }
}
