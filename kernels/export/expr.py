"""Integer size expressions for a manifest's grid and buffer sizes: ``cdiv(n_elements, BLOCK_SIZE)``, ``B*H``.

The grammar is small on purpose, so that a launcher in any language can evaluate it (the Rust crate has its
own copy): integers, names, ``+ - * // %``, unary minus, parentheses, the functions ``cdiv``, ``min`` and
``max``, and one comparison (``< <= > >= == !=``, giving 1 or 0) for a manifest's ``requires`` list. Names are the
problem sizes and constexprs listed in the manifest.
"""

from __future__ import annotations

import functools
import re

__all__ = ["ExprError", "parse", "names", "evaluate"]

FUNCTIONS = {"cdiv": 2, "min": 2, "max": 2}
_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//|<=|>=|==|!=|[-+*%(),<>]))")


class ExprError(ValueError):
    """A malformed expression, an unknown name or an arithmetic error while evaluating."""


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ExprError(f"cannot read {text!r} at column {pos}: unexpected {text[pos:].strip()[:1]!r}")
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.text, self.toks, self.i = text, _tokens(text), 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want=None):
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise ExprError(f"in {self.text!r}: expected {want or 'a value'}, got {tok or 'the end'}")
        self.i += 1
        return tok

    def comparison(self):
        node = self.expr()
        if self.peek() in _COMPARE:
            node = (self.take(), node, self.expr())
        return node

    def expr(self):
        node = self.term()
        while self.peek() in ("+", "-"):
            node = (self.take(), node, self.term())
        return node

    def term(self):
        node = self.unary()
        while self.peek() in ("*", "//", "%"):
            node = (self.take(), node, self.unary())
        return node

    def unary(self):
        if self.peek() == "-":
            self.take()
            return ("neg", self.unary())
        return self.atom()

    def atom(self):
        tok = self.take()
        if tok.isdigit():
            return ("int", int(tok))
        if tok == "(":
            node = self.comparison()
            self.take(")")
            return node
        if not (tok[0].isalpha() or tok[0] == "_"):
            raise ExprError(f"in {self.text!r}: unexpected {tok!r}")
        if self.peek() != "(":
            return ("name", tok)
        if tok not in FUNCTIONS:
            raise ExprError(f"in {self.text!r}: unknown function {tok!r}; known: {', '.join(FUNCTIONS)}")
        self.take("(")
        args = [self.expr()]
        while self.peek() == ",":
            self.take()
            args.append(self.expr())
        self.take(")")
        if len(args) != FUNCTIONS[tok]:
            raise ExprError(f"in {self.text!r}: {tok} takes {FUNCTIONS[tok]} arguments, got {len(args)}")
        return ("call", tok, *args)


@functools.lru_cache(maxsize=4096)
def parse(text: str):
    """The syntax tree of ``text`` (nested tuples, cached); raises :class:`ExprError` with the column on a typo."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError(f"an expression must be a non-empty string, got {text!r}")
    p = _Parser(text)
    node = p.comparison()
    if p.peek() is not None:
        raise ExprError(f"in {text!r}: unexpected {p.peek()!r} after a complete expression")
    return node


def names(text: str) -> set[str]:
    """Every name ``text`` refers to."""
    found: set[str] = set()

    def walk(node):
        if node[0] == "name":
            found.add(node[1])
        elif node[0] != "int":
            for child in node[1:]:
                if isinstance(child, tuple):
                    walk(child)

    walk(parse(text))
    return found


def evaluate(text: str, env: dict[str, int]) -> int:
    """The integer value of ``text`` with names looked up in ``env``."""

    def ev(node) -> int:
        op = node[0]
        if op == "int":
            return node[1]
        if op == "name":
            if node[1] not in env:
                raise ExprError(f"{text!r} needs {node[1]!r}; known: {', '.join(sorted(env)) or 'nothing'}")
            return int(env[node[1]])
        if op == "neg":
            return -ev(node[1])
        if op == "call":
            a, b = ev(node[2]), ev(node[3])
            if node[1] == "cdiv":
                if b <= 0:
                    raise ExprError(f"{text!r}: cdiv by {b}")
                return -(-a // b)
            return min(a, b) if node[1] == "min" else max(a, b)
        a, b = ev(node[1]), ev(node[2])
        if op in _COMPARE:
            return int(_COMPARE[op](a, b))
        if op in ("//", "%") and b == 0:
            raise ExprError(f"{text!r}: division by zero")
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0, "%": a % b if b else 0}[op]

    return ev(parse(text))
