"""A parser of HLO text as XLA and JAX print it. numpy and ml_dtypes only.

    module = parse_module(text)          # or parse_file(path)
    module.entry.root.opcode

Accepted: the `HloModule name, key=value...` header (optional: XLA's emitter
tests write bare computations), the `FileNames` / `FunctionNames` /
`FileLocations` / `StackFrames` sections (kept raw in `module.sections`),
computations with or without a signature, `ENTRY`, `ROOT`, names with or
without `%`, typed or untyped operands, `/* */` and `//` comments.

Attributes after the operand list are typed where their meaning is known:

  int lists (`dimensions={0,1}`, `slice_sizes`, gather/scatter/dot dimension
    numbers...)                                     -> tuple[int, ...]
  ints (`index`, `iota_dimension`, `index_vector_dim`, `exponent_bits`...)
                                                    -> int
  booleans (`indices_are_sorted`, `unique_indices`, `is_stable`...) -> bool
  `slice={[0:2], [1:5:2]}`                          -> [(start, limit, stride)]
  `padding=0_0x1_2_1`                               -> [(lo, hi, interior)]
  `window={size=2x2 stride=1x1 pad=0_1x0_1 ...}`    -> dict of tuples
                                                       (`pad`: [(lo, hi)])
  computations (`to_apply`, `calls`, `condition`, `body`, `select`,
    `scatter`, `true_computation`, `false_computation`) -> HloComputation
  `branch_computations={%a, %b}`, `called_computations` -> [HloComputation]
  `metadata={op_name="..." source_line=3}`          -> dict (str / int values)
  `frontend_attributes={a="b"}`                     -> dict[str, str]
  `backend_config={...}` / `backend_config="..."`   -> str (the JSON text)
  `control-predecessors={%a, %b}`                   -> tuple of names
  `custom_call_target="x"`                          -> str (unquoted)
  `kind`, `direction`, `type`... and any unknown attribute -> the raw text

Malformed text raises `HloParseError` (message, line, column, instruction);
no other exception type escapes `parse_module`.
"""

from __future__ import annotations

import bisect
import os
import re
import warnings
from typing import Any

import numpy as np

from .._input import check_hlo_text, decode_hlo_text
from .module import (HloComputation, HloInstruction, HloModule,
                     HloParseError, Location)
from .opcodes import FIXED_ARITY, HLO_OPCODES, MIN_ARITY
from .literals import MAX_NESTING, LiteralParsing
from .shape import ELEMENT_TYPES, Shape, bit_width
from .verifier import VerificationError, compatible as _compatible, verify_instruction

__all__ = ["parse_module", "parse_file"]

_SECTION_NAMES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | frozenset("0123456789.-")
_NAME_CHARS = _IDENT_CHARS
_MAX_DEPTH = MAX_NESTING
_INT64_MAX = (1 << 63) - 1

# The common tokens matched by one regular expression each, not character
# by character (a program's text has tens of thousands of names and
# shapes). What they do not match takes the character-wise path, which
# also reports the errors. `_INTEGER`: a decimal integer; `_NAME_TAIL`: the
# rest of a name (`_NAME_CHARS`, but not the `-` of an arrow `->`);
# `_INSTRUCTION_HEAD`: `[ROOT] name =`; `_OPERAND_NAME`: an operand written
# as a name; `_PLAIN_SHAPE`: an array shape written without spaces,
# tiling, signs or dynamic dimensions (`f32[2,3]{1,0}`, `pred[]`).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NAME_TAIL = re.compile(r"(?:[A-Za-z0-9_.]|-(?!>))*")
_INSTRUCTION_HEAD = re.compile(r"(?:(ROOT)[ \t]+)?(%?[A-Za-z_](?:[A-Za-z0-9_.]|-(?!>))*)"
                               r"[ \t]*=[ \t]*")
_OPERAND_NAME = re.compile(r"%?[A-Za-z_](?:[A-Za-z0-9_.]|-(?!>))*")
_PLAIN_SHAPE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[([0-9]+(?:,[0-9]+)*)?\]"
                          r"(?:\{([0-9]+(?:,[0-9]+)*)?\})?")


def _oversized_elements(etype: str, dims) -> int | None:
    """The element count of an `etype` array of `dims` whose element count
    or byte size does not fit in int64 (XLA's ShapeUtil rule), for the
    error; None for a valid one."""
    elements = 1
    for d in dims:
        elements *= d
    if elements > _INT64_MAX or (elements * max(bit_width(etype), 8) + 7) // 8 > _INT64_MAX:
        return elements
    return None


# A layout's memory space (`{1,0:T(8,128)S(5)}`).
_MEMORY_SPACE = re.compile(r"S\((\d+)\)")

# `_PLAIN_SHAPE` texts already checked: (element type, dims, layout).
_PLAIN_SHAPES: dict[str, tuple[str, tuple[int, ...], tuple[int, ...] | None]] = {}

# Attribute typing (see the module docstring).
_INT_LIST_ATTRS = frozenset({
    "dimensions", "dynamic_slice_sizes", "slice_sizes", "offset_dims",
    "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
    "start_indices_batching_dims", "update_window_dims",
    "inserted_window_dims", "scatter_dims_to_operand_dims",
    "input_batching_dims", "scatter_indices_batching_dims", "lhs_batch_dims",
    "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims",
    "fft_length", "lhs_ragged_dims", "rhs_group_dims",
})
_INT_ATTRS = frozenset({
    "index", "iota_dimension", "index_vector_dim", "exponent_bits",
    "mantissa_bits", "feature_group_count", "batch_group_count",
    "all_gather_dimension", "split_dimension", "concat_dimension",
    "tuple_index",
})
_BOOL_ATTRS = frozenset({
    "indices_are_sorted", "unique_indices", "is_stable", "constrain_layout",
    "use_global_device_ids", "is_host_transfer", "largest",
})
_COMPUTATION_ATTRS = frozenset({
    "to_apply", "calls", "condition", "body", "select", "scatter",
    "true_computation", "false_computation", "comparator",
})
_COMPUTATION_LIST_ATTRS = frozenset({"branch_computations",
                                     "called_computations"})

