"""HLO text as XLA prints it (`HloModule::ToString`), from the graph the
parser builds and the passes rewrite. numpy only.

    text = module_to_text(module)            # parse_module(text) reads it back

The text round trips: parsing it and printing again gives the same text.
Computations print callees first (as XLA does); instructions in the
computation's order; operands with their shapes (`add(f32[4]{0} %a, ...)`);
typed attributes back in XLA's syntax (dimension lists, slices, paddings,
windows, computations, metadata); literals of every element type
(pred as true/false, floats in the shortest text that reads back to the same
value, inf/nan, complex as (re, im)).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .module import (CONTROL_PREDECESSORS, HloComputation, HloInstruction,
                     HloModule, callees_first)
from .shape import Shape, per_shape

__all__ = ["module_to_text", "computation_to_text", "instruction_to_text",
           "shape_to_text", "literal_to_text"]

_SECTION_ORDER = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


# ---------------------------------------------------------------- shapes


# The text (with its layout) of an array shape by the shape object: a
# printed module and CSE's keys ask it for every instruction and operand,
# and the few shape objects of a module recur (hashing a Shape for
# `_shape_text`'s table costs more than the answer). The entry holds the
# shape, so an id is not reused while it is here; only array shapes whose
# dims and layout are tuples (immutable) are kept.
_TEXTS: dict[int, tuple[Shape, str]] = {}


def shape_to_text(shape: Shape, layout: bool = True) -> str:
    """`f32[4,16]{1,0}`, `(f32[], s32[2]{0})`, `token[]`. Arrays without a
    layout print XLA's default (major-to-minor) layout; scalars none."""
    if not layout:
        return _shape_text(shape, layout)
    hit = _TEXTS.get(id(shape))
    if hit is not None and hit[0] is shape:
        return hit[1]
    text = _shape_text(shape, True)
    if shape.tuple_shapes is None and shape.dims.__class__ is tuple and \
            (shape.layout is None or shape.layout.__class__ is tuple):
        if len(_TEXTS) >= 1 << 16:
            _TEXTS.clear()
        _TEXTS[id(shape)] = (shape, text)
    return text


@per_shape
def _shape_text(shape: Shape, layout: bool) -> str:
    if shape.is_tuple:
        return "(" + ", ".join(shape_to_text(s, layout) for s in shape.tuple_shapes) + ")"
    text = f"{shape.element_type}[{','.join(map(str, shape.dims))}]"
    if layout and shape.memory_space:   # host memory: `f32[4]{0:S(5)}`, `f32[]{:S(5)}`
        text += "{" + ",".join(map(str, shape.minor_to_major)) + f":S({shape.memory_space})}}"
    elif layout and shape.rank and shape.element_type != "token":
        text += "{" + ",".join(map(str, shape.minor_to_major)) + "}"
    return text


# -------------------------------------------------------------- literals


