"""BatchedGatherScatterNormalizer (XLA's pass of that name): a gather or
scatter with batching dimensions (`operand_batching_dims` /
`input_batching_dims`, which jax emits for vmapped indexing such as
`x[jnp.arange(n), labels]`) becomes one without: each batching dimension's
position is appended to the start indices as an iota, and the dimension is
collapsed (gather) or inserted (scatter) like any indexed dimension. The
emitters and the interpreter then see plain gathers and scatters."""

from __future__ import annotations

from ..module import HloComputation, HloInstruction
from .pipeline import InstructionPass
from .util import array_shape

__all__ = ["BatchedGatherScatterNormalizer"]


def _indices_with_batch_iotas(comp: HloComputation, indices: HloInstruction,
                              index_vector_dim: int,
                              batching: tuple[int, ...]) -> tuple[HloInstruction, int]:
    """Indices with one iota per batching dimension appended along the
    index vector dimension; returns (indices, index_vector_dim)."""
    etype = indices.shape.element_type
    dims = list(indices.shape.dims)
    if index_vector_dim == len(dims):
        dims.append(1)
        indices = comp.add("reshape", array_shape(etype, dims), [indices])
    parts = [indices]
    iota_dims = list(dims)
    iota_dims[index_vector_dim] = 1
    for d in batching:
        parts.append(comp.add("iota", array_shape(etype, iota_dims), [], iota_dimension=d))
    total = list(dims)
    total[index_vector_dim] = dims[index_vector_dim] + len(batching)
    joined = comp.add("concatenate", array_shape(etype, total), parts,
                      dimensions=(index_vector_dim,))
    return joined, index_vector_dim


class BatchedGatherScatterNormalizer(InstructionPass):
    name = "batched-gather-scatter-normalizer"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode == "gather":
            return self._gather(comp, inst)
        if inst.opcode == "scatter":
            return self._scatter(comp, inst)
        return False

    @staticmethod
    def _gather(comp: HloComputation, inst: HloInstruction) -> bool:
        a = inst.attrs
        operand_batch = tuple(a.get("operand_batching_dims", ()))
        index_batch = tuple(a.get("start_indices_batching_dims", ()))
        if not operand_batch:
            return False
        ivd = a.get("index_vector_dim", inst.operands[1].shape.rank)
        indices, ivd = _indices_with_batch_iotas(comp, inst.operands[1], ivd, index_batch)
        new = inst.clone_with([inst.operands[0], indices])
        new.attrs["collapsed_slice_dims"] = tuple(sorted(
            (*a.get("collapsed_slice_dims", ()), *operand_batch)))
        new.attrs["start_index_map"] = (*a.get("start_index_map", ()), *operand_batch)
        new.attrs.pop("operand_batching_dims", None)
        new.attrs.pop("start_indices_batching_dims", None)
        new.attrs["index_vector_dim"] = ivd
        comp.add_instruction(new)
        inst.replace_with(new)
        return True

    @staticmethod
    def _scatter(comp: HloComputation, inst: HloInstruction) -> bool:
        a = inst.attrs
        operand_batch = tuple(a.get("input_batching_dims", ()))
        index_batch = tuple(a.get("scatter_indices_batching_dims", ()))
        if not operand_batch:
            return False
        n = len(inst.operands) // 2
        indices_operand = inst.operands[n]
        ivd = a.get("index_vector_dim", indices_operand.shape.rank)
        indices, ivd = _indices_with_batch_iotas(comp, indices_operand, ivd, index_batch)
        operands = list(inst.operands)
        operands[n] = indices
        new = inst.clone_with(operands)
        new.attrs["inserted_window_dims"] = tuple(sorted(
            (*a.get("inserted_window_dims", ()), *operand_batch)))
        new.attrs["scatter_dims_to_operand_dims"] = (
            *a.get("scatter_dims_to_operand_dims", ()), *operand_batch)
        new.attrs.pop("input_batching_dims", None)
        new.attrs.pop("scatter_indices_batching_dims", None)
        new.attrs["index_vector_dim"] = ivd
        comp.add_instruction(new)
        inst.replace_with(new)
        return True
