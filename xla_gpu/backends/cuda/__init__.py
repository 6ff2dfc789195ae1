"""The cuda backend: an emitted kernel through the cuda stages of the
pipeline to LLVM + NVVM, then PTX (LLVM's NVPTX backend, in process, with
libdevice) and a cubin (ptxas or nvJitLink), with the kernel's registers,
shared memory and block size checked against what the GPU gives a block.

    from xla_gpu.backends import cuda
    binary = cuda.compile_module(module, arch="sm_90")   # module: emitted MLIR
    binary.ptx, binary.cubin                              # cubin None without ptxas

A program's kernels go through the stages one by one (`lower_module`, on
any thread) and then into ONE PTX module and ONE cubin (`link`), as XLA
puts a program's kernels into one LLVM module: the NVPTX backend's and the
PTX compiler's set-up (~10-15 ms each time, for any size of PTX) is paid
once per program instead of once per kernel.

The binary is launched by `xla_gpu.runtime.cuda` (cuda-python only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from mlir import ir as _ir

from ..._trace import complete
from ... import pipeline
from . import codegen

__all__ = ["CudaBinary", "LoweredKernel", "compile_module", "link", "link_groups",
           "lower_module", "stages"]


@dataclass
class CudaBinary:
    ptx: str
    cubin: bytes | None
    timings: dict[str, float] = field(default_factory=dict)


def stages() -> tuple[pipeline.Stage, ...]:
    """The pipeline stages a kernel goes through for cuda."""
    return pipeline.stages_for("cuda")


@dataclass(frozen=True)
class LoweredKernel:
    """A kernel after the cuda stages, as the text of its top-level
    llvm/nvvm operations, ready to share a module with other kernels: its
    entry keeps its name, its own helpers and globals are renamed after it
    (`<entry>__<name>`), and the external functions it calls (libdevice's)
    are kept apart, by name, so that a module declares each once."""
    name: str
    definitions: str
    declarations: tuple[tuple[str, str], ...]
    symbols: frozenset[str]          # every name `definitions` defines


def compile_module(module: _ir.Module, *, arch: str = "sm_90", name: str = "kernel",
                   dump_dir: str | Path | None = None, dump_regex: str = ".*",
                   timings: dict[str, float] | None = None) -> CudaBinary:
    """Lowers the emitted `module` in place through the cuda stages, then to
    PTX for `arch` and a cubin. Raises mlir.ir.MLIRError when a pass fails,
    codegen.CodegenError (a CompileError) when code generation does, and
    codegen.LaunchLimitError when the kernel exceeds the GPU's limits."""
    timings = {} if timings is None else timings
    start = time.perf_counter()
    declarations, definitions = _lower_in_place(module, name, dump_dir, dump_regex, timings)
    timings["pipeline"] = time.perf_counter() - start
    complete("MLIR pipeline", "kernel-stage", start)
    # One kernel: its operations move into the gpu.module as they are (no
    # text round trip, which a module of several kernels needs).
    start = time.perf_counter()
    ptx = codegen.ptx_of_operations([op for _, op in declarations] +
                                    [op for op, _ in definitions], module.context, arch)
    timings["ptx"] = time.perf_counter() - start
    complete("PTX (NVPTX backend)", "kernel-stage", start)
    binary = CudaBinary(ptx, _cubin(ptx, arch, timings), timings)
    if dump_dir is not None:
        Path(dump_dir, f"{name}.ptx").write_text(binary.ptx)
    return binary


def _lower_in_place(module: _ir.Module, name: str, dump_dir, dump_regex: str,
                    timings: dict[str, float]):
    """Runs the cuda stages on `module` and splits its top-level operations
    into external declarations (libdevice's: [(symbol, op)]) and
    definitions ([(op, symbol)]), the kernel's own helpers and globals
    renamed after it (`<name>__<symbol>`, the symbol given as renamed)."""
    pipeline.run(module, stages=stages(), dump_dir=dump_dir, dump_regex=dump_regex,
                 timings=timings if dump_dir is not None else None)
    declarations, definitions = [], []
    for op in module.body.operations:
        symbol = _ir.StringAttr(op.attributes["sym_name"]).value \
            if "sym_name" in op.attributes else None
        if op.name == "llvm.func" and not op.regions[0].blocks:   # external (libdevice)
            declarations.append((symbol, op))
            continue
        if symbol is not None and symbol != name:
            renamed = f"{name}__{symbol}"
            _ir.SymbolTable.replace_all_symbol_uses(symbol, renamed, module.operation)
            _ir.SymbolTable.set_symbol_name(op, renamed)
            symbol = renamed
        definitions.append((op, symbol))
    return declarations, definitions


def lower_module(module: _ir.Module, *, name: str, dump_dir: str | Path | None = None,
                 dump_regex: str = ".*",
                 timings: dict[str, float] | None = None) -> LoweredKernel:
    """Runs the cuda stages on the emitted `module` (in place) and returns
    the kernel `name` as a LoweredKernel. Raises mlir.ir.MLIRError when a
    pass fails."""
    timings = {} if timings is None else timings
    start = time.perf_counter()
    declarations, definitions = _lower_in_place(module, name, dump_dir, dump_regex, timings)
    symbols = {name} | {symbol for _, symbol in definitions if symbol is not None}
    text = "\n".join(str(op) for op, _ in definitions)
    timings["pipeline"] = time.perf_counter() - start
    complete("MLIR pipeline", "kernel-stage", start)
    return LoweredKernel(name, text, tuple((symbol, str(op)) for symbol, op in declarations),
                         frozenset(symbols))


def link(kernels: Sequence[LoweredKernel], context: _ir.Context, *, arch: str = "sm_90",
         timings: dict[str, float] | None = None) -> CudaBinary:
    """One PTX module and one cubin holding every kernel of `kernels`
    (whose symbols must not clash: `link_groups`), through the NVPTX
    backend in `context`'s thread. Raises codegen.CodegenError when code
    generation fails, codegen.LaunchLimitError when a kernel exceeds the
    GPU's limits."""
    timings = {} if timings is None else timings
    declared: dict[str, str] = {}
    for kernel in kernels:
        for symbol, text in kernel.declarations:
            known = declared.setdefault(symbol, text)
            if known != text:
                raise codegen.CodegenError(
                    f"kernel '{kernel.name}' declares @{symbol} differently from "
                    f"another kernel of the module:\n  {text}\n  {known}")
    body = "\n".join([*declared.values(), *(k.definitions for k in kernels)])
    start = time.perf_counter()
    ptx = codegen.ptx_of_text(body, context, arch)
    timings["ptx"] = time.perf_counter() - start
    complete("PTX (NVPTX backend)", "kernel-stage", start)
    return CudaBinary(ptx, _cubin(ptx, arch, timings), timings)


def _cubin(ptx: str, arch: str, timings: dict[str, float]) -> bytes | None:
    start = time.perf_counter()
    cubin = codegen.to_cubin(ptx, arch)
    timings["cubin"] = time.perf_counter() - start
    complete("cubin", "kernel-stage", start)
    return cubin


def link_groups(kernels: Sequence[LoweredKernel], parts: int = 1) -> list[list[LoweredKernel]]:
    """`kernels` split into `parts` groups (fewer when there are fewer
    kernels; more where kernel names clash) of about the same amount of
    code, largest first, so that the groups compile side by side on
    `parts` host threads in about the same time; every group's symbols
    are apart. The kernels keep their order within a group."""
    from ..grouping import balanced_groups
    return balanced_groups(kernels, parts, lambda k: len(k.definitions), lambda k: k.symbols)
