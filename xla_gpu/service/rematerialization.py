"""Rematerialization: lowering a schedule's peak below a memory limit by
recomputing cheap values near their later uses (XLA's HloRematerialization,
its "recompute" strategy).

At the program point of peak memory, every array that is live there only
because a later instruction reads it is a candidate, when the instruction
that wrote it is cheap and deterministic (elementwise ops, broadcasts,
iotas, reshapes, slices, loop fusions of those). Recomputing it right
before its first later use frees its buffer across the peak, at the price
of keeping its operands alive until then; the candidate saving the most
bytes is rematerialized, and the search repeats until the peak fits or no
candidate helps (then ResourceError names the peak and the limit).

The module is changed in place: each recomputation is a clone of the
instruction (named `<name>.remat`, `<name>.remat.1`...) placed before the
users it now feeds.
"""

from __future__ import annotations

from ..errors import ResourceError
from ..hlo.fusions import ELEMENTWISE_OPCODES
from ..hlo.module import HloComputation, HloInstruction, HloModule
from .alias_analysis import AliasAnalysis
from .dataflow import DataflowAnalysis
from .memory_model import ComputationMemoryModel, Schedule

__all__ = ["rematerialize", "is_rematerializable"]

_CHEAP_OPCODES = (ELEMENTWISE_OPCODES - {"map"}) | {
    "broadcast", "iota", "reshape", "bitcast", "transpose", "slice", "pad",
    "concatenate", "reverse", "copy", "dynamic-slice", "convert",
}
_NONDETERMINISTIC = {"rng", "rng-bit-generator", "rng-get-and-update-state",
                     "custom-call", "infeed", "recv", "send", "outfeed"}


def _fusion_is_cheap(inst: HloInstruction) -> bool:
    comp = inst.attrs.get("calls")
    if not isinstance(comp, HloComputation):
        return False
    if inst.attrs.get("kind") != "kLoop":
        return False
    # Nested computations (reducers) make it a reduction: not cheap.
    return all(i.opcode in _CHEAP_OPCODES or i.opcode in ("parameter", "constant")
               for i in comp.instructions)


def is_rematerializable(inst: HloInstruction) -> bool:
    """Cheap to recompute and gives the same result every time."""
    if inst.shape.is_tuple or inst.opcode in _NONDETERMINISTIC:
        return False
    if inst.attrs.get("control-predecessors"):
        return False
    if inst.opcode == "fusion":
        return _fusion_is_cheap(inst)
    return inst.opcode in _CHEAP_OPCODES and inst.opcode != "bitcast"


def _unique_name(module: HloModule, base: str) -> str:
    used = {i.name for c in module.computations for i in c.instructions}
    name = f"{base}.remat"
    k = 1
    while name in used:
        name = f"{base}.remat.{k}"
        k += 1
    return name


def _clone_before(comp: HloComputation, module: HloModule, inst: HloInstruction,
                  users: list[HloInstruction]) -> HloInstruction:
    """A copy of `inst` read by `users` instead of `inst`, placed in
    comp's instruction list before the first of them."""
    clone = HloInstruction(_unique_name(module, inst.name), inst.opcode, inst.shape,
                           list(inst.operands), dict(inst.attrs), inst.literal,
                           inst.parameter_number, inst.location)
    clone.parent = comp
    for op in clone.operands:
        if not any(u is clone for u in op.users):
            op.users.append(clone)
    for user in users:
        user.operands = [clone if o is inst else o for o in user.operands]
        inst.users[:] = [u for u in inst.users if u is not user]
        if not any(u is user for u in clone.users):
            clone.users.append(user)
    insts = comp.instructions
    first = min(insts.index(u) for u in users)
    insts.insert(first, clone)
    if hasattr(module, "reserve_name"):
        try:
            module.reserve_name(clone.name)
        except Exception:  # noqa: BLE001 - name tables are optional
            pass
    return clone


def _undo_clone(comp: HloComputation, inst: HloInstruction, clone: HloInstruction) -> None:
    for user in list(clone.users):
        user.operands = [inst if o is clone else o for o in user.operands]
        if not any(u is user for u in inst.users):
            inst.users.append(user)
    clone.users = []
    for op in clone.operands:
        op.users[:] = [u for u in op.users if u is not clone]
    insts = comp.instructions
    insts[:] = [i for i in insts if i is not clone]
    clone.parent = None


