"""A program's constants: the bytes of every constant allocation, in the
physical order of each constant's layout, as the executable loads them."""

from __future__ import annotations

import numpy as np

from ..errors import CompileError
from ..hlo import HloInstruction, HloModule
from ..runtime.buffers import BufferSlice
from ..runtime.thunks import ArrayRef
from .shapes import leaves

__all__ = ["constants"]


def constants(module: HloModule, assignment) -> dict[int, np.ndarray]:
    """The bytes of every constant allocation, in physical order."""
    by_name: dict[str, HloInstruction] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "constant":
                by_name.setdefault(inst.name, inst)
    out: dict[int, np.ndarray] = {}
    for alloc in assignment.allocations:
        if alloc.kind != "constant":
            continue
        inst = by_name.get(alloc.constant or "")
        if inst is None:
            raise CompileError(f"constant allocation {alloc.index}: no constant named "
                               f"{alloc.constant!r}")
        if inst.literal is None:
            # XLA's HLO printer writes `{...}` for the values of a constant of
            # more than a few elements unless asked for them (jaxlib's
            # as_hlo_text(print_large_constants=True)); such text cannot run.
            raise CompileError(f"constant {inst.name!r} ({inst.shape}) has no values: the HLO "
                               "text elides them ('{...}'); print the module with its large "
                               "constants")
        buffer = np.zeros(alloc.size, np.uint8)
        for index, leaf in leaves(inst.shape):
            value = np.asarray(inst.literal if not index else
                               _literal_leaf(inst.literal, index))
            layout = tuple(leaf.layout) if leaf.layout is not None else None
            ref = ArrayRef(BufferSlice(alloc.index, 0, alloc.size), leaf.element_type,
                           tuple(leaf.dims), layout)
            storage = value.astype(ref.storage_dtype) if value.dtype != ref.storage_dtype \
                else value
            data = np.ascontiguousarray(ref.physical_from_logical(
                storage.reshape(leaf.dims))).reshape(-1).view(np.uint8)
            offset = 0
            if assignment.has_slice(inst, index):
                offset = assignment.slice(inst, index).offset
            buffer[offset:offset + data.size] = data
        out[alloc.index] = buffer
    return out


def _literal_leaf(literal, index):
    for i in index:
        literal = literal[i]
    return literal