def _float_text(value: float, dtype: np.dtype) -> str:
    """The shortest %g text that reads back to the same value of `dtype`
    (XLA's RoundTripFpToString); inf, -inf, nan, -nan, -0."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    target = np.array(value, dtype=dtype)
    # A short text of a value near the type's largest rounds past it: inf,
    # not a match (and no overflow warning for the caller to see).
    with np.errstate(over="ignore"):
        for digits in range(1, 18):
            text = f"{value:.{digits}g}"
            if np.array(float(text), dtype=np.float64).astype(dtype) == target:
                return text
    return repr(float(value))


def _scalar_text(value: Any, etype: str, dtype: np.dtype) -> str:
    if etype == "pred":
        return "true" if bool(value) else "false"
    if etype in ("c64", "c128"):
        part = np.float32 if etype == "c64" else np.float64
        c = complex(value)
        return f"({_float_text(c.real, np.dtype(part))}, " \
               f"{_float_text(c.imag, np.dtype(part))})"
    if etype[0] in "su":
        return str(int(value))
    return _float_text(float(value), dtype)


def literal_to_text(literal: Any, shape: Shape) -> str:
    """A constant's literal: `1.5`, `{1, 2}`, `{ {1, 2}, {3, 4} }`,
    a tuple `({1}, 2)`; `{...}` when the values are unknown."""
    if shape.is_tuple:
        if literal is None:
            return "{...}"
        return "(" + ", ".join(literal_to_text(v, s) for v, s in
                               zip(literal, shape.tuple_shapes)) + ")"
    if literal is None:
        return "{...}"
    etype = shape.element_type
    dtype = shape.dtype
    arr = np.asarray(literal)
    if shape.rank == 0:
        return _scalar_text(arr.reshape(()).item() if etype in ("pred",) or etype[0] in "suc"
                            else float(arr.reshape(()).astype(np.float64)), etype, dtype)
    flat = arr.reshape(-1)
    if etype == "pred" or etype[0] in "suc":
        items = [_scalar_text(v, etype, dtype) for v in flat.tolist()]
    else:
        items = [_scalar_text(v, etype, dtype) for v in
                 flat.astype(np.float64).tolist()]
    return _nest(items, list(shape.dims))


def _nest(items: list[str], dims: list[int]) -> str:
    """Row-major items nested by dims: `{1, 2}` or `{ {1, 2}, {3, 4} }`."""
    if len(dims) == 1:
        return "{" + ", ".join(items) + "}"
    inner = math.prod(dims[1:])
    parts = [_nest(items[k * inner:(k + 1) * inner], dims[1:])
             for k in range(dims[0])]
    return "{ " + ", ".join(parts) + " }" if parts else "{}"


# ------------------------------------------------------------ attributes


def _quote(text: str) -> str:
    out = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 32:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _int_list(values) -> str:
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def _slice_text(spec) -> str:
    parts = []
    for start, limit, stride in spec:
        parts.append(f"[{start}:{limit}]" if stride == 1 else f"[{start}:{limit}:{stride}]")
    return "{" + ", ".join(parts) + "}"


def _padding_text(spec) -> str:
    parts = []
    for entry in spec:
        lo, hi = entry[0], entry[1]
        interior = entry[2] if len(entry) > 2 else 0
        parts.append(f"{lo}_{hi}_{interior}" if interior else f"{lo}_{hi}")
    return "x".join(parts)


def _window_text(window: dict) -> str:
    parts = []
    for key, value in window.items():
        if key == "pad":
            parts.append(f"pad={'x'.join(f'{lo}_{hi}' for lo, hi, *_ in value)}")
        else:
            parts.append(f"{key}={'x'.join(str(v) for v in value)}")
    return "{" + " ".join(parts) + "}"


def _dict_text(values: dict) -> str:
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            parts.append(f"{key}={'true' if value else 'false'}")
        elif isinstance(value, int):
            parts.append(f"{key}={value}")
        elif isinstance(value, str) and value.startswith("{") and value.endswith("}"):
            parts.append(f"{key}={value}")
        else:
            parts.append(f"{key}={_quote(str(value))}")
    return "{" + " ".join(parts) + "}"


def attr_to_text(key: str, value: Any) -> str:
    """`key=value` in XLA's syntax for the typed attributes the parser
    builds; raw text (unknown attributes) as it was written."""
    if isinstance(value, HloComputation):
        return f"{key}=%{value.name}"
    if isinstance(value, list) and value and \
            all(isinstance(v, HloComputation) for v in value):
        return f"{key}={{{', '.join('%' + v.name for v in value)}}}"
    if key == CONTROL_PREDECESSORS:
        return f"{key}={{{', '.join('%' + n for n in value)}}}"
    if key == "calls" and isinstance(value, list):
        return f"{key}={{{', '.join('%' + v.name for v in value)}}}"
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, (int, np.integer)):
        return f"{key}={int(value)}"
    if isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) for v in value):
        return f"{key}={_int_list(value)}"
    if key == "slice" and isinstance(value, list):
        return f"{key}={_slice_text(value)}"
    if key == "padding" and isinstance(value, list):
        return f"{key}={_padding_text(value)}"
    if key == "window" and isinstance(value, dict):
        return f"{key}={_window_text(value)}"
    if isinstance(value, dict):
        return f"{key}={_dict_text(value)}"
    if key == "custom_call_target":
        return f"{key}={_quote(str(value))}"
    if key == "backend_config":
        text = str(value)
        if text.startswith("{") and text.endswith("}"):
            return f"{key}={text}"
        return f"{key}={_quote(text)}"
    return f"{key}={value}"


# ----------------------------------------------------------- instructions


def instruction_to_text(inst: HloInstruction, is_root: bool = False,
                        operand_shapes: bool = True, metadata: bool = True) -> str:
    """`ROOT %name = shape opcode(operands), attr=...` (no indentation)."""
    head = f"{'ROOT ' if is_root else ''}%{inst.name} = {shape_to_text(inst.shape)} {inst.opcode}("
    if inst.opcode == "constant":
        body = literal_to_text(inst.literal, inst.shape)
    elif inst.opcode == "parameter":
        body = str(inst.parameter_number)
    elif operand_shapes:
        body = ", ".join(f"{shape_to_text(o.shape)} %{o.name}" for o in inst.operands)
    else:
        body = ", ".join(f"%{o.name}" for o in inst.operands)
    attrs = [attr_to_text(k, v) for k, v in inst.attrs.items()
             if metadata or k != "metadata"]
    return head + body + ")" + "".join(", " + a for a in attrs)


def computation_to_text(comp: HloComputation, operand_shapes: bool = True,
                        metadata: bool = True) -> str:
    """`[ENTRY ]%name (p: shape, ...) -> shape { ... }`."""
    params = comp.parameters
    signature = ", ".join(f"{p.name}: {shape_to_text(p.shape, layout=False)}"
                          for p in params)
    result = shape_to_text(comp.root.shape, layout=False) if comp.root is not None else "()"
    lines = [f"{'ENTRY ' if comp.is_entry else ''}%{comp.name} ({signature}) -> {result} {{"]
    for inst in comp.instructions:
        lines.append("  " + instruction_to_text(inst, inst is comp.root,
                                                operand_shapes, metadata))
    lines.append("}")
    return "\n".join(lines)


def module_to_text(module: HloModule, operand_shapes: bool = True,
                   metadata: bool = True) -> str:
    """The whole module: header, metadata sections, computations (callees
    first, otherwise in the module's order)."""
    header = f"HloModule {module.name}"
    for key, value in module.attrs.items():
        header += f", {key}={value}"
    blocks = [header]
    sections = [s for s in _SECTION_ORDER if module.sections.get(s)] + \
        [s for s in module.sections if s not in _SECTION_ORDER and module.sections[s]]
    if metadata:
        for section in sections:
            blocks.append(section + "\n" + "\n".join(module.sections[section]))
    for comp in callees_first(module.computations):
        blocks.append(computation_to_text(comp, operand_shapes, metadata))
    return "\n\n".join(blocks) + "\n"