_ARITY = FIXED_ARITY
_MIN_ARITY = MIN_ARITY


def _callees(comp: HloComputation):
    for inst in comp.instructions:
        for called in inst.called_computations:
            yield inst, called


def parse_module(text: str, source: str = "<hlo>") -> HloModule:
    """Parses HLO text into an `HloModule`. Raises `HloParseError`."""
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}",
                            source=source)
    check_hlo_text(text, source)
    parser = _Parser(text, source)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return parser.parse()
    except HloParseError:
        raise
    except RecursionError:
        raise parser.make_error("nesting too deep") from None
    except Exception as e:  # a parser bug must still surface as a parse error
        raise parser.make_error(
            f"internal parser error: {type(e).__name__}: {e}") from e


def parse_file(path: str | os.PathLike) -> HloModule:
    """Reads and parses an HLO text file; the path names the source. The
    file must be a regular file of at most XLA_GPU_MAX_INPUT_BYTES (1 GiB),
    read with bounds (xla_gpu._input): ArgumentError otherwise; HloParseError
    for text that is not UTF-8 (line, column and byte offset)."""
    from .._input import read_input
    data, source = read_input(path)
    return parse_module(decode_hlo_text(data, source), source=source)


def parse_shape_list(text: str, source: str = "<shapes>") -> tuple[Shape, ...]:
    """Parses a braced, comma-separated shape list such as `{f32[2,3]{0,1}, s32[]}`
    (the form custom-call attributes like operand_layout_constraints take).
    Raises `HloParseError`."""
    parser = _Parser(text, source)
    parser.skip()
    parser.expect("{", "to open the shape list")
    shapes = parser.comma_list("}", "the shape list", parser.shape)
    parser.skip()
    if parser.pos != parser.n:
        parser.error(f"unexpected {parser.describe()} after the shape list")
    return tuple(shapes)


def parse_program_shape(text: str, source: str = "<program shape>"
                        ) -> tuple[tuple[Shape, ...], Shape]:
    """Parses `(parameter shapes)->result shape`, braced or not (the module
    header's `entry_computation_layout={...}`), as (parameters, result).
    Raises `HloParseError`."""
    parser = _Parser(text, source)
    braced = parser.accept("{")
    parser.expect("(", "to open the parameter shapes")
    params = parser.comma_list(")", "the parameter shapes", parser.shape)
    parser.expect("->", "before the result shape")
    result = parser.shape()
    if braced:
        parser.expect("}", "to close the program shape")
    parser.skip()
    if parser.pos != parser.n:
        parser.error(f"unexpected {parser.describe()} after the program shape")
    return tuple(params), result


class _PendingRef:
    """A computation reference, resolved when every computation is known."""
    __slots__ = ("names", "pos", "is_list")

    def __init__(self, names: list[tuple[str, int]], pos: int, is_list: bool):
        self.names, self.pos, self.is_list = names, pos, is_list


