"""GemmFusion (XLA's GemmFusion, simplified): a dot whose operands need a
prologue or whose result feeds an elementwise epilogue becomes one kCustom
fusion with `backend_config={"fusion_backend_config":{"kind":
"__triton_gemm","triton_gemm_config":{...}}}`, which the GEMM emitter
(`emitters.gemm`) compiles as one kernel; plain dots stay gemm thunks.

The rules:

* prologue, per operand, walking up from the dot (breadth first): converts
  (s8/s4/f8 -> bf16/f16/f32 included), bitcasts, reshapes, transposes,
  copies, broadcasts and elementwise ops other than transcendental math are
  fused (evaluated per element while the emitter loads the operand tiles);
  parameters, non-scalar constants and anything else become fusion
  parameters, at most `MAX_PARAMETERS_PER_OPERAND` per operand (XLA's
  kMaxParameterPerDotOperand); a fused producer that other instructions
  also read is computed again inside the fusion (as XLA does);
* epilogue, walking down from the dot while the value has a single user:
  elementwise ops and row-major reshapes (scale, bias, activation, negate,
  convert...); their other operands become parameters (a broadcast is
  fused with its operand, scalar constants are cloned), at most
  `MAX_EPILOGUE_PARAMETERS` of them. (XLA only takes ops distributive over
  addition here, for its split-k; our split-k applies the epilogue after
  the partial sums are reduced, so any elementwise op is exact.);
* a dot whose fusion would be only bitcasts and reshapes around it (a
  "pure matmul": no prologue or epilogue work) is left to the gemm thunk
  (cuBLASLt on cuda, numpy on the cpu target), which is faster for a plain
  f32 / f64 / bf16 product, unless cuBLASLt cannot run it (`library_runs`:
  an integer dot other than IMMA's s8 x s8 -> s32 "TN" form); so is a dot
  the GEMM emitter refuses.

The tiling is the heuristic table's (`analysis.gemm.default_tiling`;
XLA's default configs when nothing is autotuned), written into the
backend config as XLA writes the autotuner's choice. `XLA_GPU_GEMM_FUSION=0`
turns the pass off (the gemm thunk + epilogue kernels path).

`prepare_gemm_fusions` readies XLA's own `__triton_gemm` dumps for the
emitter: nested operand fusions (`__triton_nested_gemm_fusion`) inlined,
and fusions with split_k > 1 whose dot is not split yet rewritten as
`split_k_rewrite` does (XLA's MakeDotSplitKBatch): the contracting
dimension becomes [split_k, K / split_k], the split a batch dimension of a
GEMM fusion writing f32 (s32, f64) partials [split_k, ...], and a second
fusion reduces them and applies the epilogue.
"""

from __future__ import annotations

import json

import numpy as np

from ..._paths import gemm_fusion_enabled
from ...analysis.fusion import choose_emitter, fusion_roots
from ...analysis.gemm import (GemmTiling, accumulator_type, default_tiling, dot_dims,
                              multiply_adds,
                              fusion_backend_kind, is_gemm_fusion_kind, triton_gemm_tiling)
from ...errors import XlaGpuError
from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
from ..opcodes import FLOAT_MATH
from ..fusions import ELEMENTWISE_OPCODES
from ..shape import bit_width, is_complex, is_integral
from .pipeline import ComputationPass
from .util import array_shape, is_effective_scalar

__all__ = ["GemmFusion", "split_k_rewrite", "prepare_gemm_fusions", "inline_nested_fusions",
           "gemm_backend_config", "MAX_PARAMETERS_PER_OPERAND", "MAX_EPILOGUE_PARAMETERS",
           "gemm_fusion_enabled"]

MAX_PARAMETERS_PER_OPERAND = 4
MAX_EPILOGUE_PARAMETERS = 4

