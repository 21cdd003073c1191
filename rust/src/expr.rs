//! Size expressions from a manifest (`cdiv(n_elements, BLOCK_SIZE)`, `B*H`, `K <= BK`), the same grammar as
//! `kernels/export/expr.py`: integers, names, `+ - * // %`, unary minus, parentheses, `cdiv`, `min`, `max`
//! and one comparison giving 1 or 0. Arithmetic is checked: an overflow is an error, not a wrapped grid.

use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct ExprError(pub String);

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExprError {}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Int(i64),
    Name(String),
    Neg(Box<Expr>),
    Bin(String, Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
}

const COMPARE: [&str; 6] = ["<", "<=", ">", ">=", "==", "!="];

fn tokens(text: &str) -> Result<Vec<String>, ExprError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push(text[s..i].to_string());
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(text[s..i].to_string());
        } else {
            let two = text.get(i..i + 2).unwrap_or("");
            if ["//", "<=", ">=", "==", "!="].contains(&two) {
                out.push(two.to_string());
                i += 2;
            } else if b"+-*%(),<>".contains(&c) {
                out.push((c as char).to_string());
                i += 1;
            } else {
                return Err(ExprError(format!("cannot read {text:?} at column {i}: unexpected {:?}", c as char)));
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    text: &'a str,
    toks: Vec<String>,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.i).map(|s| s.as_str())
    }

    fn take(&mut self, want: Option<&str>) -> Result<String, ExprError> {
        match self.peek() {
            Some(t) if want.is_none() || want == Some(t) => {
                self.i += 1;
                Ok(self.toks[self.i - 1].clone())
            }
            got => Err(ExprError(format!(
                "in {:?}: expected {}, got {}",
                self.text,
                want.unwrap_or("a value"),
                got.unwrap_or("the end")
            ))),
        }
    }

    fn comparison(&mut self) -> Result<Expr, ExprError> {
        let lhs = self.expr()?;
        if let Some(op) = self.peek().filter(|t| COMPARE.contains(t)).map(str::to_string) {
            self.i += 1;
            let rhs = self.expr()?;
            return Ok(Expr::Bin(op, Box::new(lhs), Box::new(rhs)));
        }
        Ok(lhs)
    }

    fn expr(&mut self) -> Result<Expr, ExprError> {
        let mut node = self.term()?;
        while let Some(op) = self.peek().filter(|t| *t == "+" || *t == "-").map(str::to_string) {
            self.i += 1;
            node = Expr::Bin(op, Box::new(node), Box::new(self.term()?));
        }
        Ok(node)
    }

    fn term(&mut self) -> Result<Expr, ExprError> {
        let mut node = self.unary()?;
        while let Some(op) = self.peek().filter(|t| ["*", "//", "%"].contains(t)).map(str::to_string) {
            self.i += 1;
            node = Expr::Bin(op, Box::new(node), Box::new(self.unary()?));
        }
        Ok(node)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.peek() == Some("-") {
            self.i += 1;
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, ExprError> {
        let tok = self.take(None)?;
        let first = tok.as_bytes()[0];
        if first.is_ascii_digit() {
            return tok
                .parse::<i64>()
                .map(Expr::Int)
                .map_err(|_| ExprError(format!("in {:?}: {tok} does not fit 64 bits", self.text)));
        }
        if tok == "(" {
            let node = self.comparison()?;
            self.take(Some(")"))?;
            return Ok(node);
        }
        if !(first.is_ascii_alphabetic() || first == b'_') {
            return Err(ExprError(format!("in {:?}: unexpected {tok:?}", self.text)));
        }
        if self.peek() != Some("(") {
            return Ok(Expr::Name(tok));
        }
        if !["cdiv", "min", "max"].contains(&tok.as_str()) {
            return Err(ExprError(format!("in {:?}: unknown function {tok:?}; known: cdiv, min, max", self.text)));
        }
        self.take(Some("("))?;
        let mut args = vec![self.expr()?];
        while self.peek() == Some(",") {
            self.i += 1;
            args.push(self.expr()?);
        }
        self.take(Some(")"))?;
        if args.len() != 2 {
            return Err(ExprError(format!("in {:?}: {tok} takes 2 arguments, got {}", self.text, args.len())));
        }
        Ok(Expr::Call(tok, args))
    }
}

pub fn parse(text: &str) -> Result<Expr, ExprError> {
    if text.trim().is_empty() {
        return Err(ExprError("an expression must be a non-empty string".into()));
    }
    let mut p = Parser { text, toks: tokens(text)?, i: 0 };
    let node = p.comparison()?;
    if let Some(t) = p.peek() {
        return Err(ExprError(format!("in {text:?}: unexpected {t:?} after a complete expression")));
    }
    Ok(node)
}

pub fn names(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Int(_) => {}
        Expr::Name(n) => {
            if !out.contains(n) {
                out.push(n.clone())
            }
        }
        Expr::Neg(a) => names(a, out),
        Expr::Bin(_, a, b) => {
            names(a, out);
            names(b, out)
        }
        Expr::Call(_, args) => args.iter().for_each(|a| names(a, out)),
    }
}

fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

/// Evaluate `text` with names from `env`.
pub fn evaluate(text: &str, env: &HashMap<String, i64>) -> Result<i64, ExprError> {
    let tree = parse(text)?;
    let overflow = || ExprError(format!("{text:?} overflows 64-bit integers"));
    fn ev(e: &Expr, text: &str, env: &HashMap<String, i64>, of: &dyn Fn() -> ExprError) -> Result<i64, ExprError> {
        Ok(match e {
            Expr::Int(v) => *v,
            Expr::Name(n) => *env.get(n).ok_or_else(|| {
                let mut known: Vec<_> = env.keys().cloned().collect();
                known.sort();
                ExprError(format!("{text:?} needs {n:?}; known: {}", known.join(", ")))
            })?,
            Expr::Neg(a) => ev(a, text, env, of)?.checked_neg().ok_or_else(of)?,
            Expr::Call(f, args) => {
                let (a, b) = (ev(&args[0], text, env, of)?, ev(&args[1], text, env, of)?);
                match f.as_str() {
                    "cdiv" => {
                        if b <= 0 {
                            return Err(ExprError(format!("{text:?}: cdiv by {b}")));
                        }
                        floor_div(a.checked_add(b - 1).ok_or_else(of)?, b).ok_or_else(of)?
                    }
                    "min" => a.min(b),
                    _ => a.max(b),
                }
            }
            Expr::Bin(op, a, b) => {
                let (a, b) = (ev(a, text, env, of)?, ev(b, text, env, of)?);
                match op.as_str() {
                    "+" => a.checked_add(b).ok_or_else(of)?,
                    "-" => a.checked_sub(b).ok_or_else(of)?,
                    "*" => a.checked_mul(b).ok_or_else(of)?,
                    "//" | "%" if b == 0 => return Err(ExprError(format!("{text:?}: division by zero"))),
                    "//" => floor_div(a, b).ok_or_else(of)?,
                    "%" => a - floor_div(a, b).ok_or_else(of)? * b,
                    "<" => (a < b) as i64,
                    "<=" => (a <= b) as i64,
                    ">" => (a > b) as i64,
                    ">=" => (a >= b) as i64,
                    "==" => (a == b) as i64,
                    _ => (a != b) as i64,
                }
            }
        })
    }
    ev(&tree, text, env, &overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(kv: &[(&str, i64)]) -> HashMap<String, i64> {
        kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn evaluates_like_python() {
        let e = env(&[("n", 1000), ("B", 128), ("x", -7)]);
        assert_eq!(evaluate("cdiv(n, B)*2 + max(3, -x)", &e).unwrap(), 23);
        assert_eq!(evaluate("-7 // 2", &e).unwrap(), -4);
        assert_eq!(evaluate("-7 % 2", &e).unwrap(), 1);
        assert_eq!(evaluate("cdiv(n, B) * cdiv(1, 64)", &e).unwrap(), 8);
        assert_eq!(evaluate("n <= 2147483647 - B", &e).unwrap(), 1);
        assert_eq!(evaluate("(n > 5) + 1", &e).unwrap(), 2);
    }

    #[test]
    fn errors_are_readable() {
        let e = env(&[("a", 1)]);
        for (text, want) in [
            ("cdiv(1)", "takes 2 arguments"),
            ("1 +", "expected a value"),
            ("foo(1, 2)", "unknown function"),
            ("1 $ 2", "unexpected '$'"),
            ("a b", "unexpected \"b\""),
            ("zz + 1", "needs \"zz\""),
            ("a // 0", "division by zero"),
            ("9223372036854775807 + a", "overflows"),
            ("1 < 2 < 3", "after a complete expression"),
        ] {
            let msg = evaluate(text, &e).unwrap_err().0;
            assert!(msg.contains(want), "{text}: {msg}");
        }
    }
}