class _Parser(LiteralParsing):
    def __init__(self, text: str, source: str):
        self.text = text
        self.n = len(text)
        self.pos = 0
        self.source = source
        self.line_starts = [0]
        # One step per line, not per character.
        i = text.find("\n")
        while i >= 0:
            self.line_starts.append(i + 1)
            i = text.find("\n", i + 1)
        self.inst_name: str | None = None
        # (instruction, key, _PendingRef)
        self.pending_refs: list[tuple[HloInstruction, str, _PendingRef]] = []
        # instruction -> (operand names with positions)
        self.operand_refs: dict[int, list[tuple[str, int]]] = {}
        self.inst_pos: dict[int, int] = {}
        self.comp_pos: dict[int, int] = {}
        # (instruction, [(name, position)]) of `control-predecessors`
        self.control_refs: list[tuple[HloInstruction, list]] = []
        # Tuples written without a shape (see `instruction`).
        self.untyped_tuples: list[HloInstruction] = []
        # The module header's attributes, for the verifier.
        self.header: dict[str, Any] | None = None

    # ---------------------------------------------------------------- errors

    def location(self, pos: int) -> tuple[int, int]:
        pos = max(0, min(pos, self.n))
        line = bisect.bisect_right(self.line_starts, pos) - 1
        return line + 1, pos - self.line_starts[line] + 1

    def make_error(self, message: str, pos: int | None = None,
                   instruction: str | None = None) -> HloParseError:
        line, col = self.location(self.pos if pos is None else pos)
        inst = instruction if instruction is not None else self.inst_name
        return HloParseError(message, line, col, inst or None, self.source)

    def error(self, message: str, pos: int | None = None,
              instruction: str | None = None):
        raise self.make_error(message, pos, instruction)

    def inst_error(self, inst: HloInstruction, message: str):
        pos = self.inst_pos.get(id(inst), 0)
        raise self.make_error(message, pos, inst.name)

    # --------------------------------------------------------------- lexing

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < self.n else ""

    def at(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def describe(self) -> str:
        if self.pos >= self.n:
            return "end of text"
        end = self.pos
        while end < self.n and end - self.pos < 20 and \
                not self.text[end].isspace():
            end += 1
        return repr(self.text[self.pos:max(end, self.pos + 1)])

    def skip(self, newlines: bool = True) -> None:
        """Skips whitespace and comments (only on this line unless
        `newlines`)."""
        text, n = self.text, self.n
        # Most calls stand on a token already.
        if self.pos < n and text[self.pos] not in " \t\r\f\v\n/":
            return
        while self.pos < n:
            c = text[self.pos]
            if c == "\n":
                if not newlines:
                    return
                self.pos += 1
            elif c in " \t\r\f\v":
                self.pos += 1
            elif c == "/" and self.pos + 1 < n and text[self.pos + 1] == "*":
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    self.error("unterminated /* comment")
                if not newlines and "\n" in text[self.pos:end]:
                    return
                self.pos = end + 2
            elif c == "/" and self.pos + 1 < n and text[self.pos + 1] == "/":
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            else:
                return

    def expect(self, s: str, what: str | None = None) -> None:
        self.skip()
        if not self.at(s):
            self.error(f"expected '{s}'{' ' + what if what else ''}, "
                       f"found {self.describe()}")
        self.pos += len(s)

    def accept(self, s: str) -> bool:
        self.skip()
        if self.at(s):
            self.pos += len(s)
            return True
        return False

    def at_keyword(self, word: str) -> bool:
        if not self.at(word):
            return False
        nxt = self.pos + len(word)
        return nxt >= self.n or self.text[nxt] not in _IDENT_CHARS

    def ident(self, what: str = "an identifier") -> str:
        self.skip()
        start = self.pos
        if self.pos >= self.n or self.text[self.pos] not in _IDENT_START:
            self.error(f"expected {what}, found {self.describe()}")
        self.pos += 1
        self._scan_name_chars()
        return self.text[start:self.pos]

    def _scan_name_chars(self) -> None:
        # `x->y`: the arrow is not part of the name.
        self.pos = _NAME_TAIL.match(self.text, self.pos, self.n).end()

    def name(self, what: str = "a name") -> tuple[str, int]:
        """A `%name` or a bare identifier; returns (name, position)."""
        self.skip()
        start = self.pos
        if self.peek() == "%":
            self.pos += 1
            begin = self.pos
            self._scan_name_chars()
            if self.pos == begin:
                self.error(f"expected {what} after '%'", start)
            return self.text[begin:self.pos], start
        if self.pos >= self.n or self.text[self.pos] not in _IDENT_START:
            self.error(f"expected {what}, found {self.describe()}")
        self.pos += 1
        self._scan_name_chars()
        return self.text[start:self.pos], start

    def integer(self, what: str = "an integer") -> int:
        self.skip()
        start = self.pos
        m = _INTEGER.match(self.text, start, self.n)
        if m is not None:
            self.pos = m.end()
            return int(m.group())
        if self.peek() in "+-":
            self.pos += 1
        digits = self.pos
        while self.pos < self.n and self.text[self.pos].isdigit() and \
                self.text[self.pos].isascii():
            self.pos += 1
        if self.pos == digits:
            self.pos = start
            self.error(f"expected {what}, found {self.describe()}")
        return int(self.text[start:self.pos])

    def string(self) -> str:
        """A double-quoted string with C escapes; returns its value."""
        self.skip()
        start = self.pos
        if self.peek() != '"':
            self.error(f"expected a string, found {self.describe()}")
        end = _string_end(self.text, self.pos)
        if end < 0:
            self.error("unterminated string", start)
        self.pos = end
        return _unescape(self.text[start + 1:end - 1])

    def raw_value(self) -> tuple[str, int]:
        """The text of an attribute value: up to the next ',' or line end
        outside brackets and strings. Returns (text, start position)."""
        self.skip(newlines=False)
        start = self.pos
        text, n = self.text, self.n
        stack: list[tuple[str, int]] = []
        closers = {"{": "}", "[": "]", "(": ")"}
        i = self.pos
        while i < n:
            c = text[i]
            if c == '"':
                end = _string_end(text, i)
                if end < 0:
                    self.error("unterminated string", i)
                i = end
                continue
            if c in closers:
                stack.append((closers[c], i))
                if len(stack) > _MAX_DEPTH:
                    self.error("nesting too deep", i)
            elif c in "}])":
                if not stack:
                    break
                want, opened = stack.pop()
                if c != want:
                    self.error(f"unbalanced brackets: '{c}' closes "
                               f"'{text[opened]}' opened at "
                               f"{':'.join(map(str, self.location(opened)))}",
                               i)
            elif not stack and c in ",\n":
                break
            i += 1
        if stack:
            self.error(f"unbalanced brackets: '{text[stack[-1][1]]}' is never "
                       "closed", stack[-1][1])
        self.pos = i
        return text[start:i].rstrip(), start

    # --------------------------------------------------------------- shapes

    def comma_list(self, close: str, what: str, item):
        """Items separated by commas up to `close` (consumed); the opening
        bracket has been consumed already."""
        out = []
        self.skip()
        if self.peek() == close:
            self.pos += 1
            return out
        while True:
            out.append(item())
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() == close:
                self.pos += 1
                return out
            self.error(f"expected ',' or '{close}' in {what}, found {self.describe()}")

    def shape(self, depth: int = 0) -> Shape:
        self.skip()
        if depth > _MAX_DEPTH:
            self.error("shape nesting too deep")
        start = self.pos
        plain = self._plain_shape()
        if plain is not None:
            return plain
        if self.peek() == "(":
            self.pos += 1
            elements = self.comma_list(")", "a tuple shape", lambda: self.shape(depth + 1))
            return Shape("", (), None, tuple(elements))
        if self.pos >= self.n or self.text[self.pos] not in _IDENT_START:
            self.error(f"expected a shape, found {self.describe()}")
        while self.pos < self.n and (self.text[self.pos].isalnum() and
                                     self.text[self.pos].isascii()
                                     or self.text[self.pos] == "_"):
            self.pos += 1
        etype = self.text[start:self.pos]
        if self.peek() != "[":
            self.pos = start
            self.error(f"expected a shape, found {self.describe()}")
        if etype not in ELEMENT_TYPES and etype != "token":
            self.error(f"unknown element type '{etype}'", start)
        self.pos += 1
        def dimension() -> int:
            self.skip()
            if self.at("<="):
                self.error("dynamic dimensions ('<=') are not supported")
            if self.peek() == "?":
                self.error("unbounded dynamic dimensions ('?') are not supported")
            dim_pos = self.pos
            dim = self.integer("a dimension size")
            if dim < 0:
                self.error("negative dimension size", dim_pos)
            return dim

        dims: list[int] = self.comma_list("]", "the dimensions", dimension)
        if etype == "token" and dims:
            self.error("a token shape has no dimensions", start)
        if etype != "token":
            # XLA's ShapeUtil rule: the element count and the byte size of
            # an array must fit in int64.
            elements = _oversized_elements(etype, dims)
            if elements is not None:
                self.error(f"shape {etype}[{','.join(map(str, dims))}] has "
                           f"{elements} elements: its size does not fit in int64", start)
        layout, space = None, 0
        if self.peek() == "{":  # the layout follows the ']' directly
            layout, space = self.layout(len(dims))
        return Shape(etype, tuple(dims), layout, None, space)

    def _plain_shape(self) -> Shape | None:
        """The shape at `pos` when `_PLAIN_SHAPE` matches it and it is
        valid (consumed); None, nothing consumed, otherwise: `shape` then
        parses it character by character (and reports what is wrong)."""
        m = _PLAIN_SHAPE.match(self.text, self.pos, self.n)
        if m is None:
            return None
        end = m.end()
        if end < self.n and self.text[end] == "{":
            return None   # a layout with tiling or spaces
        key = m.group()
        known = _PLAIN_SHAPES.get(key)
        if known is None:
            etype, dims_text, layout_text = m.groups()
            if etype not in ELEMENT_TYPES or etype == "token":
                return None
            dims = tuple(map(int, dims_text.split(","))) if dims_text else ()
            if _oversized_elements(etype, dims) is not None:
                return None
            layout: tuple[int, ...] | None = None
            if key.endswith("}"):
                layout = tuple(map(int, layout_text.split(","))) if layout_text else ()
                if layout and sorted(layout) != list(range(len(dims))):
                    return None
                if not layout and dims:
                    layout = None   # `{}` on an array: no layout
            if len(_PLAIN_SHAPES) >= 4096:
                _PLAIN_SHAPES.clear()
            known = _PLAIN_SHAPES[key] = (etype, dims, layout)
        self.pos = end
        return Shape(*known)

    def layout(self, rank: int) -> tuple[tuple[int, ...] | None, int]:
        """(minor-to-major, memory space) of the layout at `pos`."""
        start = self.pos
        space = 0
        self.pos += 1
        minor_to_major: list[int] = []
        self.skip()
        while self.peek() not in ("}", ":", ""):
            minor_to_major.append(self.integer("a layout dimension"))
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                self.skip()
            elif self.peek() not in ("}", ":"):
                self.error(f"expected ',' or '}}' in a layout, found "
                           f"{self.describe()}")
        if self.peek() == ":":  # tiling, element size...: skipped; the memory space kept
            depth = 1
            self.pos += 1
            details = self.pos
            while self.pos < self.n and depth:
                c = self.text[self.pos]
                depth += {"{": 1, "}": -1}.get(c, 0)
                self.pos += 1
            if depth:
                self.error("unterminated layout", start)
            found = _MEMORY_SPACE.search(self.text, details, self.pos)
            if found is not None:
                space = int(found.group(1))
        else:
            self.expect("}")
        if minor_to_major and sorted(minor_to_major) != list(range(rank)):
            self.error(f"layout {{{','.join(map(str, minor_to_major))}}} is "
                       f"not a permutation of the {rank} dimensions", start)
        if not minor_to_major and rank:
            return None, space  # `{}` on an array: no layout
        return tuple(minor_to_major), space

    # --------------------------------------------------------------- module

    def parse(self) -> HloModule:
        self.skip()
        module = HloModule(name="", source=self.source)
        if self.at_keyword("HloModule"):
            self.pos += len("HloModule")
            name, _ = self.name("a module name")
            module.name = name
            self.skip(newlines=False)
            if self.peek() == ":":  # tolerated (seen in hand-written texts)
                self.pos += 1
            while True:
                self.skip(newlines=False)
                if self.peek() != ",":
                    break
                self.pos += 1
                self.skip(newlines=False)
                key_pos = self.pos
                key = self.attr_key()
                self.expect("=")
                value, _ = self.raw_value()
                if not value:
                    self.error(f"missing value of module attribute '{key}'")
                if key in module.attrs:
                    self.error(f"duplicate module attribute '{key}'", key_pos)
                module.attrs[key] = value
            self.skip(newlines=False)
            if self.pos < self.n and self.peek() != "\n":
                self.error(f"unexpected {self.describe()} after the module "
                           "header")
        else:
            base = os.path.basename(self.source) if self.source else ""
            module.name = base.split(".")[0] if base and \
                not base.startswith("<") else "module"
        sections: dict[str, list[str]] = {}
        seen_names: dict[str, int] = {}
        while True:
            self.skip()
            if self.pos >= self.n:
                break
            if self.at_keyword("HloModule"):
                self.error("a second 'HloModule' header")
            section = self.section_name()
            if section is not None:
                if section in sections:
                    self.error(f"duplicate section '{section}'")
                sections[section] = self.section_body()
                continue
            comp_pos = self.pos
            comp = self.computation()
            if comp.name in seen_names:
                self.error(f"duplicate computation name '{comp.name}'",
                           comp_pos, instruction="")
            seen_names[comp.name] = comp_pos
            module.computations.append(comp)
        if not module.computations:
            self.error("no computation in the module" if self.n and
                       self.text.strip() else "empty HLO text")
        entries = [c for c in module.computations if c.is_entry]
        if len(entries) > 1:
            self.error("more than one ENTRY computation",
                       self.comp_pos[id(entries[1])], instruction="")
        module.sections = sections
        self.resolve_computation_refs(module)
        # The verifier reads the header (a collective's group size may
        # depend on replica_count and num_partitions).
        self.header = module.attrs
        for comp in module.computations:
            self.verify(comp)
        return module

    def section_name(self) -> str | None:
        for section in _SECTION_NAMES:
            if self.at_keyword(section):
                after = self.pos + len(section)
                save = self.pos
                self.pos = after
                self.skip(newlines=False)
                if self.pos >= self.n or self.peek() == "\n":
                    return section
                self.pos = save
        return None

    def section_body(self) -> list[str]:
        entries: list[str] = []
        while True:
            self.skip()
            if not (self.peek().isdigit() and self.peek().isascii()):
                return entries
            start = self.pos
            self.integer("a section entry id")
            value, _ = self.raw_value()
            if not value:
                self.error("a section entry without a value", start)
            entries.append(self.text[start:self.pos].strip())
            self.skip(newlines=False)
            if self.pos < self.n and self.peek() != "\n":
                self.error(f"unexpected {self.describe()} in a section")

    def computation(self) -> HloComputation:
        self.inst_name = None
        is_entry = False
        if self.at_keyword("ENTRY"):
            is_entry = True
            self.pos += len("ENTRY")
        name, name_pos = self.name("a computation name")
        comp = HloComputation(name=name, is_entry=is_entry,
                              location=Location(*self.location(name_pos)))
        self.comp_pos[id(comp)] = name_pos
        signature: tuple[list[tuple[str, Shape, int]], Shape] | None = None
        self.skip()
        if self.peek() == "(":
            self.pos += 1
            params: list[tuple[str, Shape, int]] = []

            def parameter():
                pname, ppos = self.name("a parameter name")
                self.expect(":")
                return pname, self.shape(), ppos

            params.extend(self.comma_list(")", "the parameter list", parameter))
            self.expect("->", "before the result shape")
            signature = (params, self.shape())
        self.skip()
        if self.peek() != "{":
            self.error(f"expected '{{' to open computation '{name}', found "
                       f"{self.describe()}")
        open_pos = self.pos
        self.pos += 1
        names: dict[str, HloInstruction] = {}
        root: HloInstruction | None = None
        while True:
            self.skip()
            if self.pos >= self.n:
                self.error(f"unbalanced braces: computation '{name}' is never "
                           "closed", open_pos, instruction="")
            if self.peek() == "}":
                self.pos += 1
                break
            inst, is_root = self.instruction()
            if inst.name in names:
                self.error(f"duplicate instruction name '{inst.name}'",
                           self.inst_pos[id(inst)])
            names[inst.name] = inst
            inst.parent = comp
            comp.instructions.append(inst)
            if is_root:
                if root is not None:
                    self.error(f"more than one ROOT in computation '{name}'",
                               self.inst_pos[id(inst)])
                root = inst
        self.inst_name = None
        # `}, execution_thread="main"`
        while True:
            save = self.pos
            self.skip(newlines=False)
            if self.peek() != ",":
                self.pos = save
                break
            self.pos += 1
            self.attr_key()
            self.expect("=")
            self.raw_value()
        if not comp.instructions:
            self.error(f"computation '{name}' has no instructions", open_pos,
                       instruction="")
        comp.root = root if root is not None else comp.instructions[-1]
        self.resolve_operands(comp, names)
        self.check_parameters(comp, signature)
        return comp

    # ---------------------------------------------------------- instruction

    def instruction(self) -> tuple[HloInstruction, bool]:
        self.skip()
        # `[ROOT] name =` on one line, as printed, matched at once (a name
        # `ROOT` is left to the character-wise path, which tells it from
        # the keyword).
        m = _INSTRUCTION_HEAD.match(self.text, self.pos, self.n)
        if m is not None and m.group(2) != "ROOT":
            is_root = m.group(1) is not None
            name_pos = m.start(2)
            name = m.group(2)
            if name[0] == "%":
                name = name[1:]
            self.inst_name = name
            self.pos = m.end()
        else:
            is_root = False
            if self.at_keyword("ROOT"):
                is_root = True
                self.pos += 4
            name, name_pos = self.name("an instruction name")
            self.inst_name = name
            self.expect("=", f"after the instruction name '{name}'")
        self.skip()
        # XLA prints a tuple without its shape at times (`t = tuple(a, b)`):
        # the shape is its operands', set once they are resolved.
        untyped_tuple = self.at_keyword("tuple")
        shape = Shape("", (), None, ()) if untyped_tuple else self.shape()
        self.skip()
        opcode_pos = self.pos
        if self.pos >= self.n or self.text[self.pos] not in _IDENT_START:
            self.error(f"expected an opcode, found {self.describe()}")
        opcode = self.ident("an opcode")
        if opcode not in HLO_OPCODES:
            self.error(f"unknown opcode '{opcode}'", opcode_pos)
        inst = HloInstruction(name=name, opcode=opcode, shape=shape,
                              location=Location(*self.location(name_pos)))
        self.inst_pos[id(inst)] = name_pos
        if untyped_tuple:
            self.untyped_tuples.append(inst)
        self.skip()
        if self.peek() != "(":
            self.error(f"expected '(' after opcode '{opcode}', found "
                       f"{self.describe()}")
        self.pos += 1
        refs: list[tuple[str, int, Shape | None]] = []
        if opcode == "constant":
            inst.literal = self.literal(shape)
            self.expect(")", "to close the constant")
        elif opcode == "parameter":
            num_pos = self.pos
            number = self.integer("a parameter number")
            if number < 0:
                self.error("negative parameter number", num_pos)
            inst.parameter_number = number
            self.expect(")", "to close the parameter")
        else:
            def operand() -> tuple[str, int, Shape | None]:
                self.skip()
                # Most operands are a bare name (not a shape's element
                # type, which a '[' follows): matched at once.
                m = _OPERAND_NAME.match(self.text, self.pos, self.n)
                if m is not None:
                    end = m.end()
                    if end >= self.n or self.text[end] != "[":
                        pos_ = self.pos
                        self.pos = end
                        text_ = m.group()
                        return (text_[1:] if text_[0] == "%" else text_), pos_, None
                # A typed operand starts with its shape.
                typed = self.shape() if self.peek() == "(" or self._at_shape() else None
                name_, pos_ = self.name("an operand name")
                return name_, pos_, typed
            refs = self.comma_list(")", "the operand list", operand)
        self.operand_refs[id(inst)] = refs
        arity = _ARITY.get(opcode)
        if arity is not None and len(refs) != arity and \
                opcode not in ("constant", "parameter"):
            self.error(f"'{opcode}' takes {arity} operand"
                       f"{'s' if arity != 1 else ''}, got {len(refs)}",
                       opcode_pos)
        least = _MIN_ARITY.get(opcode)
        if least is not None and len(refs) < least:
            self.error(f"'{opcode}' takes at least {least} operand"
                       f"{'s' if least != 1 else ''}, got {len(refs)}",
                       opcode_pos)
        # Attributes.
        while True:
            save = self.pos
            self.skip()
            if self.peek() != ",":
                self.pos = save
                break
            self.pos += 1
            self.skip()
            key_pos = self.pos
            key = self.attr_key()
            self.expect("=", f"after attribute '{key}'")
            value, value_pos = self.raw_value()
            if not value:
                self.error(f"missing value of attribute '{key}'", value_pos)
            if key == "replica_groups" and value.startswith("mesh"):
                value = self.mesh_device_list_tail(value, value_pos)
            if key in inst.attrs:
                self.error(f"duplicate attribute '{key}'", key_pos)
            inst.attrs[key] = self.typed_attr(inst, key, value, value_pos)
        return inst, is_root

    def mesh_device_list_tail(self, value: str, value_pos: int) -> str:
        """The mesh form of replica groups with its device order,
        `mesh['x'=8], device_ids=([2,4]T(1,0)) {'x'}`, has a comma of its
        own: the value runs on through the device ids and the axes."""
        save = self.pos
        self.skip(newlines=False)
        if "{" in value or not self.at(","):
            self.pos = save
            return value
        self.pos += 1
        self.skip(newlines=False)
        if not self.at("device_ids"):
            self.pos = save
            return value
        rest, _ = self.raw_value()
        return self.text[value_pos:self.pos].rstrip() if rest else value

    def _at_shape(self) -> bool:
        i = self.pos
        text, n = self.text, self.n
        if i >= n or text[i] not in _IDENT_START:
            return False
        while i < n and (text[i].isalnum() and text[i].isascii()
                         or text[i] == "_"):
            i += 1
        return i < n and text[i] == "["

    def attr_key(self) -> str:
        self.skip()
        start = self.pos
        if self.pos >= self.n or self.text[self.pos] not in _IDENT_START:
            self.error(f"expected an attribute name, found {self.describe()}")
        while self.pos < self.n and (self.text[self.pos] in _IDENT_START or
                                     self.text[self.pos].isdigit() or
                                     self.text[self.pos] == "-"):
            self.pos += 1
        return self.text[start:self.pos]

    # ----------------------------------------------------------- attributes

    def typed_attr(self, inst: HloInstruction, key: str, raw: str,
                   pos: int) -> Any:
        sub = _SubParser(self, raw, pos)
        if key in _INT_LIST_ATTRS:
            value = sub.int_list()
        elif key in _INT_ATTRS:
            value = sub.integer(f"an integer value of '{key}'")
        elif key in _BOOL_ATTRS:
            word = sub.ident(f"true or false for '{key}'")
            if word not in ("true", "false"):
                sub.error(f"expected true or false for '{key}', got '{word}'",
                          sub.pos - len(word))
            value = word == "true"
        elif key == "slice":
            value = sub.slice_spec()
        elif key == "padding":
            value = sub.padding_spec(3)
        elif key == "window":
            value = sub.window_spec()
        elif key in _COMPUTATION_ATTRS or key in _COMPUTATION_LIST_ATTRS:
            names, is_list = sub.name_list(f"a computation name for '{key}'")
            if key in _COMPUTATION_ATTRS and is_list and key != "calls":
                sub.error(f"'{key}' takes one computation", 0)
            ref = _PendingRef(names, pos,
                              is_list or key in _COMPUTATION_LIST_ATTRS)
            self.pending_refs.append((inst, key, ref))
            return ref
        elif key == "control-predecessors":
            names, _ = sub.name_list("an instruction name")
            value = tuple(n for n, _ in names)
            self.control_refs.append((inst, names))
            return value
        elif key == "metadata" or key == "frontend_attributes":
            return _dict_attr(raw) if raw.startswith("{") else raw
        elif key in ("backend_config", "custom_call_target") and \
                raw.startswith('"'):
            value = sub.string()
        else:
            return raw
        sub.finish(key)
        return value

    # -------------------------------------------------------------- linking

    def infer_tuple_shapes(self, comp: HloComputation) -> None:
        """Shapes of the tuples written without one: their operands'
        (in rounds, since operands may be written after their users)."""
        members = {id(i) for i in comp.instructions}
        pending = [i for i in self.untyped_tuples if id(i) in members]
        known = members - {id(i) for i in pending}
        while pending:
            ready = [i for i in pending if all(id(o) in known for o in i.operands)]
            if not ready:
                self.inst_error(pending[0], "the shape of this tuple depends on "
                                            "itself through its operands")
            for inst in ready:
                inst.shape = Shape("", (), None, tuple(o.shape for o in inst.operands))
                known.add(id(inst))
            pending = [i for i in pending if id(i) not in known]

    def resolve_operands(self, comp: HloComputation,
                         names: dict[str, HloInstruction]) -> None:
        for inst in comp.instructions:
            refs = self.operand_refs.pop(id(inst), [])
            for ref, pos, typed in refs:
                operand = names.get(ref)
                if operand is None:
                    self.error(f"use of undefined instruction '%{ref}'", pos,
                               instruction=inst.name)
                if typed is not None and not _compatible(typed, operand.shape):
                    self.error(f"operand '%{ref}' is written {typed} but is "
                               f"{operand.shape}", pos, instruction=inst.name)
                inst.operands.append(operand)
        for inst, ctl in self.control_refs:
            if inst.parent is comp:
                for ref, pos in ctl:
                    if ref not in names:
                        self.error(f"control predecessor '%{ref}' is not "
                                   "defined", pos, instruction=inst.name)
        self.infer_tuple_shapes(comp)
        # The graph must be acyclic (operands may be written after users).
        state: dict[int, int] = {}
        for inst in comp.instructions:
            if state.get(id(inst)):
                continue
            stack = [(inst, 0)]
            state[id(inst)] = 1
            while stack:
                node, i = stack[-1]
                if i < len(node.operands):
                    stack[-1] = (node, i + 1)
                    op = node.operands[i]
                    s = state.get(id(op), 0)
                    if s == 1:
                        self.inst_error(node, f"cycle through operand "
                                              f"'%{op.name}'")
                    if s == 0:
                        state[id(op)] = 1
                        stack.append((op, 0))
                else:
                    state[id(node)] = 2
                    stack.pop()
        # Operands written after their users: every walk over the
        # computation expects operands first, so the order is restored
        # (stably: text order wherever it is already valid).
        comp._mark_unordered()
        # Users in order, each once (x * x is one use by one user); linear
        # in the number of users.
        listed: set[tuple[int, int]] = set()
        for inst in comp.instructions:
            for op in inst.operands:
                pair = (id(op), id(inst))
                if pair not in listed:
                    listed.add(pair)
                    op.users.append(inst)

    def check_parameters(self, comp: HloComputation, signature) -> None:
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        numbers: dict[int, HloInstruction] = {}
        for p in params:
            if p.parameter_number in numbers:
                self.inst_error(p, f"duplicate parameter number "
                                   f"{p.parameter_number}")
            numbers[p.parameter_number] = p
        for k in range(len(params)):
            if k not in numbers:
                bad = max(numbers)
                self.inst_error(numbers[bad], f"parameter numbers must be 0.."
                                              f"{len(params) - 1}, got {bad}")
        if signature is None:
            return
        declared, result = signature
        if len(declared) != len(params):
            self.error(f"computation '{comp.name}' declares {len(declared)} "
                       f"parameters but has {len(params)}",
                       self.comp_pos[id(comp)], instruction="")
        for k, (pname, pshape, ppos) in enumerate(declared):
            if not _compatible(pshape, numbers[k].shape):
                self.error(f"parameter {k} is declared {pshape} in the "
                           f"signature but is {numbers[k].shape}", ppos,
                           instruction="")
        if not _compatible(result, comp.root.shape):
            self.error(f"computation '{comp.name}' returns {result} but its "
                       f"root '{comp.root.name}' is {comp.root.shape}",
                       self.comp_pos[id(comp)], instruction="")

    def resolve_computation_refs(self, module: HloModule) -> None:
        comps = {c.name: c for c in module.computations}
        for inst, key, ref in self.pending_refs:
            resolved = []
            for cname, pos in ref.names:
                target = comps.get(cname)
                if target is None:
                    self.error(f"unknown computation '%{cname}' in '{key}'",
                               pos, instruction=inst.name)
                if target is inst.parent:
                    self.error(f"computation '{cname}' calls itself", pos,
                               instruction=inst.name)
                resolved.append(target)
            inst.attrs[key] = resolved if ref.is_list else resolved[0]
        self.pending_refs = []
        self.check_call_graph(module)

    def check_call_graph(self, module: HloModule) -> None:
        """Computations must not call themselves, directly or through
        others (XLA's call graph is a DAG)."""
        state: dict[int, int] = {}
        for comp in module.computations:
            if state.get(id(comp)):
                continue
            state[id(comp)] = 1
            stack = [(comp, iter(_callees(comp)))]
            while stack:
                current, callees = stack[-1]
                step = next(callees, None)
                if step is None:
                    state[id(current)] = 2
                    stack.pop()
                    continue
                inst, callee = step
                seen = state.get(id(callee), 0)
                if seen == 1:
                    path = " -> ".join(c.name for c, _ in stack)
                    self.inst_error(inst, f"call cycle: {path} -> {callee.name}")
                if seen == 0:
                    state[id(callee)] = 1
                    stack.append((callee, iter(_callees(callee))))

    # ----------------------------------------------------------- validation

    def verify(self, comp: HloComputation) -> None:
        for inst in comp.instructions:
            self.verify_instruction(inst)

    def verify_instruction(self, inst: HloInstruction) -> None:
        """The verifier's rules (xla_gpu.hlo.verifier), reported at the
        instruction's position in the text."""
        if inst.opcode == "broadcast" and "dimensions" not in inst.attrs and \
                inst.operands and inst.operands[0].shape.rank == 0:
            # As XLA's parser: optional only for a broadcast of a scalar.
            inst.attrs["dimensions"] = ()
        try:
            verify_instruction(inst, self.header)
        except VerificationError as e:
            self.inst_error(e.instruction, e.detail)


class _SubParser(_Parser):
    """Parses one attribute value; positions map back into the text."""

    def __init__(self, parent: _Parser, raw: str, offset: int):
        self.parent = parent
        self.text = parent.text
        self.n = offset + len(raw)
        self.pos = offset
        self.source = parent.source
        self.line_starts = parent.line_starts
        self.inst_name = parent.inst_name

    def finish(self, key: str) -> None:
        self.skip()
        if self.pos < self.n:
            self.error(f"unexpected {self.describe()} in the value of "
                       f"'{key}'")

    def int_list(self) -> tuple[int, ...]:
        self.skip()
        if self.peek() != "{":
            return (self.integer(),)
        self.pos += 1
        return tuple(self.comma_list("}", "an integer list", self.integer))

    def slice_spec(self) -> list[tuple[int, int, int]]:
        self.expect("{")
        out: list[tuple[int, int, int]] = []
        self.skip()
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            self.expect("[")
            start = self.integer("a slice start")
            self.expect(":")
            limit = self.integer("a slice limit")
            stride = 1
            if self.accept(":"):
                stride_pos = self.pos
                stride = self.integer("a slice stride")
                if stride <= 0:
                    self.error("slice strides must be positive", stride_pos)
            self.expect("]")
            out.append((start, limit, stride))
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return out

    def padding_spec(self, parts: int) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        while True:
            dim: list[int] = [self.integer("a padding amount")]
            while self.peek() == "_":
                self.pos += 1
                dim.append(self.integer("a padding amount"))
            if len(dim) not in (2, 3) or len(dim) > parts:
                self.error(f"a padding entry has {len(dim)} parts; expected "
                           f"lo_hi{'_interior' if parts == 3 else ''}")
            if len(dim) == 2 and parts == 3:
                dim.append(0)
            if parts == 3 and dim[2] < 0:
                self.error("negative interior padding")
            out.append(tuple(dim))
            if self.peek() == "x":
                self.pos += 1
                continue
            return out

    def dim_list(self) -> tuple[int, ...]:
        out = [self.integer()]
        while self.peek() == "x":
            self.pos += 1
            out.append(self.integer())
        return tuple(out)

    def window_spec(self) -> dict[str, Any]:
        self.expect("{")
        out: dict[str, Any] = {}
        while True:
            self.skip()
            if self.peek() == "}":
                self.pos += 1
                break
            key = self.attr_key()
            self.expect("=")
            self.skip()
            if key == "pad":
                out[key] = self.padding_spec(2)
            else:
                out[key] = self.dim_list()
        rank = {len(v) for v in out.values()}
        if len(rank) > 1:
            self.error("window fields differ in rank")
        return out

    def name_list(self, what: str) -> tuple[list[tuple[str, int]], bool]:
        self.skip()
        if self.peek() != "{":
            return [self.name(what)], False
        self.pos += 1
        out: list[tuple[str, int]] = []
        self.skip()
        if self.peek() == "}":
            self.pos += 1
            return out, True
        while True:
            out.append(self.name(what))
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return out, True


# ---------------------------------------------------------------- helpers


def _string_end(text: str, i: int) -> int:
    """Index after the string that opens at text[i] == '"', or -1."""
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return j + 1
        if c == "\n":
            return -1
        j += 1
    return -1


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\",
            "0": "\0", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "?": "?"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt in "01234567":
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(chr(int(s[i + 1:j], 8)))
            i = j
        elif nxt == "x":
            j = i + 2
            while j < len(s) and s[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(chr(int(s[i + 2:j], 16)) if j > i + 2 else "x")
            i = j
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _dict_attr(raw: str) -> dict[str, Any] | str:
    """`{key=value key2="v" ...}` (spaces or commas between entries) as a
    dict; the raw text when it does not have that form."""
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return raw
    body = text[1:-1]
    out: dict[str, Any] = {}
    i, n = 0, len(body)
    while True:
        while i < n and (body[i].isspace() or body[i] == ","):
            i += 1
        if i >= n:
            return out
        j = i
        while j < n and (body[j].isalnum() or body[j] in "_-."):
            j += 1
        if j == i or j >= n or body[j] != "=":
            return raw
        key = body[i:j]
        i = j + 1
        if i < n and body[i] == '"':
            end = _string_end(body, i)
            if end < 0:
                return raw
            out[key] = _unescape(body[i + 1:end - 1])
            i = end
        elif i < n and body[i] == "{":
            depth, j = 0, i
            while j < n:
                if body[j] == '"':
                    end = _string_end(body, j)
                    if end < 0:
                        return raw
                    j = end
                    continue
                depth += {"{": 1, "}": -1}.get(body[j], 0)
                j += 1
                if depth == 0:
                    break
            if depth:
                return raw
            out[key] = body[i:j]
            i = j
        else:
            j = i
            while j < n and not body[j].isspace() and body[j] != ",":
                j += 1
            word = body[i:j]
            if not word:
                return raw
            try:
                out[key] = int(word)
            except ValueError:
                out[key] = word
            i = j