# Producers the prologue takes: index transformations and cheap
# elementwise ops (transcendental math stays out: each operand element is
# loaded once per tile of the other dimension).
_PROLOGUE_OPCODES = frozenset({"convert", "bitcast", "reshape", "transpose", "copy",
                               "broadcast"}) | (ELEMENTWISE_OPCODES - FLOAT_MATH - {"map"})
# Ops that only move or reinterpret elements: a fusion of nothing else
# around its dot is a "pure matmul".
_DATA_MOVEMENT = frozenset({"bitcast", "reshape"})


def gemm_backend_config(tiling: GemmTiling) -> str:
    """The backend_config text of a GEMM fusion, as XLA:GPU prints it."""
    return json.dumps({"fusion_backend_config": {"kind": "__triton_gemm",
                                                 "triton_gemm_config": tiling.to_json()}},
                      separators=(",", ":"))


def _dot_supported(dot: HloInstruction) -> bool:
    if dot.shape.is_tuple or dot.attrs.get(CONTROL_PREDECESSORS) or "sparsity" in dot.attrs:
        return False
    t = dot.shape.element_type
    if is_complex(t) or t == "pred" or bit_width(t) < 8:
        return False
    return not any(o.shape.is_tuple or is_complex(o.shape.element_type) for o in dot.operands)


def library_runs(dot: HloInstruction) -> bool:
    """Whether the GEMM library takes this dot as it is. Float dots: always.
    Integer dots: cuBLASLt's only integer GEMM is IMMA, s8 x s8 -> s32 with
    the contracting dimension the most minor of both operands ("TN") and
    M, N, K multiples of 4 (XLA arranges this with layouts and padding);
    any other integer dot is the GEMM emitter's, even a pure one."""
    if not is_integral(dot.shape.element_type):
        return True
    lhs, rhs = dot.operands
    if (lhs.shape.element_type, rhs.shape.element_type, dot.shape.element_type) != \
            ("s8", "s8", "s32"):
        return False
    dims = dot_dims(dot)
    for operand, contracting in ((lhs, dims.lhs_contracting), (rhs, dims.rhs_contracting)):
        layout = operand.shape.minor_to_major
        if len(contracting) != 1 or not layout or layout[0] != contracting[0]:
            return False
    return all(size % 4 == 0 for size in (dims.M, dims.N, dims.K))


def _fusible(inst: HloInstruction, comp: HloComputation, opcodes) -> bool:
    return inst.parent is comp and inst.opcode in opcodes and not inst.shape.is_tuple and \
        not inst.attrs.get(CONTROL_PREDECESSORS) and not _has_control_successors(inst)


def _has_control_successors(inst: HloInstruction) -> bool:
    try:
        return bool(inst.control_successors())
    except Exception:   # noqa: BLE001 - an unlinked instruction has none
        return False


def _is_cloned_constant(inst: HloInstruction) -> bool:
    return inst.opcode == "constant" and is_effective_scalar(inst.shape)


def _plan_prologue(operand: HloInstruction, comp: HloComputation) -> list[HloInstruction]:
    """The producers of `operand` (itself first) the fusion computes:
    breadth first while the operand's parameters stay within
    MAX_PARAMETERS_PER_OPERAND."""
    fused: list[HloInstruction] = []
    inputs = {id(operand)}
    queue = [operand]
    seen = {id(operand)}
    while queue:
        node = queue.pop(0)
        if not _fusible(node, comp, _PROLOGUE_OPCODES):
            continue
        new = [o for o in dict.fromkeys(node.operands)
               if id(o) not in inputs and id(o) not in {id(f) for f in fused}
               and not _is_cloned_constant(o)]
        if len(inputs) - 1 + len(new) > MAX_PARAMETERS_PER_OPERAND:
            continue
        inputs.discard(id(node))
        fused.append(node)
        for o in node.operands:
            if id(o) not in seen and not _is_cloned_constant(o):
                seen.add(id(o))
                inputs.add(id(o))
                queue.append(o)
    return fused


