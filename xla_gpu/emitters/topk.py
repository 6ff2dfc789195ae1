"""Top-k: the k first elements of each row (the last dimension) and their
indices, for the HLO `topk` op (k, largest) and XLA:CPU's `TopK` custom
call (its comparator computation takes (value, index) pairs, or values
alone: see hlo.topk).

Two ways, as XLA:GPU chooses between its top-k kernel and TopkDecomposer:

* a row that fits one sort tile (at most 2048 elements, and the tiles in
  shared memory): one kernel, the sort emitter's tiled kernel over (values,
  an index generated in the kernel) that sorts each row in shared memory
  and writes only its first k elements and their indices; no temporary
  buffer;
* a longer row: `decompose_topk` rewrites the op before buffer assignment
  into a stable sort of (values, s32 iota) with the comparator, followed by
  slices of the first k columns (XLA's TopkDecomposer); the sort then runs
  as the sort emitter's sequence of kernels.

Ties (neither element goes first) keep the lower index first, as XLA's
stable decomposition and jax's top_k do. `topk(largest=true)` orders by
IEEE total order, greatest first (NaN first, -NaN last); `largest=false`
the reverse.
"""

from __future__ import annotations

from ..analysis.fusion import Fusion
from ..errors import HloError, UnsupportedError
from ..hlo import HloComputation, HloInstruction, HloModule, Shape
from ..hlo.shape import is_float
from ..hlo.topk import value_index_comparator
from . import sort as sort_emitter
from .partitioner import sanitize
from .sort import (INDEX_TYPE, CompiledSort, SortKernel, check_comparator, comparator_of,
                   compile_kernel, plan_sort)
from .types import check_supported

__all__ = ["compile_topk", "topk_k", "fits_one_kernel", "decompose_topk", "topk_comparator",
           "rewrite_for_sort_kernels"]


def is_topk(inst: HloInstruction) -> bool:
    return inst.opcode == "topk" or (inst.opcode == "custom-call" and
                                      inst.attrs.get("custom_call_target") == "TopK")


def topk_k(inst: HloInstruction) -> int:
    """k of a `topk` op or a TopK custom call (the result's last dim)."""
    leaves = inst.shape.leaves()
    if len(leaves) != 2:
        raise inst.error(f"top-k returns (values, indices), not {inst.shape}")
    if inst.opcode == "topk":
        raw = inst.attrs.get("k")
        try:
            k = int(raw)
        except (TypeError, ValueError):
            raise inst.error(f"topk needs k=<int>, got {raw!r}") from None
    else:
        k = leaves[0].dims[-1] if leaves[0].dims else -1
    if len(inst.operands) != 1:
        raise inst.error(f"top-k takes one operand, got {len(inst.operands)}")
    x = inst.operands[0].shape
    if x.is_tuple or x.rank == 0:
        raise inst.error(f"top-k needs an array of rank >= 1, got {x}")
    if not 0 <= k <= x.dims[-1]:
        raise inst.error(f"k={k} is outside [0, {x.dims[-1]}] (the last dimension of "
                         f"{x})")
    values, indices = leaves
    expected = tuple(x.dims[:-1]) + (k,)
    if tuple(values.dims) != expected or tuple(indices.dims) != expected or \
            values.element_type != x.element_type:
        raise inst.error(f"the result {inst.shape} is not ({x.element_type}"
                         f"{list(expected)}, indices{list(expected)})")
    if indices.element_type != INDEX_TYPE:
        raise inst.unsupported(
            f"top-k indices of type {indices.element_type} (only {INDEX_TYPE})")
    return k


def _largest(inst: HloInstruction) -> bool:
    value = inst.attrs.get("largest", True)
    return value is True or str(value).lower() == "true"


def topk_comparator(element: str, largest: bool, name: str = "topk_compare") -> HloComputation:
    """The comparator of a `topk` op over (value, index) pairs: greater
    (largest) or less in IEEE total order for floats; indices ignored (the
    kernels break ties by index)."""
    scalar = Shape(element, ())
    index = Shape(INDEX_TYPE, ())
    params = [HloInstruction(n, "parameter", s, [], {}, None, k)
              for k, (n, s) in enumerate((("lhs", scalar), ("rhs", scalar),
                                          ("lhs_index", index), ("rhs_index", index)))]
    attrs = {"direction": "GT" if largest else "LT"}
    if is_float(element):
        attrs["type"] = "TOTALORDER"
    root = HloInstruction("compare", "compare", Shape("pred", ()), params[:2], attrs)
    comp = HloComputation(name, params + [root], root)
    for inst in comp.instructions:
        inst.parent = comp
    params[0].users = [root]
    params[1].users = [root]
    return comp


def _comparator(inst: HloInstruction) -> HloComputation:
    if inst.opcode == "topk":
        return topk_comparator(inst.operands[0].shape.element_type, _largest(inst))
    # XLA:CPU's comparator may be over the values alone (2 parameters).
    return value_index_comparator(comparator_of(inst), INDEX_TYPE)


def _physical_dim(shape: Shape) -> int:
    """Where the logical last dimension lies in the physical order."""
    return shape.major_to_minor.index(shape.rank - 1)


def fits_one_kernel(inst: HloInstruction) -> bool:
    """Whether a row fits one sort tile (the one-kernel top-k)."""
    x = inst.operands[0].shape
    try:
        plan_sort(x.physical_shape().dims, _physical_dim(x), [x.element_type],
                  top_k=max(topk_k(inst), 1))
    except UnsupportedError:
        return False
    return True


