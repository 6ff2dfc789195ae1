"""MLIR contexts with the xla_gpu dialect, and a Python view of
`#xla_gpu.indexing_map`.

    from xla_gpu import ir
    ctx = ir.Context()                       # an ordinary mlir.ir.Context
    m = ir.IndexingMap.parse("(d0)[s0] -> (d0 * 4 + s0), "
                             "domain: d0 in [0, 31], s0 in [0, 3]", ctx)
    m.dims[0].upper                          # 31
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from typing import Sequence

from mlir import ir as _ir

from . import _native
from ._ctypes_arrays import array_of, char_buffer

__all__ = ["Context", "KERNEL_DIALECTS", "register_dialect", "IndexingMap", "Variable",
           "Constraint", "is_indexing_map"]


def register_dialect(context: _ir.Context, load: bool = True) -> None:
    """Adds xla_gpu (and the func inliner extension it relies on) to
    `context`; with `load`, loads every registered dialect."""
    lib = _native.lib()
    registry = _ir.DialectRegistry()
    lib.xlaGpuRegisterDialect(_native.to_handle(registry))
    context.append_dialect_registry(registry)
    if load:
        context.load_all_available_dialects()


# The dialects a kernel's IR holds from emission (built from Python, which
# needs them loaded) to the LLVM and NVVM dialects, and those the passes
# create; a pass loads the dialects it declares when it runs, and the
# parser loads those of the text it reads.
KERNEL_DIALECTS = ("builtin", "func", "arith", "math", "scf", "cf", "tensor", "vector",
                   "gpu", "llvm", "nvvm", "complex", "affine", "memref", "index", "ub",
                   "xla_gpu")


def Context() -> _ir.Context:  # noqa: N802 - reads like the class it returns
    """An `mlir.ir.Context` with xla_gpu and the dialects of kernels
    (`KERNEL_DIALECTS`) loaded, every upstream dialect registered, and the
    xla_gpu passes registered (PassManager.parse knows them). Only those
    dialects are loaded, not all fifty: every greedy rewrite (each
    canonicalize) sorts the patterns of every loaded op, and every folder
    or inliner collects the interfaces of every loaded dialect, sorted by
    name (with all fifty, 5% of a kernel's pipeline; the same IR out).
    MLIR's own threading is off: a kernel module has a few functions, for
    which the thread pool's hand-offs cost a third of the pipeline's time
    (19 -> 13 ms on a row reduction); a program's kernels are compiled on
    host threads of their own instead (xla_gpu.program.kernels)."""
    context = _ir.Context(load_on_create_dialects=[])
    context.enable_multithreading(False)
    register_dialect(context, load=False)
    for name in KERNEL_DIALECTS:
        context.dialects[name]   # loads it
    return context


@dataclass(frozen=True)
class Variable:
    """A dimension or symbol: its name and closed range [lower, upper]."""
    name: str
    lower: int
    upper: int


@dataclass(frozen=True)
class Constraint:
    """`expr in [lower, upper]` over the map's dimensions and symbols."""
    expr: _ir.AffineExpr
    lower: int
    upper: int


def is_indexing_map(attr: _ir.Attribute) -> bool:
    return bool(_native.lib().xlaGpuAttributeIsAIndexingMap(_native.to_handle(attr)))


# The parts of an `IndexingMap` view, read from its attribute on first use.
_PARTS = ("affine_map", "dims", "symbols", "constraints")


def _snapshot(part):
    return tuple(part) if isinstance(part, list) else part


# What the C API answered about indexing-map attributes: the attribute
# built of some parts (`to_attr`), the parts read of one (`_read_part`)
# and the result of simplifying or composing (`_apply`). Each is a function
# of uniqued, immutable values of one context alone, and the emitters ask
# for the same few dozen maps over and over (gpt's kernels: ~650
# simplifications and compositions of ~150 distinct maps; ~1300 part
# reads of ~150). Kept per thread (a context is used by one thread at a
# time), for one context at a time: the memo holds attributes, which keep
# their context alive.
_MEMO_LIMIT = 4096


class _Memo(threading.local):
    def __init__(self):
        self.context: _ir.Context | None = None
        self.entries: dict = {}


_memo = _Memo()


def _memo_entries(context: _ir.Context) -> dict:
    """The memo of `context` (a new one when the context changed)."""
    if _memo.context is not context or len(_memo.entries) >= _MEMO_LIMIT:
        _memo.context, _memo.entries = context, {}
    return _memo.entries


@dataclass
class IndexingMap:
    """A view of `#xla_gpu.indexing_map`: an affine map, a named range per
    dimension and symbol, and constraints. Empty names print as d<i>/s<i>.

    Build one from its parts (AffineExprs from the bindings' arithmetic:
    `ir.AffineDimExpr.get(0) * 4 + ir.AffineSymbolExpr.get(0)`) and turn it
    into the attribute with `to_attr()`; or view an attribute with
    `from_attr()`, which reads the parts only when they are used, so that
    passing a map along costs nothing. The attribute is kept: `to_attr()` of
    a view, or a second `to_attr()`, does not build it again (unless the
    parts were changed in between). Text (`parse`, `str`) is for tests and
    debugging."""

    affine_map: _ir.AffineMap
    dims: list[Variable]
    symbols: list[Variable]
    constraints: list[Constraint] = field(default_factory=list)
    # The attribute built from (or viewed by) these parts, and a copy of
    # each part as it was when built or read (see _attr_is_current).
    _attr: _ir.Attribute | None = field(default=None, init=False, repr=False,
                                        compare=False)
    _attr_parts: dict = field(default_factory=dict, init=False, repr=False,
                              compare=False)

    @staticmethod
    def parse(text: str, context: _ir.Context | None = None) -> "IndexingMap":
        """Parses the text between the quotes of `#xla_gpu.indexing_map<"...">`.
        Raises mlir.ir.MLIRError with the diagnostic on bad input."""
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        attr = _ir.Attribute.parse(f'#xla_gpu.indexing_map<"{escaped}">',
                                   context=context)
        return IndexingMap.from_attr(attr)

    @staticmethod
    def from_attr(attr: _ir.Attribute) -> "IndexingMap":
        """A view of `attr`; each part is read when first used."""
        if not is_indexing_map(attr):
            raise TypeError(f"not an #xla_gpu.indexing_map: {attr}")
        return IndexingMap._view(attr)

    @staticmethod
    def _view(attr: _ir.Attribute) -> "IndexingMap":
        view = IndexingMap.__new__(IndexingMap)
        view._attr = attr
        view._attr_parts = {}
        return view

    @staticmethod
    def from_exprs(dims: Sequence[Variable], symbols: Sequence[Variable],
                   results: Sequence[_ir.AffineExpr],
                   constraints: Sequence[Constraint] = ()) -> "IndexingMap":
        """The map `(dims)[symbols] -> (results)`; `results` and the
        constraints' expressions are over `ir.AffineDimExpr.get(i)` (dims)
        and `ir.AffineSymbolExpr.get(i)` (symbols), in the current context."""
        affine_map = _ir.AffineMap.get(len(dims), len(symbols), list(results))
        return IndexingMap(affine_map, list(dims), list(symbols), list(constraints))

    def __getattr__(self, name: str):
        # Only called for attributes not set yet: the parts of a view.
        if name not in _PARTS or self.__dict__.get("_attr") is None:
            raise AttributeError(name)
        entries = _memo_entries(self._attr.context)
        key = (name, self._attr)
        known = entries.get(key)
        if known is None:
            known = entries[key] = _snapshot(self._read_part(name))
        # A list of its own: a caller may change the parts it reads.
        value = list(known) if isinstance(known, tuple) else known
        self.__dict__[name] = value
        self._attr_parts[name] = known
        return value

    def _read_part(self, name: str):
        """Reads one part of the viewed attribute through the C API."""
        lib, h = _native.lib(), _native.to_handle(self._attr)
        if name == "affine_map":
            return _native.from_handle(_ir.AffineMap, lib.xlaGpuIndexingMapAttrGetAffineMap(h))
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        if name == "constraints":
            constraints = []
            for i in range(lib.xlaGpuIndexingMapAttrGetNumConstraints(h)):
                expr = lib.xlaGpuIndexingMapAttrGetConstraint(h, i, ctypes.byref(lo),
                                                              ctypes.byref(hi))
                constraints.append(Constraint(
                    _native.from_handle(_ir.AffineExpr, expr), lo.value, hi.value))
            return constraints
        if name == "dims":
            count, prefix = self.affine_map.n_dims, "d"
            get_name = lib.xlaGpuIndexingMapAttrGetDimName
            get_bounds = lib.xlaGpuIndexingMapAttrGetDimBounds
        else:
            count, prefix = self.affine_map.n_symbols, "s"
            get_name = lib.xlaGpuIndexingMapAttrGetSymbolName
            get_bounds = lib.xlaGpuIndexingMapAttrGetSymbolBounds
        out = []
        for i in range(count):
            ref = get_name(h, i)
            var_name = _native.string_ref_bytes(ref).decode()
            get_bounds(h, i, ctypes.byref(lo), ctypes.byref(hi))
            out.append(Variable(var_name or f"{prefix}{i}", lo.value, hi.value))
        return out

    def _attr_is_current(self) -> bool:
        """Whether the kept attribute still matches the parts: every part
        that was read or given is unchanged since (unread parts of a view
        are the attribute's)."""
        if self._attr is None:
            return False
        given, kept = self.__dict__, self._attr_parts
        for name in _PARTS:
            if name in given:
                if name not in kept:
                    return False
                before, now = kept[name], given[name]
                if before is not now and before != _snapshot(now):
                    return False
        return True

    def to_attr(self) -> _ir.Attribute:
        """The attribute (in the affine map's context); built once. Raises
        ValueError when the parts do not agree."""
        if self._attr_is_current():
            return self._attr
        parts = {name: _snapshot(getattr(self, name)) for name in _PARTS}
        entries = _memo_entries(self.affine_map.context)
        key = ("build", *parts.values())
        attr = entries.get(key)
        if attr is None:
            attr = entries[key] = self._build_attr()
        self._attr, self._attr_parts = attr, parts
        return attr

    def _build_attr(self) -> _ir.Attribute:
        """The attribute of the parts, built through the C API."""

        def variables(vars_: Sequence[Variable]):
            names = array_of(_native._StringRef, [_native.string_ref(v.name) for v in vars_])
            bounds = array_of(ctypes.c_int64, [b for v in vars_ for b in (v.lower, v.upper)])
            return names, bounds

        if len(self.dims) != self.affine_map.n_dims or \
                len(self.symbols) != self.affine_map.n_symbols:
            raise ValueError(
                f"the affine map has {self.affine_map.n_dims} dims and "
                f"{self.affine_map.n_symbols} symbols, but {len(self.dims)} dim "
                f"and {len(self.symbols)} symbol variables were given")
        dim_names, dim_bounds = variables(self.dims)
        sym_names, sym_bounds = variables(self.symbols)
        n = len(self.constraints)
        exprs = array_of(_native._Handle, [_native.to_handle(c.expr) for c in self.constraints])
        bounds = array_of(ctypes.c_int64, [b for c in self.constraints for b in (c.lower, c.upper)])
        error = char_buffer(512)
        handle = _native.lib().xlaGpuIndexingMapAttrGet(
            _native.to_handle(self.affine_map.context),
            _native.to_handle(self.affine_map), dim_names, dim_bounds,
            sym_names, sym_bounds, n, exprs, bounds, error, len(error))
        if not handle.ptr:
            raise ValueError(f"invalid indexing map: {error.value.decode()}")
        return _native.from_handle(_ir.Attribute, handle)

    @staticmethod
    def linearization(shape: Sequence[int],
                      context: _ir.Context | None = None) -> "IndexingMap":
        """`(d0, ..., dn) -> (row-major linear index)` over a tensor of `shape`."""
        context = context or _ir.Context.current
        dims = array_of(ctypes.c_int64, shape)
        handle = _native.lib().xlaGpuIndexingMapAttrGetLinearization(
            _native.to_handle(context), len(shape), dims)
        return IndexingMap.from_attr(_native.from_handle(_ir.Attribute, handle))

    def simplified(self) -> "IndexingMap":
        """Range-aware simplification of results and constraints; constraints
        that always hold are dropped."""
        return self._apply(_native.lib().xlaGpuIndexingMapAttrSimplify)

    def _apply(self, fn, *more: "IndexingMap") -> "IndexingMap":
        attrs = [m.to_attr() for m in (self, *more)]
        entries = _memo_entries(attrs[0].context)
        key = (fn.__name__, *attrs)
        result = entries.get(key)
        if result is None:
            args = [_native.to_handle(a) for a in attrs]
            result = entries[key] = _native.from_handle(_ir.Attribute, fn(*args))
        return IndexingMap._view(result)

    def compose(self, second: "IndexingMap") -> "IndexingMap":
        """`second ∘ self`: this map's results feed `second`'s dimensions."""
        return self._apply(_native.lib().xlaGpuIndexingMapAttrCompose, second)

    def without_unused_symbols(self) -> "IndexingMap":
        return self._apply(_native.lib().xlaGpuIndexingMapAttrRemoveUnusedSymbols)

    def evaluate_range(self, expr: _ir.AffineExpr) -> tuple[int, int]:
        """The range [lo, hi] of `expr` over this map's variable ranges."""
        lo, hi = ctypes.c_int64(), ctypes.c_int64()
        _native.lib().xlaGpuIndexingMapAttrEvaluateRange(
            _native.to_handle(self.to_attr()), _native.to_handle(expr),
            ctypes.byref(lo), ctypes.byref(hi))
        return lo.value, hi.value

    @property
    def is_known_empty(self) -> bool:
        return bool(_native.lib().xlaGpuIndexingMapAttrIsKnownEmpty(
            _native.to_handle(self.to_attr())))

    def __str__(self) -> str:
        text = str(self.to_attr())
        return text[text.index('"') + 1:text.rindex('"')]