def _plan_epilogue(dot: HloInstruction, comp: HloComputation) -> list[HloInstruction]:
    """The chain of single users after the dot the fusion computes."""
    chain: list[HloInstruction] = []
    current = dot
    side: set[int] = set()
    while len(current.users) == 1 and current is not comp.root:
        user = current.users[0]
        if not _fusible(user, comp, (ELEMENTWISE_OPCODES - {"map"}) | {"bitcast", "reshape"}):
            break
        if user.opcode in ("bitcast", "reshape") and not (
                user.shape.is_row_major and current.shape.is_row_major):
            break
        others = {id(_side_value(o)) for o in user.operands
                  if o is not current and not _is_cloned_constant(o)}
        if len(side | others) > MAX_EPILOGUE_PARAMETERS:
            break
        side |= others
        chain.append(user)
        current = user
    return chain


def _side_value(inst: HloInstruction) -> HloInstruction:
    """What an epilogue's other operand passes as a parameter: the operand
    of a broadcast (fused with it), else the operand itself."""
    if inst.opcode == "broadcast" and not inst.attrs.get(CONTROL_PREDECESSORS):
        return inst.operands[0]
    return inst


class _BodyBuilder:
    """A fusion body under construction: parameters for outside values,
    clones of fused instructions."""

    def __init__(self, name: str, outside: dict[int, HloInstruction] | None = None):
        self.body = HloComputation(name)
        self.values: dict[int, HloInstruction] = {}
        self.operands: list[HloInstruction] = []
        # Parameters of a body being rebuilt -> the fusion operands they are.
        self.outside = outside or {}

    def value(self, inst: HloInstruction) -> HloInstruction:
        found = self.values.get(id(inst))
        if found is not None:
            return found
        if id(inst) in self.outside:
            new = self.value(self.outside[id(inst)])
            self.values[id(inst)] = new
            return new
        if _is_cloned_constant(inst):
            new = self.body.add_instruction(inst.clone_with([]))
        else:
            number = len(self.operands)
            new = self.body.add_instruction(HloInstruction.create_parameter(
                number, inst.shape, f"parameter_{number}"))
            self.operands.append(inst)
        self.values[id(inst)] = new
        return new

    def clone(self, inst: HloInstruction) -> HloInstruction:
        new = inst.clone_with([self.value(o) for o in inst.operands])
        new.attrs.pop(CONTROL_PREDECESSORS, None)
        new.attrs.pop("backend_config", None)
        self.values[id(inst)] = self.body.add_instruction(new)
        return self.values[id(inst)]