def compile_topk(inst: HloInstruction, *, target: str = "cpu", arch: str = "sm_90",
                 cache: bool = True, lower_only: bool = False) -> CompiledSort:
    """The one kernel of a top-k whose rows fit a tile: reads the operand,
    writes (values, indices). Larger rows: `decompose_topk` first.
    `lower_only`: as `sort.compile_kernel`'s."""
    k = topk_k(inst)
    x = inst.operands[0].shape
    leaves = inst.shape.leaves()
    check_supported(x, inst)
    layouts = {tuple(s.layout) for s in (x, *leaves) if s.layout is not None and s.rank > 1
               and not s.is_row_major}
    if layouts and len({s.major_to_minor for s in (x, *leaves)}) > 1:
        raise inst.unsupported("top-k needs its operand and results in one layout, got "
                               + ", ".join(map(str, (x, *leaves))))
    comparator = _comparator(inst)
    check_comparator(inst, comparator, [x.element_type, INDEX_TYPE])
    if k == 0 or x.num_elements == 0:
        return CompiledSort(inst.name, [], [x], list(leaves), False,
                            ["empty result: nothing to launch"])
    dims = x.physical_shape().dims
    dim = _physical_dim(x)
    try:
        plan = plan_sort(dims, dim, [x.element_type], top_k=k)
    except UnsupportedError as e:
        raise inst.unsupported(f"{e}: decompose it into a sort first "
                               "(decompose_topk)") from None
    (config,) = plan.kernels
    # The kernel: a TopK custom call over the physical operand.
    param = HloInstruction("p0", "parameter", x.physical_shape(), [], {}, None, 0,
                           inst.location)
    results = Shape(tuple_shapes=tuple(s.physical_shape() for s in leaves))
    root = HloInstruction(inst.name, "custom-call", results, [param],
                          {"custom_call_target": "TopK", "called_computations": [comparator]},
                          None, None, inst.location)
    name = sanitize(inst.name)
    comp = HloComputation(f"{name}_computation", [param, root], root, False, inst.location)
    param.parent, param.users, root.parent = comp, [root], comp
    fusion = Fusion(name, comp, [root], [root], "topk", None, config=config)
    exe, key = compile_kernel(fusion, target, arch, cache, salt=repr(config),
                              lower_only=lower_only)
    return CompiledSort(inst.name, [SortKernel(config, exe, key)], [x], list(leaves), False,
                        [f"top-{k}: " + config.describe()])


# -- decomposition before buffer assignment -------------------------------------------


def decompose_topk(module: HloModule) -> int:
    """XLA's TopkDecomposer for the top-k ops whose rows do not fit one
    kernel: a stable sort of (values, s32 iota along the last dim) with the
    comparator, then slices of the first k columns. Mutates `module`;
    returns the number of ops rewritten."""
    count = 0
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            if not is_topk(inst) or fits_one_kernel(inst):
                continue
            k = topk_k(inst)
            x = inst.operands[0]
            shape = x.shape
            rank = shape.rank
            comparator = _comparator(inst)
            if comparator not in module.computations:   # made here: the module keeps it
                module.add_computation(comparator, before=comp)
            iota_shape = Shape(INDEX_TYPE, tuple(shape.dims), shape.layout)
            iota = comp.add("iota", iota_shape, [], name=f"{inst.name}.iota",
                            iota_dimension=rank - 1)
            sort = comp.add("sort", Shape(tuple_shapes=(shape, iota_shape)), [x, iota],
                            name=f"{inst.name}.sort", dimensions=(rank - 1,),
                            is_stable=True, to_apply=comparator)
            window = [(0, d, 1) for d in shape.dims[:-1]] + [(0, k, 1)]
            parts = []
            for index, leaf in enumerate(inst.shape.leaves()):
                whole = comp.add("get-tuple-element", sort.shape.tuple_shapes[index], [sort],
                                 name=f"{inst.name}.sorted.{index}", index=index)
                parts.append(comp.add("slice", leaf, [whole], name=f"{inst.name}.top.{index}",
                                      slice=list(window)))
            result = comp.add("tuple", inst.shape, parts, name=f"{inst.name}.result")
            inst.replace_with(result)
            count += 1
    return count


def rewrite_for_sort_kernels(module: HloModule) -> tuple[HloModule, list[str]]:
    """The HLO rewrites the sort and top-k kernels need before buffer
    assignment: top-k ops too long for one kernel decomposed into sort +
    slices, then stable sorts of several kernels given their tie-break
    index as an operand. Returns the module (a rewritten copy when anything
    changed; `module` itself is never modified) and notes."""
    def wanted(m: HloModule) -> bool:
        for comp in m.computations:
            for inst in comp.instructions:
                if is_topk(inst):
                    try:
                        if not fits_one_kernel(inst):
                            return True
                    except HloError:
                        continue   # reported by the thunk emitter, naming it
                elif sort_emitter.needs_index_operand(inst):
                    return True
        return False

    if not wanted(module):
        return module, []
    module = module.clone()
    notes = []
    topk = decompose_topk(module)
    if topk:
        notes.append(f"{topk} top-k op(s) too long for one kernel decomposed into "
                     "sort + slice")
    stable = sort_emitter.expand_stable_sorts(module)
    if stable:
        notes.append(f"{stable} stable sort(s) of several kernels given an iota "
                     "tie-break operand")
    return module, notes

