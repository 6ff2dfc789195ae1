"""Parsing HLO literals (the values of `constant`): scalars, nested
arrays, tuples, every element type, inf/nan, with range checks. A mixin of
the HLO parser: it uses the parser's lexing (`skip`, `peek`, `error`...).
numpy only."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .shape import ELEMENT_TYPES, Shape, bit_width

__all__ = ["LiteralParsing", "MAX_NESTING"]

# The deepest nesting of shapes and literals the parser accepts.
MAX_NESTING = 256


class LiteralParsing:
    """The literal half of the parser (mixed into it)."""

    def literal(self, shape: Shape) -> Any:
        self.skip()
        if shape.is_tuple:
            return self.tuple_literal(shape, 0)
        if shape.element_type == "token":
            self.error("a token cannot be a constant")
        # An old-style literal may repeat the shape: `constant(f32[2] {1, 2})`.
        if self._at_shape():
            self.shape()
            self.skip()
        if self.at("{...}") or self.at("{ ... }"):
            self.pos += 5 if self.at("{...}") else 7
            return None  # elided by the printer: unknown values
        start = self.pos
        if shape.rank == 0:
            values = [self.scalar(shape.element_type)]
        else:
            if self.peek() != "{":
                self.error(f"expected '{{' to open the literal of "
                           f"{shape}, found {self.describe()}")
            nested = self.nested(shape.element_type, 0)
            values = _flatten_literal(nested, shape.dims)
            if values is None:
                self.error(f"the literal does not match the shape {shape}",
                           start)
        return self.to_array(values, shape, start)

    def tuple_literal(self, shape: Shape, depth: int) -> tuple:
        if depth > MAX_NESTING:
            self.error("literal nesting too deep")
        self.expect("(", "to open a tuple literal")
        out = []
        for i, element in enumerate(shape.tuple_shapes):
            if i:
                self.expect(",")
            self.skip()
            if element.is_tuple:
                out.append(self.tuple_literal(element, depth + 1))
            else:
                out.append(self.literal(element))
        self.expect(")", "to close a tuple literal")
        return tuple(out)

    def nested(self, etype: str, depth: int) -> list:
        if depth > MAX_NESTING:
            self.error("literal nesting too deep")
        self.expect("{")

        def item():
            self.skip()
            if self.peek() == "{":
                return self.nested(etype, depth + 1)
            return self.scalar(etype)
        return self.comma_list("}", "a literal", item)

    def scalar(self, etype: str) -> Any:
        self.skip()
        start = self.pos
        if etype in ("c64", "c128"):
            if self.peek() == "(":
                self.pos += 1
                re_ = self.number("f64")
                self.expect(",")
                im = self.number("f64")
                self.expect(")")
                return complex(re_, im)
            return complex(self.number("f64"), 0.0)
        if etype == "pred":
            if self.at_keyword("true"):
                self.pos += 4
                return True
            if self.at_keyword("false"):
                self.pos += 5
                return False
            value = self.number("s64")
            if value not in (0, 1):
                self.error(f"a pred literal must be true or false, got "
                           f"{self.text[start:self.pos]}", start)
            return bool(value)
        return self.number(etype)

    def number(self, etype: str) -> Any:
        self.skip()
        start = self.pos
        text = self.text
        i = self.pos
        if i < self.n and text[i] in "+-":
            i += 1
        j = i
        while j < self.n and (text[j].isalnum() and text[j].isascii() or
                              text[j] in "._" or
                              (text[j] in "+-" and j > i and
                               text[j - 1] in "eE" and
                               not text[i:j].lower().startswith("0x"))):
            j += 1
        token = text[start:j]
        body = text[i:j].lower()
        self.pos = j
        is_float_type = not (etype == "pred" or etype[0] in "su")
        if body.startswith("nan") and self.peek() == "(":
            # nan(0x7fffff): a payload; kept as a plain NaN
            end = text.find(")", self.pos)
            if end < 0:
                self.error("unterminated NaN payload", start)
            self.pos = end + 1
            body = "nan"
        if not body:
            self.error(f"expected a number, found {self.describe()}", start)
        try:
            if body.startswith("0x"):
                value: Any = int(body, 16)
                if token.startswith("-"):
                    value = -value
            elif body in ("inf", "nan"):
                value = float(token[:len(token) - len(body)] + body)
            elif any(c in body for c in ".e") or body in ("infinity",):
                value = float(token)
            else:
                value = int(token)
                if is_float_type and value == 0 and token.startswith("-"):
                    value = -0.0  # `-0`: XLA's negative zero
        except ValueError:
            self.error(f"malformed number '{token}'", start)
        if not is_float_type:
            if isinstance(value, float):
                if value != value or math.isinf(value) or \
                        value != int(value):
                    self.error(f"'{token}' is not a valid {etype} value",
                               start)
                value = int(value)
            lo, hi = _int_range(etype)
            if not lo <= value <= hi:
                self.error(f"value {token} out of range for {etype}", start)
        return value

    def to_array(self, values: list, shape: Shape, pos: int) -> np.ndarray:
        etype = shape.element_type
        dtype = ELEMENT_TYPES[etype]
        try:
            if etype == "pred":
                arr = np.array(values, dtype=np.bool_)
            elif etype in ("c64", "c128"):
                arr = np.array(values, dtype=np.complex128).astype(dtype)
            elif etype[0] in "su":
                wide = np.uint64 if etype[0] == "u" else np.int64
                arr = np.array(values, dtype=wide).astype(dtype)
            else:
                arr = np.array([float(v) for v in values],
                               dtype=np.float64).astype(dtype)
        except (ValueError, OverflowError, TypeError) as e:
            self.error(f"bad literal for {shape}: {e}", pos)
        return arr.reshape(shape.dims)


def _int_range(etype: str) -> tuple[int, int]:
    bits = bit_width(etype)
    if etype[0] == "u":
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _flatten_literal(nested: list, dims: tuple[int, ...]) -> list | None:
    """Row-major values of a nested literal that matches `dims`; a flat list
    with the right element count is accepted for any rank."""
    out: list = []

    def walk(node, level: int) -> bool:
        if level == len(dims):
            if isinstance(node, list):
                return False
            out.append(node)
            return True
        if not isinstance(node, list) or len(node) != dims[level]:
            return False
        return all(walk(child, level + 1) for child in node)

    if walk(nested, 0):
        return out
    if all(not isinstance(v, list) for v in nested) and \
            len(nested) == math.prod(dims):
        return list(nested)
    return None


