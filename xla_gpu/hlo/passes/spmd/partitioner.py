"""The SPMD partitioner: an annotated module (global shapes, `sharding=`
attributes, Shardy's or GSPMD's annotation custom calls) becomes the one
program every device runs on its chunk of each value, with the collectives
that move chunks between devices (as XLA's SpmdPartitioner, simplified).

    result = partition_module(module, num_partitions=8)
    result.module                 # per-device module (num_partitions=8)
    result.parameter_shardings    # per entry parameter, its sharding
    result.output_shardings       # per output leaf
    result.notes                  # what was computed whole, and why (also
                                  # a SpmdFallbackWarning)

How each op is partitioned (S: the sharding propagation gave its result):

  parameter, constant, iota        the device's chunk (a constant / iota is
                                   made whole, then sliced)
  elementwise, copy                operands resharded to S, then local
  broadcast, transpose, reshape    the operand resharded to S carried back
                                   through the op, then local (a reshape
                                   splitting or merging a cut dim keeps
                                   its chunks when the cut goes to the
                                   major factors, as XLA's ReshapeSharding;
                                   any other reshape of a cut dim is done
                                   whole)
  slice, pad, reduce-window        along a cut dim: halo exchange (halo):
                                   two collective-permutes bring the
                                   neighbours' edge elements, each device
                                   dynamic-slices its window and masks
                                   what lies outside the operand; a pair
                                   more per further device a window
                                   reaches; windows far from their chunks
                                   (a shift by more than a chunk) come
                                   piece by piece from the devices holding
                                   them, packed into few permutes
                                   (far_halo, XLA's compact exchange);
                                   windows spanning half the dim or more
                                   are done as below
  concatenate, reverse, dynamic-update-slice
                                   along a cut dim (moves): a concatenate
                                   moves the cut to another dim and back
                                   (all-to-alls; uneven rows on a 2-D mesh
                                   within each group of the other mesh
                                   axis); a reverse takes the
                                   mirrored chunks (a collective-permute;
                                   an uneven cut: the chunks of the value
                                   padded on the left, two);
                                   an update inside one chunk is written
                                   where its offset falls (no collective);
                                   otherwise as below
  dynamic-slice (and the above otherwise)
                                   the dims the op touches made whole, the
                                   others stay cut; local (as XLA's: a
                                   dynamic-slice along a cut dim gathers it)
  gather                           index-parallel: the indices cut as the
                                   result's batch dims, the operand whole
  convolution                      the input cut along its batch and its
                                   spatial dims as the result is (a
                                   spatial cut by halo exchange), the
                                   kernel along its output features as
                                   the result's features are (whole where
                                   they are not cut); feature groups cut
                                   along whole groups: the input's and the
                                   kernel's features cut alike (batch
                                   groups: the input's batch), each device
                                   its own groups; an input cut along its
                                   features only: the kernel cut alike, a
                                   partial convolution per device and an
                                   all-reduce (as a dot's contracting dim)
  reduce                           local over the chunk (its padding
                                   masked to the init value), then an
                                   all-reduce over the devices that hold
                                   the reduced dims' chunks
  dot                              the cheapest of: operands resharded to
                                   S's batch / free dims (no collective on
                                   the result); or, when both operands cut
                                   a contracting dim alike, a partial dot
                                   per device and an all-reduce of the
                                   partial sums (a reduce-scatter where S
                                   cuts the result over the same devices)
  while                            body and condition partitioned for the
                                   state cut as its initial value is (the
                                   body's result resharded to it)
  conditional                      each branch partitioned for its
                                   operand's cut, its result resharded to
                                   the conditional's sharding
  shard_map bodies                 kept as they are (already per device);
                                   their inputs are cut to the body's
                                   shardings, their outputs read back as
                                   chunks of the stated sharding
  sharding constraints             a reshard
  anything else                    operands made whole (all-gather), the op
                                   run whole on every device (a note and a
                                   warning say which; never a wrong result)

Refused (UnsupportedError / ShardingError naming the instruction): partly
manual GSPMD shardings (`last_tile_dims={manual}`), a manual sharding
outside a shard_map region, shardings that cannot be read. Shardy's
shard_map over some mesh axes only is kept as per-device code whole along
the other axes (correct: those axes are replicas inside the body).

Resharding: where each target chunk lies inside a source chunk (the same
cut over devices in another order, or a cut moving to a mesh axis of more
devices), one collective-permute and a local dynamic-slice; a cut moving
from one dim to another is one all-to-all (then a collective-permute
where the target holds the chunks on other devices, as XLA's); otherwise
dims cut differently are all-gathered along the tile assignment's
groups, then the target's chunk is taken with a dynamic-slice at offsets
read from a table by partition-id.

Replicas x partitions (a module whose header states replica_count > 1):
every replica runs the same per-device program on its own data; the
collectives with global device ids (all-reduce, all-gather,
reduce-scatter) list each replica's devices in groups of their own, the
all-to-alls and collective-permutes name partitions (within a replica).

Uneven cuts (a dim of 10 over 4 devices) are padded as XLA's are: chunks
of ceil(10 / 4) = 3, the last device's 1 row and 2 of padding (see
reshard). Ops that map elements (elementwise, broadcast, transpose, a
reshape keeping the cut dim) run on padded chunks as they are; a reduce
over a padded dim first replaces the padding by its init value, a dot
contracting over one zeroes both operands' padding, a halo exchange masks
the window positions past the operand's end, a reverse takes the chunks of
the value padded on the left (its padding then ends up last), a
concatenate slices an operand's padding off where the dim is whole, and
the other ops that move data along a dim have that dim made whole first,
as for even cuts, so padding never moves into real positions. The entry's
parameters and results whose stated sharding is uneven are passed whole
(replicated; jax places only even chunks), each device cutting its padded
chunk from a parameter (a note says so).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from ....errors import UnsupportedError
from ...interpreter.reductions import simple_binary
from ...module import HloComputation, HloInstruction, HloModule
from ...opcodes import ELEMENTWISE
from ...shape import Shape
from ..call_inliner import inline_call
from ..layout_assignment import entry_computation_layout
from ..sharding_annotations import ShardingAnnotationRemover, is_sharding_annotation
from ..util import has_side_effect
from .dot import DotPartitioning
from .halo import WindowedOps, convolution_spatial_cuts, windowed_dims
from .manual import ManualRegions, annotation_target
from .moves import DataMovementOps
from .placement import device_coords, groups_along, replicate_dims, same_placement
from .propagation import (CONSTRAINT_TARGETS, MANUAL_ENTRY_TARGETS, MANUAL_EXIT_TARGETS,
                          convolution_batch_dims, convolution_feature_dims,
                          convolution_group_dims, convolution_group_layout,
                          gather_batch_dims, gather_operand_batch_dims,
                          gather_passthrough_dims, permute_sharding,
                          propagate, remap_sharding, reshape_sharding,
                          scatter_kept_dims, scatter_operand_batch_dims,
                          scatter_update_scatter_dims, sort_rows_sharding,
                          touched_dims)
from .reshard import Emitter
from .sharding import (HloSharding, ShardingError, open_dims, parse_sdy_shardings,
                       sharding_of)

__all__ = ["partition_module", "PartitionResult", "needs_partitioning",
           "CONSTRAINT_TARGETS", "SpmdFallbackWarning"]

# (a layout constraint is kept by the per-device program's layouts, not here)
_DROPPED_TARGETS = frozenset({"xla.sdy.PropagationBarrier", "LayoutConstraint"})
# Kept on each device's chunk: a memory placement (an offload to host memory
# and back is each device's own).
_PER_DEVICE_TARGETS = frozenset({"annotate_device_placement"})
_LOCAL_DATA_MOVEMENT = frozenset({"slice", "pad", "concatenate", "reduce-window",
                                  "dynamic-slice", "dynamic-update-slice", "reverse"})
# Ops that can keep a cut dim cut (moves); where they cannot, the dims
# they touch are made whole (emit_data_movement).
_MOVES_ALONG_CUTS = {"concatenate": "emit_concatenate", "reverse": "emit_reverse",
                     "dynamic-update-slice": "emit_dynamic_update_slice"}


@dataclass
class PartitionResult:
    module: HloModule
    num_partitions: int
    parameter_shardings: list[HloSharding]
    output_shardings: list[HloSharding]            # per output leaf
    parameter_shapes: list[Shape]                  # global
    output_shapes: list[Shape]                     # global, per leaf
    notes: list[str] = field(default_factory=list)
    # Sharding constraints inside shard_map bodies that cut along the mesh
    # axes the shard_map leaves automatic: not kept (the body is computed
    # whole along those axes), where XLA would partition the body by them.
    body_constraints_dropped: list[str] = field(default_factory=list)
    # (backend_config, sharding) of each InspectSharding custom call (jax's
    # inspect_array_sharding): the sharding its operand got, for the caller
    # to report; the calls themselves are gone from the module.
    inspected: list[tuple[str, HloSharding]] = field(default_factory=list)


def _unique_device(s: HloSharding | None) -> int | None:
    """The device a `{maximal device=k}` sharding (or a tuple of them, all
    on one device) places its value on; None for any other sharding."""
    if s is None:
        return None
    if s.is_tuple:
        devices = {_unique_device(e) for e in s.elements}
        return devices.pop() if len(devices) == 1 and None not in devices else None
    return s.device if s.kind == "maximal" else None


def _laid_out(local: Shape, declared: Shape) -> Shape:
    """A per-device shape in the layout its global one was declared in."""
    if local.is_tuple:
        if not declared.is_tuple or len(declared.tuple_shapes) != len(local.tuple_shapes):
            return local
        return Shape(tuple_shapes=tuple(_laid_out(a, b) for a, b in
                                        zip(local.tuple_shapes, declared.tuple_shapes)))
    if declared.is_tuple or declared.rank != local.rank or not local.rank:
        return local
    return Shape(local.element_type, local.dims, declared.minor_to_major)


def _zeros_in(comp: HloComputation, shape: Shape) -> HloInstruction:
    """A value of `shape` made of zeros (tokens from after-all), in `comp`."""
    if shape.is_tuple:
        parts = [_zeros_in(comp, sub) for sub in shape.tuple_shapes]
        return comp.add_instruction(HloInstruction.create("tuple", shape, parts))
    if shape.element_type == "token":
        return comp.add_instruction(HloInstruction.create("after-all", shape, []))
    scalar = Shape(shape.element_type, ())
    zero = comp.add_instruction(HloInstruction.create_constant(np.zeros((), scalar.dtype),
                                                               scalar))
    return comp.add_instruction(HloInstruction.create("broadcast", shape, [zero],
                                                      dimensions=()))


def needs_partitioning(module: HloModule) -> bool:
    """True for a module still in global shapes with sharding annotations:
    Shardy's / GSPMD's annotation custom calls, or `sharding=` attributes
    that cut something while the header states no `num_partitions` (XLA's
    partitioned output always states it)."""
    stated = module.attrs.get("num_partitions") is not None
    for comp in module.computations:
        for inst in comp.instructions:
            target = annotation_target(inst)
            if target is not None and (target in CONSTRAINT_TARGETS or
                                       target in MANUAL_ENTRY_TARGETS or
                                       target.startswith("xla.sdy.")):
                return True
            raw = inst.attrs.get("sharding")
            if not stated and isinstance(raw, str) and "devices=" in raw:
                return True
    return False


class _Partitioner(Emitter, DotPartitioning, WindowedOps, ManualRegions, DataMovementOps):
    def __init__(self, module: HloModule, n: int):
        self.module, self.n = module, n
        self.notes: list[str] = []
        self.body_constraints_dropped: list[str] = []
        self.inspected: list[tuple[str, HloSharding]] = []
        self.channel = 0
        self.reducers: dict[str, HloComputation] = {}
        # The computation being partitioned (see partition_computation).
        self.comp: HloComputation | None = None
        self.values: dict[int, tuple[HloInstruction, HloSharding]] = {}
        self.shardings: dict[int, HloSharding] = {}
        self.manual: dict[int, bool] = {}
        self._pid: HloInstruction | None = None
        self._tables: dict = {}
        # Partitioning the entry computation itself (its parameters and
        # result are what the caller passes and gets back).
        self.at_entry = False

    # ---------------------------------------------------------- set up

    def inline_calls(self, comp: HloComputation) -> None:
        """Inlines every call of `comp` except shard_map bodies (their code
        is per device already and stays a call)."""
        changed = True
        while changed:
            changed = False
            manual = self.mark_manual(comp)
            for inst in list(comp.instructions):
                if inst.opcode == "call" and inst.parent is comp and \
                        not manual.get(id(inst)):
                    inline_call(inst)
                    changed = True
        # An inlined call's results come out of a tuple: its users read the
        # values themselves, so that propagation reaches through (it does
        # not see through a tuple backwards).
        for inst in list(comp.instructions):
            if inst.opcode == "get-tuple-element" and inst.operands[0].opcode == "tuple" and \
                    "sharding" not in inst.attrs and not manual.get(id(inst)) and \
                    inst is not comp.root:
                inst.replace_all_uses_with(inst.operands[0].operands[inst.attrs["index"]])

    def mark_manual(self, comp: HloComputation) -> dict[int, bool]:
        """id -> True for the instructions of `comp` inside shard_map regions."""
        manual: dict[int, bool] = {}
        for inst in comp.instructions:
            target = annotation_target(inst)
            if target in MANUAL_ENTRY_TARGETS:
                manual[id(inst)] = True
            elif target in MANUAL_EXIT_TARGETS:
                manual[id(inst)] = False
            else:
                # (GSPMD also marks a region's constants {manual})
                manual[id(inst)] = any(manual.get(id(o)) for o in inst.operands) or \
                    str(inst.attrs.get("sharding", "")).replace(" ", "") == "{manual}"
        return manual

    def stated_shardings(self, order) -> dict[int, HloSharding]:
        fixed: dict[int, HloSharding] = {}
        for inst in order:
            target = annotation_target(inst)
            if target in CONSTRAINT_TARGETS and open_dims(inst) is not None:
                continue   # its open dims are left to propagation, as Shardy leaves them
            s = sharding_of(inst, self.n)
            if target in ("xla.sdy.FuncResultSharding",) and s is None:
                raw = (inst.attrs.get("frontend_attributes") or {}).get("xla.sdy.sharding")
                if isinstance(raw, str):
                    s = parse_sdy_shardings(raw, self.module.attrs,
                                            f"instruction '{inst.name}'")[0]
            if target in MANUAL_EXIT_TARGETS and target.startswith("xla.sdy."):
                raw = (inst.attrs.get("frontend_attributes") or {}).get("xla.sdy.out_shardings")
                if not isinstance(raw, str):
                    raise ShardingError(f"instruction '{inst.name}': {target} without "
                                        "xla.sdy.out_shardings")
                outs = parse_sdy_shardings(raw, self.module.attrs, f"instruction '{inst.name}'")
                s = outs[0] if not inst.shape.is_tuple else HloSharding.tuple_of(outs)
            if self.manual.get(id(inst)):
                s = HloSharding.tuple_of([HloSharding.manual()] * len(inst.shape.tuple_shapes)) \
                    if inst.shape.is_tuple else HloSharding.manual()
            if s is not None:
                if s.has_manual_subgroup:
                    raise inst.unsupported(f"sharding {s} is partly manual (a shard_map over "
                                           "some mesh axes only): not partitioned by xla_gpu")
                if s.is_manual and not self.manual.get(id(inst)):
                    raise inst.unsupported("a manual sharding outside a shard_map region")
                fixed[id(inst)] = s
        return fixed

    # ---------------------------------------------------------- the ops

    def value(self, old: HloInstruction, want: HloSharding | None = None) -> HloInstruction:
        new, s = self.values[id(old)]
        if want is None:
            return new
        return self.reshard(new, s, want, old.shape)

    def partition(self) -> PartitionResult:
        module = self.module
        entry = module.entry
        declared = entry_computation_layout(module)
        self.inline_calls(entry)
        new, root_sharding, params = self.partition_computation(
            entry, entry.name + "_spmd", {}, None, entry=True)
        # Swap the entry.
        index = module.computations.index(entry)
        module.computations[index] = new
        new.is_entry = True
        entry.is_entry = False
        module.attrs.pop("entry_computation_layout", None)
        if declared is not None and len(declared[0]) == len(new.parameters):
            # The caller's buffers keep their layouts, chunk by chunk (an
            # ENTRY without one would let layout assignment choose them).
            shapes = [_laid_out(p.shape, d) for p, d in zip(new.parameters, declared[0])]
            result = _laid_out(new.root.shape, declared[1])
            module.attrs["entry_computation_layout"] = \
                "{(" + ", ".join(map(str, shapes)) + ")->" + str(result) + "}"
        module.attrs["num_partitions"] = str(self.n)
        module.remove_unreachable_computations()
        # Annotations left in called computations (a reducer's, a loop
        # body's) mean nothing per device: removed as on one device.
        ShardingAnnotationRemover().run(module)
        leaves = _leaves(entry.root.shape, root_sharding)
        return PartitionResult(module, self.n, params,
                               [s for _, s in leaves],
                               [p.shape for p in entry.parameters],
                               [shape for shape, _ in leaves], self.notes,
                               self.body_constraints_dropped, self.inspected)

    def partition_computation(self, comp: HloComputation, name: str,
                              overrides: dict[int, HloSharding],
                              root_sharding: HloSharding | None,
                              entry: bool = False):
        """The per-device copy of `comp` (not yet in the module), the
        sharding of its root and of its parameters. `overrides`: shardings
        that win over the stated ones (a loop body's state); `root_sharding`:
        the one its root must have; `entry`: the module's entry (whose
        unevenly cut parameters and results are passed whole)."""
        saved = (self.comp, self.values, self._pid, self._tables, self.shardings,
                 self.manual, self.at_entry)
        try:
            self.at_entry = entry
            self.manual = self.mark_manual(comp)
            # Loop bodies' calls inlined first: propagation reads what a
            # body writes into its state (a scan's stacked outputs).
            for inst in comp.instructions:
                if inst.opcode == "while" and not self.manual.get(id(inst)):
                    self.inline_calls(inst.attrs["body"])
            order = comp.instructions
            fixed = self.stated_shardings(order)
            fixed.update(overrides)
            self.shardings = propagate(comp, fixed, self.n, order)
            for inst in order:
                stated = fixed.get(id(inst))
                if entry and stated is not None and stated.is_tiled and \
                        not self.shardings[id(inst)].is_tiled:
                    self.notes.append(f"'{inst.name}': sharding {stated} does not place a "
                                      f"chunk on each of the {self.n} devices: replicated")
                if self.manual.get(id(inst)) and not inst.shape.is_tuple:
                    self.shardings[id(inst)] = HloSharding.manual()
            self.comp = HloComputation(self.module.unique_computation_name(name))
            # Names unique in the module (XLA's parser wants them so).
            self.comp.module = self.module
            self._pid = None
            self._tables = {}
            self.values = {}
            live = _live(comp)   # only what the root reads is partitioned
            for inst in order:
                if id(inst) in live:
                    self.values[id(inst)] = self.emit(inst, self.shardings[id(inst)])
            root, root_s = self.values[id(comp.root)]
            if entry and root_sharding is None:
                root_sharding = _passed_whole(root_s, comp.root.shape)
                for i, ((shape, s), (_, out)) in enumerate(zip(
                        _leaves(comp.root.shape, root_s),
                        _leaves(comp.root.shape, root_sharding))):
                    if s != out:
                        which = f"output {i}" if comp.root.shape.is_tuple else "the result"
                        self.notes.append(
                            f"'{comp.root.name}': {which}'s sharding {s} does not cut "
                            f"{shape} evenly over {self.n} devices: padded chunks inside "
                            "the program, but an entry result is returned whole "
                            "(replicated, all-gathered) as jax cannot take uneven chunks")
            if root_sharding is not None:
                root = self.reshard(root, root_s, root_sharding, comp.root.shape)
                root_s = root_sharding
            self.comp.set_root(root)
            # shard_map bodies are per-device code now: inlined (their calls'
            # names and attributes are Shardy's round-trip form, which XLA's
            # importer would read as a manual computation still to partition).
            for inst in list(self.comp.instructions):
                if inst.opcode == "call" and inst.parent is self.comp:
                    inline_call(inst)
            for inst in self.comp.instructions:
                attrs = inst.attrs.get("frontend_attributes")
                if isinstance(attrs, dict) and attrs.get("inlineable") == "false":
                    del attrs["inlineable"]
            params = [self.shardings[id(p)] for p in comp.parameters]
            if entry:
                params = [_passed_whole(s, p.shape) for s, p in zip(params, comp.parameters)]
            return self.comp, root_s, params
        finally:
            (self.comp, self.values, self._pid, self._tables, self.shardings,
             self.manual, self.at_entry) = saved

    def emit_conditional(self, inst, s: HloSharding):
        """Each branch partitioned for its operand's cut, its result
        resharded to the conditional's sharding; the predicate / branch
        index whole on every device."""
        if "branch_computations" in inst.attrs:
            keys = None
            branches = list(inst.attrs["branch_computations"])
        else:
            keys = ("true_computation", "false_computation")
            branches = [inst.attrs[k] for k in keys]
        selector = self.value(inst.operands[0], HloSharding.replicated())
        operands = [self.values[id(o)] for o in inst.operands[1:]]
        if _has_manual(s) or any(_has_manual(os_) for _, os_ in operands) or \
                any(any(self.mark_manual(b).values()) for b in branches):
            return self.whole(inst, "a conditional over manual values")
        new_branches = []
        try:
            for branch, (_, os_) in zip(branches, operands):
                self.inline_calls(branch)
                new, _, _ = self.partition_computation(
                    branch, branch.name + "_spmd",
                    {id(branch.parameters[0]): os_, id(branch.root): s}, s)
                new_branches.append(new)
        except UnsupportedError as e:
            return self.whole(inst, f"a conditional whose branch is not partitioned ({e})")
        for c in new_branches:
            c.module = None
            self.module.add_computation(c, unique=False)
        copy = inst.clone_with([selector] + [new for new, _ in operands],
                               shape=self.local_shape(inst.shape, s))
        if keys is None:
            copy.attrs["branch_computations"] = new_branches
        else:
            for key, new in zip(keys, new_branches):
                copy.attrs[key] = new
        copy.attrs.pop("sharding", None)
        return self.comp.add_instruction(copy, name=inst.name), s

    def emit_while(self, inst, s: HloSharding):
        """A loop partitioned with its state cut as propagation chose (its
        initial value's cut, or its body's constraints'): the initial value
        resharded to it, body and condition partitioned for it, the body's
        result resharded to it."""
        init, state = self.values[id(inst.operands[0])]
        if s != state and not _has_manual(s) and not _has_manual(state) and \
                s.is_tuple == inst.shape.is_tuple:
            init = self.reshard(init, state, s, inst.operands[0].shape)
            state = s
        body, cond = inst.attrs["body"], inst.attrs["condition"]
        if _has_manual(state) or any(any(self.mark_manual(c).values()) for c in (body, cond)):
            return self.whole(inst, "a while loop over manual values")
        for c in (body, cond):
            self.inline_calls(c)
        try:
            new_body, _, _ = self.partition_computation(
                body, body.name + "_spmd", {id(body.parameters[0]): state,
                                            id(body.root): state}, state)
            new_cond, _, _ = self.partition_computation(
                cond, cond.name + "_spmd",
                {id(cond.parameters[0]): state, id(cond.root): HloSharding.replicated()},
                HloSharding.replicated())
        except UnsupportedError as e:
            return self.whole(inst, f"a while loop whose body is not partitioned ({e})")
        for c in (new_cond, new_body):
            c.module = None
            self.module.add_computation(c, unique=False)
        copy = inst.clone_with([init], shape=self.local_shape(inst.shape, state))
        copy.attrs["body"], copy.attrs["condition"] = new_body, new_cond
        copy.attrs.pop("sharding", None)
        new = self.comp.add_instruction(copy, name=inst.name)
        return new, state

    def emit(self, inst: HloInstruction, s: HloSharding):
        op = inst.opcode
        target = annotation_target(inst)
        if self.manual.get(id(inst)):
            return self.emit_manual(inst, s)
        if target in MANUAL_EXIT_TARGETS:
            return self.emit_manual_exit(inst, s)
        if op == "parameter":
            given = _passed_whole(s, inst.shape) if self.at_entry else s
            new = self.add("parameter", self.local_shape(inst.shape, given))
            new.parameter_number = inst.parameter_number
            new.name = self.comp.unique_name(inst.name)
            if not given.is_tuple:
                new.attrs["sharding"] = str(given)
            if given != s:
                self.notes.append(
                    f"'{inst.name}': sharding {s} does not cut {inst.shape} evenly over "
                    f"{self.n} devices: an entry parameter is passed whole (replicated, "
                    "as jax cannot place uneven chunks); each device cuts its padded "
                    "chunk from it")
                return self.reshard(new, given, s, inst.shape), s
            return new, s
        if target == "InspectSharding":
            self.note_inspection(inst, s)
            return self.value(inst.operands[0], s), s
        if target in CONSTRAINT_TARGETS or target in _DROPPED_TARGETS:
            return self.value(inst.operands[0], s), s
        if target in _PER_DEVICE_TARGETS:
            if len(inst.operands) == 1 and not inst.shape.is_tuple and not s.is_tuple:
                return self.local(inst, s, [s])
            return self.value(inst.operands[0], s), s   # (a tuple's placement: dropped)
        if op == "iota":
            done = self.emit_iota(inst, s)
            if done is not None:
                return done
        if op in ("constant", "iota"):
            whole = self.add_clone(inst, [], inst.shape)
            return self.slice_to(whole, HloSharding.replicated(), s, inst.shape), s
        if inst.shape.is_tuple and op in ("tuple",):
            elements = s.elements if s.is_tuple else [HloSharding.replicated()] * len(inst.operands)
            parts = [self.value(o, e) for o, e in zip(inst.operands, elements)]
            return self.add("tuple", Shape(tuple_shapes=tuple(p.shape for p in parts)),
                            parts), HloSharding.tuple_of(elements)
        if op in ("opt-barrier", "optimization-barrier"):
            # (a remat's barrier: each device's values pass through as
            # they are cut; it orders, it computes nothing)
            new, ts = self.values[id(inst.operands[0])]
            return self.add(op, new.shape, [new]), ts
        if op == "get-tuple-element":
            new, ts = self.values[id(inst.operands[0])]
            element = ts.elements[inst.attrs["index"]] if ts.is_tuple else HloSharding.replicated()
            got = self.add("get-tuple-element", new.shape.tuple_shapes[inst.attrs["index"]],
                           [new], index=inst.attrs["index"])
            return self.reshard(got, element, s, inst.shape), s
        if op == "while":
            return self.emit_while(inst, s)
        if op == "conditional":
            return self.emit_conditional(inst, s)
        if op == "custom-call" and self.n > 1:
            device = _unique_device(sharding_of(inst, self.n))
            if device is not None:
                return self.emit_on_one_device(inst, device)
        if op == "sort":
            done = self.emit_sort(inst, s)
            if done is not None:
                return done
        if s.is_tuple or inst.shape.is_tuple:
            return self.whole(inst, f"{op} with a tuple result")
        if (op in ELEMENTWISE or op == "copy") and \
                all(o.shape.dims == inst.shape.dims for o in inst.operands):
            return self.local(inst, s, [s] * len(inst.operands))
        if op == "broadcast":
            dims = list(inst.attrs["dimensions"])
            want = replicate_dims(s, inst.shape.rank,
                                  [i for i in range(inst.shape.rank) if i not in dims], keep=dims)
            return self.local(inst, s, [want])
        if op == "transpose":
            perm = list(inst.attrs["dimensions"])
            inverse = [perm.index(i) for i in range(len(perm))]
            return self.local(inst, s, [permute_sharding(s, inverse)])
        if op == "reshape":
            return self.emit_reshape(inst, s)
        if op == "reduce":
            return self.emit_reduce(inst, s)
        if op == "dot":
            return self.emit_dot(inst, s)
        if op in _MOVES_ALONG_CUTS:
            done = getattr(self, _MOVES_ALONG_CUTS[op])(inst, s)
            if done is not None:
                return done
        if op in _LOCAL_DATA_MOVEMENT:
            return self.emit_data_movement(inst, s)
        if op == "gather":
            return self.emit_gather(inst, s)
        if op == "scatter":
            done = self.emit_scatter(inst, s)
            if done is not None:
                return done
        if op == "convolution":
            done = self.emit_convolution_over_features(inst, s)
            if done is not None:
                return done
        if op == "convolution" and s.kind == "tiled":
            return self.emit_convolution(inst, s)
        return self.whole(inst, f"{op} is not partitioned")

    def emit_sort(self, inst, s: HloSharding):
        """A sort keeps the cuts of the dims it does not sort along (as
        XLA's partitioner does): each device sorts the rows of its chunk,
        the sorted dim gathered whole first; every operand (keys, the
        indices of an argsort) cut alike. None where nothing would stay cut
        (the sort is then computed whole)."""
        leaves = s.elements if s.is_tuple else [s]
        first = leaves[0] if leaves else None
        if first is None or first.kind != "tiled" or first.has_manual_subgroup:
            return None
        rows = sort_rows_sharding(inst, first)
        if rows.kind != "tiled" or not rows.is_even_for(inst.operands[0].shape.dims):
            return None
        result = HloSharding.tuple_of([rows] * len(inst.operands)) \
            if inst.shape.is_tuple else rows
        return self.local(inst, result, [rows] * len(inst.operands))

    def emit_iota(self, inst, s: HloSharding):
        """An evenly cut iota is made per device, as XLA makes it: the
        chunk's own iota, plus its offset where the iota's dim is cut
        (None: made whole and sliced)."""
        shape = inst.shape
        if s.kind != "tiled" or s.has_manual_subgroup or not s.is_even_for(shape.dims) or \
                shape.element_type in ("pred", "c64", "c128"):
            return None
        local = self.local_shape(shape, s)
        dim = inst.attrs["iota_dimension"]
        made = self.add("iota", local, iota_dimension=dim)
        if s.counts(shape.rank)[dim] == 1:
            return made, s
        coords = device_coords(s, shape.rank, self.n)
        step = local.dims[dim]
        offset = self.table_value([coords[d][dim] * step for d in range(self.n)])
        scalar = Shape(shape.element_type, ())
        offset = self.add("convert", scalar, [offset])
        spread = self.add("broadcast", local, [offset], dimensions=())
        return self.add("add", local, [made, spread]), s

    def emit_on_one_device(self, inst, device: int):
        """A custom call placed on one device (`{maximal device=k}`: a
        Python callback, a side effect) runs there only, as XLA runs it: in
        a conditional on the partition id whose other branch makes zeros;
        an all-reduce then gives every device its results."""
        operands = [self.value(o, self.replicated_like(o)) for o in inst.operands]
        packed = self.add("tuple", Shape(tuple_shapes=tuple(o.shape for o in operands)),
                          operands)
        branches = []
        for runs in (True, False):
            comp = HloComputation(self.module.unique_computation_name(
                f"{inst.name}_{'on' if runs else 'off'}_device_{device}"))
            arg = comp.add_instruction(HloInstruction.create_parameter(0, packed.shape, "args"))
            if runs:
                parts = [comp.add_instruction(HloInstruction.create(
                    "get-tuple-element", o.shape, [arg], index=i)) for i, o in enumerate(operands)]
                copy = inst.clone_with(parts)
                copy.attrs.pop("sharding", None)
                root = comp.add_instruction(copy, name=inst.name)
            else:
                root = _zeros_in(comp, inst.shape)
            comp.set_root(root)
            self.module.add_computation(comp)
            branches.append(comp)
        here = self.add("compare", Shape("pred", ()), [self.partition_id(), self.scalar(device)],
                        direction="EQ")
        ran = self.add("conditional", inst.shape, [here, packed, packed],
                       true_computation=branches[0], false_computation=branches[1])
        everyone = [list(range(self.n))]
        if not inst.shape.is_tuple:
            if inst.shape.element_type != "token":
                ran = self.all_reduce(ran, everyone)
            return ran, HloSharding.replicated()
        leaves = []
        for i, sub in enumerate(inst.shape.tuple_shapes):
            leaf = self.add("get-tuple-element", sub, [ran], index=i)
            if not sub.is_tuple and sub.element_type != "token":
                leaf = self.all_reduce(leaf, everyone)
            leaves.append(leaf)
        return self.add("tuple", inst.shape, leaves), HloSharding.tuple_of(
            [HloSharding.replicated()] * len(leaves))

    def add_clone(self, inst, operands, shape) -> HloInstruction:
        copy = inst.clone_with(operands, shape=shape)
        copy.attrs.pop("sharding", None)
        return self.comp.add_instruction(copy, name=inst.name)

    def local(self, inst, s: HloSharding, wants):
        operands = [self.value(o, w) for o, w in zip(inst.operands, wants)]
        return self.add_clone(inst, operands, self.local_shape(inst.shape, s)), s

    def whole(self, inst, why: str):
        """The op run whole on every device (its operands gathered)."""
        operands = [self.value(o, self.replicated_like(o)) for o in inst.operands]
        new = self.add_clone(inst, operands, inst.shape)
        rep = self.replicated_like(inst)
        self.notes.append(f"'{inst.name}': {why}: computed whole on every device")
        s = self.shardings[id(inst)]
        if inst.shape.is_tuple:
            return new, rep
        return self.slice_to(new, HloSharding.replicated(), s, inst.shape), s

    def replicated_like(self, inst) -> HloSharding:
        if inst.shape.is_tuple:
            return HloSharding.tuple_of([HloSharding.replicated()] * len(inst.shape.tuple_shapes))
        return HloSharding.replicated()

    def emit_reshape(self, inst, s: HloSharding):
        src = inst.operands[0].shape.dims
        rank = inst.shape.rank
        if s.kind == "tiled":
            # the operand's sharding whose chunks the reshape maps onto
            # s's (a dim kept, or split / merged with its chunks whole)
            back = reshape_sharding(s, inst.shape.dims, src)
            if back is not None:
                again = reshape_sharding(back, src, inst.shape.dims)
                if again is not None and same_placement(again, s, rank, self.n):
                    return self.local(inst, s, [back])
        rep = HloSharding.replicated()
        new = self.add_clone(inst, [self.value(inst.operands[0], rep)], inst.shape)
        return self.slice_to(new, rep, s, inst.shape), s

    def emit_data_movement(self, inst, s: HloSharding):
        rank = inst.shape.rank
        touched = touched_dims(inst)
        if touched is None:
            return self.whole(inst, f"{inst.opcode} is not partitioned")
        # Windowed ops keep a cut dim cut by exchanging halos with the
        # neighbours; the other touched dims are made whole.
        windowed = windowed_dims(inst, s.counts(rank), touched) \
            if s.kind == "tiled" and not s.has_manual_subgroup else []
        inner = replicate_dims(s, rank, sorted(touched - set(windowed)),
                               keep=list(range(rank)))
        if windowed:
            new = self.emit_windowed(inst, windowed, inner)
            return self.reshard(new, inner, s, inst.shape), s
        wants = [inner if o.shape.rank == rank else HloSharding.replicated()
                 for o in inst.operands]
        if inst.opcode == "reduce-window":
            wants = [inner, HloSharding.replicated()]
        new, _ = self.local(inst, inner, wants)
        if inst.opcode == "dynamic-slice":
            new.attrs["dynamic_slice_sizes"] = tuple(new.shape.dims)
        if inst.opcode == "slice":
            new.attrs["slice"] = [(0, new.shape.dims[i], 1) if i not in touched else t
                                  for i, t in enumerate(inst.attrs["slice"])]
        return self.reshard(new, inner, s, inst.shape), s

    def emit_gather(self, inst, s: HloSharding):
        """Index-parallel and passthrough: the indices cut as the result's
        batch dims are, the operand as the result's dims its slices take
        whole (an even cut; else whole); each device gathers its own
        indices' slices from its own chunk."""
        rank = inst.shape.rank
        if s.kind != "tiled":
            return self.local(inst, s, [HloSharding.replicated()] * 2)
        mapping = gather_batch_dims(inst) or {}
        back = {out: index for index, out in mapping.items()}
        through = {out: d for d, out in gather_passthrough_dims(inst).items()}
        # (a batching dim: the operand's rows cut as the indices' are)
        rows = {out: d for d, out in gather_operand_batch_dims(inst).items()}
        counts = s.counts(rank)
        cut = [d for d in range(rank) if counts[d] > 1]
        if any(d not in back and d not in through for d in cut) or \
                (any(d in through or d in rows for d in cut) and
                 not s.is_even_for(inst.shape.dims)):
            return self.whole(inst, "gather cut along its slices")
        wants = []
        for dims, operand in (({**through, **rows}, inst.operands[0]),
                              (back, inst.operands[1])):
            kept = replicate_dims(s, rank, [d for d in cut if d not in dims],
                                  keep=list(range(rank)))
            want = remap_sharding(kept, dims, rank, operand.shape.rank)
            if want is None:
                return self.whole(inst, "gather is not partitioned")
            wants.append(want)
        new, s = self.local(inst, s, wants)
        local_operand = new.operands[0].shape.dims
        sizes = list(inst.attrs["slice_sizes"])
        for out in cut:
            if out in through:
                sizes[through[out]] = local_operand[through[out]]
        new.attrs["slice_sizes"] = tuple(sizes)
        return new, s

    def emit_scatter(self, inst, s: HloSharding):
        """A one-operand scatter, as XLA's partitioner runs it: cut along
        the dims it keeps (window dims every update covers whole, batching
        dims), each device scatters its chunk of the updates into its
        chunk; updates cut along their scatter dims (a data-parallel
        embedding's gradient) under an add, each device scatters its
        updates into zeros, an all-reduce sums them and the operand is
        added. None where neither applies (computed whole)."""
        if len(inst.operands) != 3 or inst.shape.is_tuple:
            return None
        operand, indices, updates = inst.operands
        rank, irank, urank = inst.shape.rank, indices.shape.rank, updates.shape.rank
        everything = list(range(rank))
        kept = scatter_kept_dims(inst)
        rows = scatter_operand_batch_dims(inst)
        a = inst.attrs
        rows_in_indices = dict(zip(a.get("input_batching_dims", ()),
                                   a.get("scatter_indices_batching_dims", ())))
        if s.kind == "tiled" and not s.has_manual_subgroup:
            counts = s.counts(rank)
            cut = [d for d in everything if counts[d] > 1]
            if cut and all(d in kept for d in cut) and s.is_even_for(inst.shape.dims):
                updates_s = remap_sharding(s, {d: kept[d] for d in cut}, rank, urank)
                only_rows = replicate_dims(s, rank, [d for d in cut if d not in rows],
                                           keep=everything)
                indices_s = remap_sharding(only_rows, {d: rows_in_indices[d] for d in cut
                                                       if d in rows}, rank, irank)
                if updates_s is not None and indices_s is not None:
                    return self.local(inst, s, [s, indices_s, updates_s])
        if _reducer_kind(a["to_apply"], inst.shape.element_type) != "add":
            return None
        y, us = self.values[id(updates)]
        if us.kind != "tiled" or us.has_manual_subgroup or us.is_manual:
            return None
        scattered = scatter_update_scatter_dims(inst)
        batching = set(rows_in_indices.values())
        ucounts = us.counts(urank)
        ucut = [d for d in range(urank) if ucounts[d] > 1]
        if not ucut or any(d not in scattered or scattered[d] in batching for d in ucut) or \
                not us.is_even_for(updates.shape.dims):
            return None
        indices_s = remap_sharding(us, {d: scattered[d] for d in ucut}, urank, irank)
        if indices_s is None:
            return None
        x = self.value(indices, indices_s)
        zeros = self.add("broadcast", inst.shape, [self.zero(inst.shape.element_type)],
                         dimensions=())
        local = self.add_clone(inst, [zeros, x, y], inst.shape)
        summed = self.all_reduce(local, groups_along(us, urank, ucut), to_apply=a["to_apply"])
        base = self.value(operand, HloSharding.replicated())
        total = self.add("add", inst.shape, [base, summed])
        return self.reshard(total, HloSharding.replicated(), s, inst.shape), s

    def emit_convolution(self, inst, s: HloSharding):
        """The input cut along its batch and spatial dims as the result is,
        the kernel along its output features as the result's features are
        (whole where they are not cut): each device convolves its input
        chunk with its kernel slice (XLA's, a convolution read as a dot
        whose free dims are the batch and the output features)."""
        batch = convolution_batch_dims(inst)
        feature = convolution_feature_dims(inst)
        rank = inst.shape.rank
        counts = s.counts(rank)
        f_out = feature[1] if feature is not None and counts[feature[1]] > 1 else None
        # groups cut along whole groups: the input's split dim (features,
        # or the batch for batch groups) and the kernel's output features
        # cut as the result's features, each device convolving its own
        # groups (no collective); a batch-grouped result's batch stays whole
        layout = convolution_group_layout(inst)
        grouped = None if layout is None else convolution_group_dims(inst, counts[layout[2]])
        g_out = grouped[2] if grouped is not None else None
        spatial = convolution_spatial_cuts(inst, counts) \
            if batch is not None or layout is not None else None
        free = {f_out, g_out} | ({batch[1]} if batch is not None else set())
        if spatial is None or any(c > 1 for d, c in enumerate(counts)
                                  if d not in free and d not in spatial.values()):
            return self.whole(inst, "convolution cut along other dims than its batch, "
                                    "spatial, output-feature and whole groups' dims")
        lhs_rank, rhs_rank = inst.operands[0].shape.rank, inst.operands[1].shape.rank
        everything = list(range(rank))
        mapping = {} if batch is None else {batch[1]: batch[0]}
        mapping.update({d_out: d_in for d_in, d_out in spatial.items()})
        if grouped is not None:
            mapping[g_out] = grouped[0]
        # the output-feature chunks are replicas to the input, and the
        # other result dims' chunks replicas to the kernel slice
        input_s = s if f_out is None else replicate_dims(s, rank, [f_out], keep=everything)
        want = remap_sharding(input_s, mapping, rank, lhs_rank)
        kernel_s = HloSharding.replicated() if f_out is None else remap_sharding(
            replicate_dims(s, rank, [d for d in everything if d != f_out], keep=everything),
            {f_out: feature[0]}, rank, rhs_rank)
        if grouped is not None:
            kernel_s = remap_sharding(
                replicate_dims(s, rank, [d for d in everything if d != g_out], keep=everything),
                {g_out: grouped[1]}, rank, rhs_rank)
        if not spatial:
            new, _ = self.local(inst, s, [want, kernel_s])
            return self._own_groups(new, inst, counts, g_out), s
        # spatial cuts: each device's input window by halo exchange, then
        # the convolution on it with no padding left along those dims
        x = self.window_convolution_input(inst, self.value(inst.operands[0], want), want,
                                          spatial)
        kernel = self.value(inst.operands[1], kernel_s)
        new = self.add_clone(inst, [x, kernel], self.local_shape(inst.shape, s))
        window = dict(new.attrs.get("window") or {})
        lhs = inst.attrs["dim_labels"].split("_")[0]
        if "pad" in window:
            pads = [tuple(p) for p in window["pad"]]
            for d_in in spatial:
                pads[int(lhs[d_in])] = (0, 0)
            window["pad"] = pads
        if "lhs_dilate" in window:
            # (a dilated input was spread out with its window)
            dilate = list(window["lhs_dilate"])
            for d_in in spatial:
                dilate[int(lhs[d_in])] = 1
            window["lhs_dilate"] = tuple(dilate)
        new.attrs["window"] = window
        return self._own_groups(new, inst, counts, g_out), s

    @staticmethod
    def _own_groups(new, inst, counts, g_out):
        """The local convolution `new` of a grouped `inst` whose groups are
        cut counts[g_out] ways: it holds that many fewer."""
        if g_out is not None:
            key = "feature_group_count" if int(inst.attrs.get("feature_group_count", 1)) > 1 \
                else "batch_group_count"
            new.attrs[key] = int(inst.attrs[key]) // counts[g_out]
        return new

    def emit_convolution_over_features(self, inst, s: HloSharding):
        """An input cut along its feature dim (the convolution's contracting
        dim, as a dot's), and maybe its batch: the kernel cut alike along
        its input features, a partial convolution per device (its batch
        chunk), an all-reduce of the partial sums over the feature chunks
        (XLA's, for a cut contracting dim); None otherwise."""
        labels = inst.attrs.get("dim_labels")
        if not isinstance(labels, str) or "->" not in labels or \
                int(inst.attrs.get("feature_group_count", 1)) != 1 or \
                int(inst.attrs.get("batch_group_count", 1)) != 1:
            return None
        operands, out_labels = labels.split("->")
        lhs_labels, rhs_labels = operands.split("_")
        if any(c not in labels for c in ("b", "f", "i")) or "b" not in out_labels:
            return None
        lhs, rhs = inst.operands
        x, ls = self.values[id(lhs)]
        rank = lhs.shape.rank
        if ls.kind != "tiled" or ls.has_manual_subgroup:
            return None
        f, b, i = lhs_labels.index("f"), lhs_labels.index("b"), rhs_labels.index("i")
        counts = ls.counts(rank)
        if counts[f] == 1 or any(c > 1 for d, c in enumerate(counts) if d not in (f, b)):
            return None
        # (padding of an uneven feature cut would join the sums: zeroed)
        x = self.mask_padding(x, ls, lhs.shape, [f])
        everything = list(range(rank))
        want = remap_sharding(replicate_dims(ls, rank, [d for d in everything if d != f],
                                             keep=everything), {f: i}, rank, rhs.shape.rank)
        kernel = self.mask_padding(self.value(rhs, want), want, rhs.shape, [i])
        partial_s = remap_sharding(replicate_dims(ls, rank, [f], keep=everything),
                                   {b: out_labels.index("b")}, rank, inst.shape.rank)
        partial = self.add_clone(inst, [x, kernel], self.local_shape(inst.shape, partial_s))
        summed = self.all_reduce(partial, groups_along(ls, rank, [f]))
        return self.reshard(summed, partial_s, s, inst.shape), s

    def emit_reduce(self, inst, s: HloSharding):
        if inst.shape.is_tuple:
            return self.whole(inst, "a variadic reduce")
        operand = inst.operands[0]
        x, os_ = self.values[id(operand)]
        rank = operand.shape.rank
        dims = list(inst.attrs["dimensions"])
        if os_.is_manual or os_.has_manual_subgroup:
            return self.whole(inst, "reduce of a manual value")
        kind = _reducer_kind(inst.attrs["to_apply"], operand.shape.element_type)
        init = self.value(inst.operands[1], HloSharding.replicated())
        cut = [d for d in dims if os_.counts(rank)[d] > 1]
        if cut and kind is None:
            x = self.reshard(x, os_, replicate_dims(os_, rank, cut, keep=list(range(rank))),
                             operand.shape)
            os_ = replicate_dims(os_, rank, cut, keep=list(range(rank)))
            cut = []
        # The padding of an uneven cut of a reduced dim becomes the init
        # value (the combiner's identity), or it would join the result.
        x = self.mask_padding(x, os_, operand.shape, cut, init)
        result_s = replicate_dims(os_, rank, dims)
        local_dims = tuple(n for i, n in enumerate(x.shape.dims) if i not in dims)
        new = self.add_clone(inst, [x, init], inst.shape.with_dims(local_dims))
        if cut:
            new = self.all_reduce(new, groups_along(os_, rank, cut),
                                  to_apply=inst.attrs["to_apply"])
        return self.reshard(new, result_s, s, inst.shape), s


def _live(comp: HloComputation) -> set[int]:
    """The instructions the root reads, the parameters (the signature
    stays) and side effects; sharding annotations are not side effects
    here, whatever they declare."""
    seen: set[int] = set()
    stack = [comp.root] + list(comp.parameters) + \
        [i for i in comp.instructions if has_side_effect(i) and not is_sharding_annotation(i)]
    while stack:
        inst = stack.pop()
        if id(inst) not in seen:
            seen.add(id(inst))
            stack.extend(inst.operands)
    return seen


def _passed_whole(s: HloSharding, shape: Shape) -> HloSharding:
    """The sharding an entry parameter or result is passed with: replicated
    where `s` cuts it unevenly (jax places only even chunks), else `s`."""
    if shape.is_tuple:
        if not s.is_tuple:
            return s
        return HloSharding.tuple_of([_passed_whole(e, sub)
                                     for e, sub in zip(s.elements, shape.tuple_shapes)])
    if s.is_tiled and not s.is_even_for(shape.dims):
        return HloSharding.replicated()
    return s


def _has_manual(s: HloSharding) -> bool:
    if s.is_tuple:
        return any(_has_manual(e) for e in s.elements)
    return s.is_manual or s.has_manual_subgroup


def _reducer_kind(comp: HloComputation, element_type: str) -> str | None:
    """The all-reduce a reduction's combiner can run as: its own
    computation when it is one commutative binary op of its parameters."""
    kind = simple_binary(comp, element_type)
    return None if kind == "assign" else kind


def _leaves(shape: Shape, s: HloSharding) -> list[tuple[Shape, HloSharding]]:
    if shape.is_tuple:
        elements = s.elements if s.is_tuple else \
            [HloSharding.replicated()] * len(shape.tuple_shapes)
        return [leaf for sub, e in zip(shape.tuple_shapes, elements) for leaf in _leaves(sub, e)]
    return [(shape, s)]


class SpmdFallbackWarning(UserWarning):
    """Ops the partitioner computed whole on every device (correct, but
    every device does all the work and the operands are all-gathered)."""


def partition_module(module: HloModule, num_partitions: int) -> PartitionResult:
    """Partitions `module` (changed in place: its entry becomes the
    per-device one) for `num_partitions` devices. UnsupportedError /
    ShardingError (HloError subclasses, naming the instruction) for what
    it refuses; a SpmdFallbackWarning names the ops it computed whole."""
    if num_partitions < 1:
        raise ShardingError(f"num_partitions must be positive, got {num_partitions}")
    result = _Partitioner(module, num_partitions).partition()
    if result.notes:
        shown = "; ".join(result.notes[:5])
        more = f" (and {len(result.notes) - 5} more)" if len(result.notes) > 5 else ""
        warnings.warn(f"SPMD partitioner, module '{module.name}': {shown}{more}",
                      SpmdFallbackWarning, stacklevel=2)
    return result