class GemmFusion(ComputationPass):
    """See the module text. `tiling` replaces the heuristic table for every
    fusion formed (tests, benchmarks); `enabled` overrides
    XLA_GPU_GEMM_FUSION; `pure_matmuls` fuses pure matmuls too (the GEMM
    emitter measured against the library on plain products)."""
    name = "gemm-fusion"

    def __init__(self, tiling: GemmTiling | None = None, enabled: bool | None = None,
                 max_multiply_adds: int | None = None, pure_matmuls: bool = False):
        self.tiling = tiling
        self.enabled = enabled
        self.pure_matmuls = pure_matmuls
        # Larger dots stay gemm thunks (the cpu target, whose emulated GEMM
        # kernel is slower than BLAS past small sizes); None: no limit.
        self.max_multiply_adds = max_multiply_adds

    def run(self, module: HloModule) -> bool:
        enabled = gemm_fusion_enabled() if self.enabled is None else self.enabled
        return super().run(module) if enabled else False

    def run_on(self, comp: HloComputation) -> bool:
        changed = False
        for dot in [i for i in comp.post_order() if i.opcode == "dot"]:
            if dot.parent is comp and _dot_supported(dot) and (
                    self.max_multiply_adds is None or
                    multiply_adds(dot) <= self.max_multiply_adds):
                changed |= self._fuse(comp, dot)
        return changed

    def _fuse(self, comp: HloComputation, dot: HloInstruction) -> bool:
        prologues = [_plan_prologue(o, comp) for o in dot.operands]
        epilogue = _plan_epilogue(dot, comp)
        if all(i.opcode in _DATA_MOVEMENT for i in [*prologues[0], *prologues[1], *epilogue]) \
                and library_runs(dot) and not self.pure_matmuls:
            return False   # a pure matmul: the gemm thunk's
        builder = _BodyBuilder(f"gemm_fusion_{dot.name}_computation")
        # The full walk this replaces read `comp.instructions`, whose sort
        # (of an earlier fusion's rewrite) must run at the same point: a
        # later sort of more rewrites can order ties otherwise.
        comp.instructions
        order = _in_post_order(comp, [i for side in prologues for i in side])
        for inst in order:
            builder.clone(inst)
        builder.clone(dot)
        for inst in epilogue:
            for o in inst.operands:
                if o.opcode == "broadcast" and id(o) not in builder.values and \
                        not _is_cloned_constant(o):
                    builder.clone(o)
            builder.clone(inst)
        last = epilogue[-1] if epilogue else dot
        body = builder.body
        body.set_root(builder.values[id(last)])
        body.link_instructions()
        if choose_emitter(fusion_roots(body)).kind != "gemm":
            return False
        tiling = self.tiling or default_tiling(dot_dims(dot))
        module = comp.module
        module.add_computation(body, before=comp)
        fusion = HloInstruction(
            module.unique_name(f"gemm_fusion_{dot.name}"), "fusion", last.shape,
            list(builder.operands),
            {"kind": "kCustom", "calls": body, "backend_config": gemm_backend_config(tiling)})
        if "metadata" in dot.attrs:
            fusion.attrs["metadata"] = dot.attrs["metadata"]
        fusion.location = dot.location
        comp.add_instruction(fusion, keep_name=True)
        last.replace_with(fusion)
        _remove_dead([*reversed(epilogue[:-1]), *([dot] if epilogue else []),
                      *reversed(order)], comp)
        _place_fusion(comp, fusion)
        if tiling.split_k > 1:
            split_k_rewrite(comp, fusion)
        return True


def _in_post_order(comp: HloComputation, nodes: list[HloInstruction]) -> list[HloInstruction]:
    """`nodes` (instructions of `comp`) in the order `comp.post_order()`
    lists them, without walking the whole computation for every dot: the
    walk from the root only enters instructions that read some of `nodes`
    (directly or not), since what reads none of them cannot change where
    they are placed, and it stops once all of them are placed. Falls back
    to the full order when the root does not reach them all (dead code:
    the rest of that order follows the instruction list)."""
    if not nodes:
        return []
    wanted = {id(n) for n in nodes}
    readers = set(wanted)
    stack = list(nodes)
    while stack:
        for user in stack.pop().users:
            if id(user) not in readers:
                readers.add(id(user))
                stack.append(user)
    root = comp.root
    order: list[HloInstruction] = []
    if root is not None and id(root) in readers:
        left = len(wanted)
        done: set[int] = set()
        walk: list[tuple[HloInstruction, bool]] = [(root, False)]
        while walk and left:
            node, expanded = walk.pop()
            key = id(node)
            if expanded:
                done.add(key)
                if key in wanted:
                    order.append(node)
                    left -= 1
                continue
            if key in done:
                continue
            walk.append((node, True))
            operands = node.operands
            for k in range(len(operands) - 1, -1, -1):
                o = operands[k]
                if id(o) in readers and id(o) not in done:
                    walk.append((o, False))
        if not left:
            return order
    return [i for i in comp.post_order() if id(i) in wanted]