def _entry_peak(module: HloModule, schedule: Schedule) -> tuple[int, list[int], ComputationMemoryModel]:
    df = DataflowAnalysis(module, allow_shared_calls=True)
    alias = AliasAnalysis(df)
    callee_peaks = {id(c): schedule.peaks.get(c.name, 0) for c in df.computations
                    if c is not df.entry}
    model = ComputationMemoryModel(df.entry, df, alias, callee_peaks)
    order = [model.index[id(i)] for i in schedule.sequence(df.entry)]
    peak, after = model.simulate(order, True)
    return peak, order, model


def _step_memory(model: ComputationMemoryModel, order: list[int]) -> list[int]:
    """Bytes in use while each step runs: what was live before it, its
    outputs, and the peak of what it runs."""
    _, after = model.simulate(order, True)
    start = sum(model.size.get(b, 0) for b in model.live_in)
    return [(after[t - 1] if t else start) + sum(model.size[b] for b in model.defines[k]) +
            model.transient[k] for t, k in enumerate(order)]


def rematerialize(module: HloModule, schedule: Schedule, memory_limit: int) -> Schedule:
    """Recomputes cheap values until `schedule`'s peak is at most
    `memory_limit` bytes; returns the new schedule (the module gains the
    clones). ResourceError when it cannot."""
    entry = module.entry
    original_peak = schedule.peak_bytes
    rejected: set[int] = set()
    clones: list[str] = []
    limit_steps = 4 * max(len(entry.instructions), 1) + 16
    for _ in range(limit_steps):
        peak, order, model = _entry_peak(module, schedule)
        if peak <= memory_limit:
            break
        memory = _step_memory(model, order)
        p = max(range(len(order)), key=lambda t: memory[t])
        position = {k: t for t, k in enumerate(order)}
        # Holders of each buffer (instruction indices).
        holders: dict[int, list[int]] = {}
        for k, held in enumerate(model.holds):
            for b in held:
                holders.setdefault(b, []).append(k)
        best = None
        for t in range(p):
            k = order[t]
            inst = model.instructions[k]
            if id(inst) in rejected or not is_rematerializable(inst):
                continue
            defined = model.defines[k]
            if len(defined) != 1:
                continue
            (b,) = defined
            if b in model.live_out or b in model.live_in:
                continue
            later = [j for j in holders.get(b, []) if position[j] > p]
            if not later:
                continue
            readers = [model.instructions[j] for j in later]
            if any(r.opcode in ("tuple", "get-tuple-element", "bitcast", "while",
                                "conditional", "call") for r in readers):
                continue  # the buffer lives on through a forwarded position
            if any(not any(o is inst for o in r.operands) for r in readers):
                continue  # read through an alias of the buffer, not directly
            first_later = min(position[j] for j in later)
            # Operands whose buffers would have to live longer.
            extended = 0
            for ob in model.holds[k]:
                last = max((position[j] for j in holders.get(ob, [])), default=-1)
                if ob in model.live_in or ob in model.live_out or last >= first_later:
                    continue
                extended += model.size.get(ob, 0)
            benefit = model.size[b] - extended
            if benefit > 0 and (best is None or benefit > best[0]):
                best = (benefit, inst, readers)
        if best is None:
            break
        _, inst, readers = best
        clone = _clone_before(entry, module, inst, readers)
        candidate = Schedule(module, dict(schedule.sequences), list(schedule.computations),
                             schedule.peak_bytes, dict(schedule.peaks),
                             dict(schedule.algorithms), memory_limit,
                             list(schedule.rematerialized))
        seq = list(schedule.sequence(entry))
        first = min(seq.index(r) for r in readers)
        seq.insert(first, clone)
        candidate.sequences[id(entry)] = seq
        new_peak, _, _ = _entry_peak(module, candidate)
        if new_peak >= peak:
            _undo_clone(entry, inst, clone)
            rejected.add(id(inst))
            continue
        candidate.peak_bytes = new_peak
        candidate.peaks[entry.name] = new_peak
        candidate.rematerialized.append(clone.name)
        clones.append(clone.name)
        schedule = candidate
    peak, _, _ = _entry_peak(module, schedule)
    schedule.peak_bytes = peak
    schedule.peaks[entry.name] = peak
    if peak > memory_limit:
        done = f" after rematerializing {len(clones)} instruction(s)" if clones else \
            " (no instruction is worth recomputing)"
        raise ResourceError(
            f"module '{module.name}' needs {peak} bytes at its peak (scheduled peak "
            f"{original_peak} bytes){done}, above the memory limit of "
            f"{memory_limit} bytes")
    return schedule
