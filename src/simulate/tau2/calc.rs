//! τ²'s `calculate` tool: `str(round(float(eval(expression)), 2))` over Python's arithmetic on
//! the characters `0123456789+-*/(). `, with Python's error messages.

use serde_json::Value;

use super::pyjson::{float_repr, py_round, py_type_name};

#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
    /// An integer too large for i128 (kept approximately).
    BigInt(f64),
    /// `()`: an empty tuple.
    Tuple,
    /// A complex result (negative base to a fractional power).
    Complex,
}

type R<T> = std::result::Result<T, String>;

const SYNTAX: &str = "invalid syntax (<string>, line 1)";

/// Evaluate like τ²'s `calculate`.
pub(crate) fn calculate(expression: &Value) -> R<String> {
    let Value::String(expr) = expression else {
        return Err(format!(
            "'{}' object is not iterable",
            py_type_name(expression)
        ));
    };
    if !expr.chars().all(|c| "0123456789+-*/(). ".contains(c)) {
        return Err("Invalid characters in expression".into());
    }
    if expr.trim().is_empty() {
        return Err("invalid syntax (<string>, line 0)".into());
    }
    let tokens = tokenize(expr)?;
    let mut p = Parser { t: &tokens, i: 0 };
    let v = p.expr()?;
    if p.i < tokens.len() {
        return Err(match tokens[p.i] {
            Tok::RParen => "unmatched ')' (<string>, line 1)".into(),
            _ => SYNTAX.into(),
        });
    }
    let f = match v {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
        Num::BigInt(f) => {
            if f.is_infinite() {
                return Err("int too large to convert to float".into());
            }
            f
        }
        Num::Tuple => {
            return Err("float() argument must be a string or a real number, not 'tuple'".into())
        }
        Num::Complex => {
            return Err("float() argument must be a string or a real number, not 'complex'".into())
        }
    };
    Ok(float_repr(py_round(f, 2)))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Num2),
    Plus,
    Minus,
    Star,
    Pow,
    Slash,
    FloorDiv,
    LParen,
    RParen,
}

#[derive(Debug, Clone, PartialEq)]
enum Num2 {
    Int(String),
    Float(f64),
}

fn tokenize(s: &str) -> R<Vec<Tok>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut depth = 0i32;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' => i += 1,
            b'(' => {
                depth += 1;
                out.push(Tok::LParen);
                i += 1;
            }
            b')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unmatched ')' (<string>, line 1)".into());
                }
                out.push(Tok::RParen);
                i += 1;
            }
            b'+' => {
                out.push(Tok::Plus);
                i += 1;
            }
            b'-' => {
                out.push(Tok::Minus);
                i += 1;
            }
            b'*' => {
                if b.get(i + 1) == Some(&b'*') {
                    out.push(Tok::Pow);
                    i += 2;
                } else {
                    out.push(Tok::Star);
                    i += 1;
                }
            }
            b'/' => {
                if b.get(i + 1) == Some(&b'/') {
                    out.push(Tok::FloorDiv);
                    i += 2;
                } else {
                    out.push(Tok::Slash);
                    i += 1;
                }
            }
            b'0'..=b'9' | b'.' => {
                let start = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let mut is_float = false;
                if i < b.len() && b[i] == b'.' {
                    is_float = true;
                    i += 1;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                let text = &s[start..i];
                if text == "." {
                    return Err(SYNTAX.into());
                }
                if i < b.len() && b[i] == b'.' {
                    return Err(SYNTAX.into());
                }
                if is_float {
                    out.push(Tok::Num(Num2::Float(text.parse().map_err(|_| SYNTAX)?)));
                } else {
                    if text.len() > 1 && text.starts_with('0') && text.bytes().any(|d| d != b'0') {
                        return Err("leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)".into());
                    }
                    out.push(Tok::Num(Num2::Int(text.to_string())));
                }
            }
            _ => return Err("Invalid characters in expression".into()),
        }
    }
    if depth > 0 {
        return Err("'(' was never closed (<string>, line 1)".into());
    }
    Ok(out)
}