def _place_fusion(comp: HloComputation, fusion: HloInstruction) -> None:
    """Puts the order of `comp` right after `_fuse`'s rewrite of an ordered
    computation (the fusion appended, what it replaces removed) where the
    sort (`comp.instructions`) would, without the sort's walk over every
    instruction: everything else is still in order, the fusion's operands
    all come before its first reader, so the sort moves the fusion just
    before that reader (a fusion nobody reads stays last). Control edges
    are left to the sort."""
    if comp.has_control_edges():
        return
    insts = comp._instructions
    if insts[-1] is not fusion:
        return
    if fusion.users:
        first = min(insts.index(u) for u in fusion.users)
        insts.pop()
        insts.insert(first, fusion)
    comp._unordered = False
    comp._valid_prefix = 0


def _remove_dead(candidates: list[HloInstruction], comp: HloComputation) -> None:
    for inst in candidates:
        if inst.parent is comp and not inst.users and inst is not comp.root:
            comp.remove_instruction(inst)


# -- split-k ---------------------------------------------------------------------------


def _scalar_add(element_type: str, module: HloModule) -> HloComputation:
    comp = HloComputation(f"add_{element_type}")
    scalar = array_shape(element_type, ())
    x = comp.add_instruction(HloInstruction.create_parameter(0, scalar, "x"))
    y = comp.add_instruction(HloInstruction.create_parameter(1, scalar, "y"))
    comp.set_root(comp.add("add", scalar, [x, y]))
    comp.link_instructions()
    module.add_computation(comp)
    return comp


def _is_split(dot: HloInstruction, split_k: int) -> bool:
    """Whether the dot of a fusion configured with `split_k` has the split
    already, as XLA's dumps do: on both operands a batch dimension of that
    size right before the contracting dimension (K as [split_k, K /
    split_k])."""
    a = dot.attrs
    for operand, batch, contracting in ((0, "lhs_batch_dims", "lhs_contracting_dims"),
                                        (1, "rhs_batch_dims", "rhs_contracting_dims")):
        dims = dot.operands[operand].shape.dims
        if not any(dims[d] == split_k and d + 1 in a.get(contracting, ())
                   for d in a.get(batch, ())):
            return False
    return True