struct Parser<'a> {
    t: &'a [Tok],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }

    fn expr(&mut self) -> R<Num> {
        let mut v = self.term()?;
        while let Some(op) = self.peek().cloned() {
            match op {
                Tok::Plus | Tok::Minus => {
                    self.i += 1;
                    let r = self.term()?;
                    v = arith(v, r, &op)?;
                }
                _ => break,
            }
        }
        Ok(v)
    }

    fn term(&mut self) -> R<Num> {
        let mut v = self.factor()?;
        while let Some(op) = self.peek().cloned() {
            match op {
                Tok::Star | Tok::Slash | Tok::FloorDiv => {
                    self.i += 1;
                    let r = self.factor()?;
                    v = arith(v, r, &op)?;
                }
                _ => break,
            }
        }
        Ok(v)
    }

    fn factor(&mut self) -> R<Num> {
        match self.peek() {
            Some(Tok::Plus) => {
                self.i += 1;
                let v = self.factor()?;
                unary(v, false)
            }
            Some(Tok::Minus) => {
                self.i += 1;
                let v = self.factor()?;
                unary(v, true)
            }
            _ => self.power(),
        }
    }

    fn power(&mut self) -> R<Num> {
        let base = self.atom()?;
        if self.peek() == Some(&Tok::Pow) {
            self.i += 1;
            let exp = self.factor()?;
            return arith(base, exp, &Tok::Pow);
        }
        Ok(base)
    }

    fn atom(&mut self) -> R<Num> {
        match self.peek().cloned() {
            Some(Tok::Num(Num2::Int(text))) => {
                self.i += 1;
                Ok(match text.parse::<i128>() {
                    Ok(i) => Num::Int(i),
                    Err(_) => Num::BigInt(text.parse::<f64>().unwrap_or(f64::INFINITY)),
                })
            }
            Some(Tok::Num(Num2::Float(f))) => {
                self.i += 1;
                Ok(Num::Float(f))
            }
            Some(Tok::LParen) => {
                self.i += 1;
                if self.peek() == Some(&Tok::RParen) {
                    self.i += 1;
                    return Ok(Num::Tuple);
                }
                let v = self.expr()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(SYNTAX.into());
                }
                self.i += 1;
                Ok(v)
            }
            _ => Err(SYNTAX.into()),
        }
    }
}

fn type_name(n: &Num) -> &'static str {
    match n {
        Num::Int(_) | Num::BigInt(_) => "int",
        Num::Float(_) => "float",
        Num::Tuple => "tuple",
        Num::Complex => "complex",
    }
}

fn unary(v: Num, neg: bool) -> R<Num> {
    Ok(match v {
        Num::Int(i) => Num::Int(if neg { -i } else { i }),
        Num::Float(f) => Num::Float(if neg { -f } else { f }),
        Num::BigInt(f) => Num::BigInt(if neg { -f } else { f }),
        Num::Tuple => {
            return Err(format!(
                "bad operand type for unary {}: 'tuple'",
                if neg { "-" } else { "+" }
            ))
        }
        Num::Complex => Num::Complex,
    })
}

fn as_f64(n: &Num) -> f64 {
    match n {
        Num::Int(i) => *i as f64,
        Num::Float(f) | Num::BigInt(f) => *f,
        _ => f64::NAN,
    }
}

fn arith(a: Num, b: Num, op: &Tok) -> R<Num> {
    let sym = match op {
        Tok::Plus => "+",
        Tok::Minus => "-",
        Tok::Star => "*",
        Tok::Slash => "/",
        Tok::FloorDiv => "//",
        Tok::Pow => "** or pow()",
        _ => "?",
    };
    if matches!(a, Num::Tuple | Num::Complex) || matches!(b, Num::Tuple | Num::Complex) {
        if matches!(a, Num::Complex) || matches!(b, Num::Complex) {
            return Ok(Num::Complex);
        }
        if let (Num::Tuple, Num::Tuple, Tok::Plus) = (&a, &b, op) {
            return Ok(Num::Tuple);
        }
        return Err(format!(
            "unsupported operand type(s) for {sym}: '{}' and '{}'",
            type_name(&a),
            type_name(&b)
        ));
    }
    let both_int =
        matches!(a, Num::Int(_) | Num::BigInt(_)) && matches!(b, Num::Int(_) | Num::BigInt(_));
    if let (Num::Int(x), Num::Int(y)) = (a, b) {
        let exact = match op {
            Tok::Plus => x.checked_add(y),
            Tok::Minus => x.checked_sub(y),
            Tok::Star => x.checked_mul(y),
            Tok::FloorDiv => {
                if y == 0 {
                    return Err("integer division or modulo by zero".into());
                }
                Some(
                    x.div_euclid(y)
                        - if (x.rem_euclid(y) != 0) && y < 0 {
                            1
                        } else {
                            0
                        },
                )
            }
            Tok::Pow if y >= 0 => u32::try_from(y).ok().and_then(|e| x.checked_pow(e)),
            _ => None,
        };
        if let Some(v) = exact {
            return Ok(Num::Int(v));
        }
    }
    let (x, y) = (as_f64(&a), as_f64(&b));
    match op {
        Tok::Plus | Tok::Minus | Tok::Star => {
            let v = match op {
                Tok::Plus => x + y,
                Tok::Minus => x - y,
                _ => x * y,
            };
            Ok(if both_int {
                Num::BigInt(v)
            } else {
                Num::Float(v)
            })
        }
        Tok::Slash => {
            if y == 0.0 {
                return Err(if both_int {
                    "division by zero".into()
                } else {
                    "float division by zero".into()
                });
            }
            Ok(Num::Float(x / y))
        }
        Tok::FloorDiv => {
            if y == 0.0 {
                return Err(if both_int {
                    "integer division or modulo by zero".into()
                } else {
                    "float floor division by zero".into()
                });
            }
            let v = (x / y).floor();
            Ok(if both_int {
                Num::BigInt(v)
            } else {
                Num::Float(v)
            })
        }
        Tok::Pow => {
            if x == 0.0 && y < 0.0 {
                return Err("0.0 cannot be raised to a negative power".into());
            }
            if x < 0.0 && y.fract() != 0.0 {
                return Ok(Num::Complex);
            }
            let v = x.powf(y);
            if !both_int && v.is_infinite() {
                return Err("(34, 'Numerical result out of range')".into());
            }
            Ok(if both_int && y >= 0.0 {
                Num::BigInt(v)
            } else {
                Num::Float(v)
            })
        }
        _ => Err(SYNTAX.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(e: &str) -> String {
        match calculate(&json!(e)) {
            Ok(s) => s,
            Err(e) => format!("ERR {e}"),
        }
    }

    #[test]
    fn like_python() {
        assert_eq!(c("2+3*4"), "14.0");
        assert_eq!(c("10/3"), "3.33");
        assert_eq!(c("1/0"), "ERR division by zero");
        assert_eq!(c("1.0/0"), "ERR float division by zero");
        assert_eq!(c("1//0"), "ERR integer division or modulo by zero");
        assert_eq!(c("2 3"), "ERR invalid syntax (<string>, line 1)");
        assert_eq!(c("(2"), "ERR '(' was never closed (<string>, line 1)");
        assert_eq!(c(")"), "ERR unmatched ')' (<string>, line 1)");
        assert_eq!(c("2**-1"), "0.5");
        assert_eq!(c("2**0.5"), "1.41");
        assert_eq!(c("-7//2"), "-4.0");
        assert_eq!(c("7.5//2"), "3.0");
        assert_eq!(c("2**1000"), "1.0715086071862673e+301");
        assert_eq!(c("10**400"), "ERR int too large to convert to float");
        assert_eq!(c("01"), "ERR leading zeros in decimal integer literals are not permitted; use an 0o prefix for octal integers (<string>, line 1)");
        assert_eq!(c("00"), "0.0");
        assert_eq!(c("1."), "1.0");
        assert_eq!(c(".5"), "0.5");
        assert_eq!(c("1..2"), "ERR invalid syntax (<string>, line 1)");
        assert_eq!(
            c("()"),
            "ERR float() argument must be a string or a real number, not 'tuple'"
        );
        assert_eq!(c("1e5"), "ERR Invalid characters in expression");
        assert_eq!(c(""), "ERR invalid syntax (<string>, line 0)");
        assert_eq!(c("0.1+0.2"), "0.3");
        assert_eq!(c("1 + 2 * 3 / 4 - 5"), "-2.5");
        assert_eq!(
            c("(-8)**0.5"),
            "ERR float() argument must be a string or a real number, not 'complex'"
        );
    }
}