def _split_operand(builder: _BodyBuilder, value: HloInstruction, contracting: int,
                   split_k: int) -> HloInstruction:
    dims = list(value.shape.dims)
    size = dims[contracting]
    new_dims = dims[:contracting] + [split_k, size // split_k] + dims[contracting + 1:]
    return builder.body.add_instruction(HloInstruction.create(
        "reshape", array_shape(value.shape.element_type, new_dims), [value]))


def split_k_rewrite(comp: HloComputation, fusion: HloInstruction) -> bool:
    """Rewrites GEMM fusion `fusion` (in `comp`, linked to its module) with
    split_k > 1 into a GEMM fusion of [split_k, ...] partial sums in the
    accumulator type and a reduction fusion that adds them and applies the
    epilogue. False (nothing changed) when the dot is split already, or
    when its contracting dimension is not one dimension divisible by
    split_k (then it runs unsplit)."""
    tiling = triton_gemm_tiling(fusion)
    if tiling is None or tiling.split_k <= 1:
        return False
    split_k = tiling.split_k
    body: HloComputation = fusion.attrs["calls"]
    roots = fusion_roots(body)
    choice = choose_emitter(roots)
    if choice.hero_kind != "gemm":
        return False
    dot = choice.heroes[0]
    a = dot.attrs
    lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
    if _is_split(dot, split_k) or len(lc) != 1 or len(rc) != 1:
        return False
    k = dot.operands[0].shape.dims[lc[0]]
    if k % split_k or k < split_k:
        return False
    module = comp.module
    acc = accumulator_type(dot.shape.element_type)
    prologue = _closure(dot.operands)

    # The GEMM fusion: prologue, the split dot.
    outside = {id(p): fusion.operands[p.parameter_number] for p in body.parameters}
    gemm = _BodyBuilder(f"{body.name}.split", outside)
    for inst in body.post_order():
        if id(inst) in prologue and inst.opcode != "parameter":
            gemm.clone(inst)
    lhs = _split_operand(gemm, gemm.value(dot.operands[0]), lc[0], split_k)
    rhs = _split_operand(gemm, gemm.value(dot.operands[1]), rc[0], split_k)

    def shifted(dims, at):
        return [d + 1 if d > at else d for d in dims]

    d = dot_dims(dot)
    split_attrs = dict(a)
    split_attrs["lhs_batch_dims"] = tuple([lc[0]] + shifted(a.get("lhs_batch_dims", ()), lc[0]))
    split_attrs["rhs_batch_dims"] = tuple([rc[0]] + shifted(a.get("rhs_batch_dims", ()), rc[0]))
    split_attrs["lhs_contracting_dims"] = (lc[0] + 1,)
    split_attrs["rhs_contracting_dims"] = (rc[0] + 1,)
    partial_dims = [split_k, *d.batch_sizes, *d.m_sizes, *d.n_sizes]
    partial_shape = array_shape(acc, partial_dims)
    split_dot = gemm.body.add_instruction(HloInstruction(
        "dot", "dot", partial_shape, [lhs, rhs], split_attrs, None, None, dot.location))
    gemm.body.set_root(split_dot)
    gemm.body.link_instructions()
    module.add_computation(gemm.body, before=comp)
    partials = HloInstruction(
        module.unique_name(f"{fusion.name}.split"), "fusion", partial_shape,
        list(gemm.operands),
        {"kind": "kCustom", "calls": gemm.body, "backend_config": gemm_backend_config(tiling)},
        None, None, fusion.location)
    comp.add_instruction(partials, keep_name=True)

    # The reduction fusion: the partials summed, the epilogue.
    reduce_body = _BodyBuilder(f"{body.name}.reduce", outside)
    partial_param = reduce_body.value(partials)
    zero = reduce_body.body.add_instruction(HloInstruction.create_constant(
        np.zeros((), np.dtype("float64") if acc.startswith("f") else np.int64),
        array_shape(acc, ())))
    summed = reduce_body.body.add_instruction(HloInstruction.create(
        "reduce", array_shape(acc, partial_dims[1:]), [partial_param, zero],
        dimensions=(0,), to_apply=_scalar_add(acc, module)))
    value = summed if acc == dot.shape.element_type else reduce_body.body.add_instruction(
        HloInstruction.create("convert", array_shape(dot.shape.element_type,
                                                     list(dot.shape.dims)), [summed]))
    reduce_body.values[id(dot)] = value
    epilogue = _closure([body.root], stop=dot)
    for inst in body.post_order():
        if id(inst) in epilogue and inst is not dot and inst.opcode != "parameter":
            reduce_body.clone(inst)
    reduce_body.body.set_root(reduce_body.values[id(body.root)])
    reduce_body.body.link_instructions()
    module.add_computation(reduce_body.body, before=comp)
    reduced = HloInstruction(
        module.unique_name(fusion.name), "fusion", fusion.shape, list(reduce_body.operands),
        {"kind": "kInput", "calls": reduce_body.body}, None, None, fusion.location)
    comp.add_instruction(reduced, keep_name=True)
    fusion.replace_with(reduced)
    return True


def _closure(starts, stop: HloInstruction | None = None) -> set[int]:
    """id() of `starts` and everything they read (not past `stop`)."""
    seen: set[int] = set()
    stack = list(starts)
    while stack:
        inst = stack.pop()
        if id(inst) not in seen:
            seen.add(id(inst))
            if inst is not stop:
                stack.extend(inst.operands)
    return seen


# -- XLA's dumps -------------------------------------------------------------------------


def inline_nested_fusions(comp: HloComputation) -> HloComputation:
    """`comp` with every fusion instruction in it replaced by its body
    (XLA's nested GEMM fusions: the dot's operands are fusions); `comp`
    itself when it has none."""
    if not any(i.opcode == "fusion" for i in comp.instructions):
        return comp
    out: list[HloInstruction] = []

    def copy_into(source: HloComputation, args, prefix: str) -> HloInstruction:
        local: dict[int, HloInstruction] = {}
        for inst in source.post_order():
            if inst.opcode == "parameter" and args is not None:
                local[id(inst)] = args[inst.parameter_number]
                continue
            ops = [local[id(o)] for o in inst.operands]
            if inst.opcode == "fusion":
                local[id(inst)] = copy_into(inst.attrs["calls"], ops, f"{prefix}{inst.name}.")
                continue
            new = inst.clone_with(ops, name=prefix + inst.name)
            if inst.opcode != "dot":
                new.attrs.pop("backend_config", None)
            out.append(new)
            local[id(inst)] = new
        return local[id(source.root)]

    root = copy_into(comp, None, "")
    new = HloComputation(comp.name, out, root, False, comp.location)
    return new.link_instructions()


def _refusal_notes(module: HloModule) -> list[str]:
    """A note for each of XLA's GEMM fusions the GEMM emitter refuses:
    those run as a gemm thunk with kernels for the rest (the program
    builder opens them)."""
    notes = []
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode != "fusion" or not is_gemm_fusion_kind(fusion_backend_kind(inst)):
                continue
            body = inst.attrs.get("calls")
            if not isinstance(body, HloComputation) or \
                    any(i.opcode == "fusion" for i in body.instructions):
                continue
            try:
                choice = choose_emitter(fusion_roots(body))
            except XlaGpuError as e:
                reason = str(e)
            else:
                if choice.kind == "gemm":
                    continue
                heroes = ", ".join(sorted({f"{h.opcode} '{h.name}'" for h in choice.heroes}))
                reason = choice.refusal if choice.hero_kind == "gemm" else \
                    f"its outputs are not an elementwise epilogue of its dot (heroes: {heroes})"
            notes.append(f"GEMM fusion '{inst.name}' runs as a gemm thunk and kernels: "
                         f"{reason}")
    return notes


def prepare_gemm_fusions(module: HloModule) -> tuple[HloModule, list[str]]:
    """`module` (a copy when anything changes) with XLA's GEMM fusions
    ready for the GEMM emitter: nested operand fusions inlined, split_k > 1
    split (`split_k_rewrite`). Returns the module and notes."""
    def wanted(inst: HloInstruction) -> bool:
        if inst.opcode != "fusion" or str(inst.attrs.get("kind", "")) != "kCustom":
            return False
        if not is_gemm_fusion_kind(fusion_backend_kind(inst)):
            return False
        body = inst.attrs.get("calls")
        if not isinstance(body, HloComputation):
            return False
        if any(i.opcode == "fusion" for i in body.instructions):
            return True
        tiling = triton_gemm_tiling(inst)
        return tiling is not None and tiling.split_k > 1

    notes = _refusal_notes(module)
    if not any(wanted(i) for c in module.computations for i in c.instructions):
        return module, notes
    module = module.clone()
    module.link()
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            if not wanted(inst) or inst.parent is not comp:
                continue
            body = inst.attrs["calls"]
            inlined = inline_nested_fusions(body)
            if inlined is not body:
                # The nested form's tiling (block_k from the lhs operand
                # fusion) as a plain config: the operand fusions go.
                tiling = triton_gemm_tiling(inst)
                inlined.name = module.unique_computation_name(f"{body.name}.inlined")
                module.add_computation(inlined, before=comp)
                inst.attrs["calls"] = inlined
                if tiling is not None:
                    inst.attrs["backend_config"] = gemm_backend_config(tiling)
                notes.append(f"GEMM fusion '{inst.name}': nested operand fusions inlined")
            if split_k_rewrite(comp, inst):
                notes.append(f"GEMM fusion '{inst.name}': split_k partial sums reduced by "
                             "a second kernel")
    module.remove_unreachable_computations()
    return module, notes

