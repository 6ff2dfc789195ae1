"""Sharding propagation, a simplified form of XLA's ShardingPropagation:
every value of the entry computation gets a sharding, from the ones the
module states (parameters, results, sharding constraints) through the ops
around them.

Rules (`forward`: a result's sharding from its operands'; `backward`: an
operand's from its user's):

  elementwise        forward: the operands' shardings merged (two tilings
                     of different dims become one tiling of both when the
                     devices allow, else the one with more tiles);
                     backward: the same sharding
  broadcast          the operand's dims keep their tiling; new dims are
                     unsharded (forward; a broadcast of an uncut value takes
                     its user's sharding instead); backward drops the new dims
  transpose          the tiling permuted, both ways
  reshape            dims that keep their size and position in the
                     row-major order keep their tiling, a dim split or
                     merged keeps its chunks when the cut goes to the
                     major factors (reshape_sharding), both ways
  reduce             the kept dims' tiling (the reduced dims' tiles become
                     replicas) forward only
  dot                batch and free dims from each operand, merged (none
                     cut, or the two conflicting in the first round: the
                     users' sharding)
  sharding constraints   backward: their sharding
  slice, pad, concatenate, reduce-window, dynamic-slice,
  dynamic-update-slice, reverse   the untouched dims keep their tiling
                     (forward); touched dims are unsharded, but for a
                     slice's, a pad's or a reduce-window's that a halo
                     exchange reaches (halo)
  tuple / get-tuple-element       the elements' shardings
  gather             the indices' batch dims' cut, forward
  convolution        the input's batch cut and the spatial cuts a halo
                     exchange reaches, and the kernel's output-feature cut
                     (merged as a dot's operands' free dims), forward
  while              its initial state's (the body and condition are
                     partitioned for it)
  anything else      replicated (the partitioner computes it whole on every
                     device)

Passes run forward then backward, twice; each only fills values without a
sharding, so what the module states always wins. The manual regions of
shard_map (between GlobalToLocalShape / SPMDFullToShardShape and
LocalToGlobalShape / SPMDShardToFullShape) are marked manual. Shardings
that do not divide a value evenly stay: the partitioner pads their chunks
(see reshard).
"""

from __future__ import annotations

from typing import Sequence

from ...module import HloComputation, HloInstruction
from ...opcodes import ELEMENTWISE
from ...shape import bit_width
from .halo import convolution_reach, convolution_windows, windowed_dims
from .placement import device_coords, from_coords, normalize, replicate_dims, tile_count
from .sharding import HloSharding, open_dims, sharding_of

__all__ = ["propagate", "CONSTRAINT_TARGETS", "touched_dims", "reshape_dim_map",
           "reshape_sharding", "merge",
           "permute_sharding", "remap_sharding", "gather_batch_dims",
           "convolution_batch_dims", "convolution_feature_dims", "convolution_group_dims",
           "convolution_group_layout", "gather_passthrough_dims", "gather_operand_batch_dims",
           "scatter_window_dims", "scatter_update_scatter_dims", "scatter_operand_batch_dims",
           "scatter_kept_dims",
           "MANUAL_ENTRY_TARGETS", "MANUAL_EXIT_TARGETS", "PASS_THROUGH_TARGETS",
           "sort_rows_sharding"]

MANUAL_ENTRY_TARGETS = frozenset({"xla.sdy.GlobalToLocalShape", "SPMDFullToShardShape"})
MANUAL_EXIT_TARGETS = frozenset({"xla.sdy.LocalToGlobalShape", "SPMDShardToFullShape"})

CONSTRAINT_TARGETS = frozenset({"Sharding", "xla.sdy.FuncResultSharding"})
# Custom calls that pass their operand through (in another layout; showing
# its sharding to a callback; placed in a memory): its sharding too.
PASS_THROUGH_TARGETS = frozenset({"LayoutConstraint", "InspectSharding",
                                  "annotate_device_placement"})
_DIM_PRESERVING = frozenset({"slice", "pad", "concatenate", "reduce-window",
                             "dynamic-slice", "dynamic-update-slice", "reverse"})


def touched_dims(inst: HloInstruction) -> set[int] | None:
    """The dims a data-movement op changes (its other dims are copied
    element for element, so a tiling of them carries through); None for
    ops this does not describe."""
    op = inst.opcode
    shape = inst.operands[0].shape if inst.operands else inst.shape
    if op == "slice":
        return {i for i, (start, limit, stride) in enumerate(inst.attrs["slice"])
                if (start, limit, stride) != (0, shape.dims[i], 1)}
    if op == "pad":
        return {i for i, p in enumerate(inst.attrs["padding"]) if tuple(p) != (0, 0, 0)}
    if op == "concatenate":
        return {inst.attrs["dimensions"][0]}
    if op == "reverse":
        return set(inst.attrs["dimensions"])
    if op == "dynamic-slice":
        return {i for i, n in enumerate(inst.attrs["dynamic_slice_sizes"])
                if n != shape.dims[i]}
    if op == "dynamic-update-slice":
        update = inst.operands[1].shape
        return {i for i in range(shape.rank) if update.dims[i] != shape.dims[i]}
    if op == "reduce-window":
        if len(inst.operands) != 2:
            return None
        window = inst.attrs.get("window") or {}
        out = set()
        for i in range(shape.rank):
            for key, trivial in (("size", 1), ("stride", 1), ("lhs_dilate", 1),
                                 ("rhs_dilate", 1)):
                values = window.get(key)
                if values is not None and values[i] != trivial:
                    out.add(i)
            pads = window.get("pad")
            if pads is not None and tuple(pads[i]) != (0, 0):
                out.add(i)
        return out
    return None


def reshape_dim_map(source: Sequence[int], target: Sequence[int]) -> dict[int, int]:
    """Source dim -> target dim for the dims a reshape keeps whole: the same
    size, with equal products of the dims before them (size-1 dims ignored)."""
    out = {}
    before_s = 1
    prefix_t = {}
    p = 1
    for j, n in enumerate(target):
        prefix_t.setdefault((p, n), j)
        p *= n
    for i, n in enumerate(source):
        j = prefix_t.get((before_s, n))
        if j is not None and n > 1:
            out[i] = j
        before_s *= n
    return out


def reshape_sharding(s: HloSharding, source: Sequence[int],
                     target: Sequence[int]) -> HloSharding | None:
    """A reshape's result sharding from its operand's (as XLA's
    ReshapeSharding): dims kept whole keep their cut (padded or not); a
    cut dim split into several keeps its chunks when its cut goes to the
    major factors ([64] cut 8 ways -> [8,8] cut on the 8, or [4,16] cut
    4 x 2); dims merged keep their chunks when the minor ones are cut
    only where the major ones are cut to single elements ([8,8] cut on
    the first 8 -> [64]). None where the chunks would not stay whole."""
    if s.kind != "tiled":
        return s
    if s.has_manual_subgroup:
        return None
    counts = s.counts(len(source))
    padded_ones = [d for d, (n, c) in enumerate(zip(source, counts)) if n == 1 and c > 1]
    if padded_ones:
        # A dim of one element cut several ways (a slice of a cut dim) holds
        # it in one chunk: its cut becomes replication, as in XLA.
        s = replicate_dims(s, len(source), padded_ones, keep=list(range(len(source))))
        if s.kind != "tiled":
            return s   # nothing left cut (a [1] slice of a cut vector, squeezed)
        counts = s.counts(len(source))
    src = [(n, c) for n, c in zip(source, counts) if n != 1]
    dst = [n for n in target if n != 1]
    out: list[int] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        if i >= len(src) or j >= len(dst):
            return None
        # the smallest run of dims with equal products on both sides
        gi, gj = [src[i]], [dst[j]]
        i, j = i + 1, j + 1
        ps, pt = gi[0][0], gj[0]
        while ps != pt:
            if ps < pt:
                if i >= len(src):
                    return None
                gi.append(src[i])
                ps *= src[i][0]
                i += 1
            else:
                if j >= len(dst):
                    return None
                gj.append(dst[j])
                pt *= dst[j]
                j += 1
        cuts = [c for _, c in gi]
        if len(gi) == 1 and len(gj) == 1:
            out.append(cuts[0])
            continue
        if all(c == 1 for c in cuts):
            out += [1] * len(gj)
            continue
        if any(n % c for n, c in gi):
            return None
        # merged: whole-element cuts of the major dims, then one cut dim,
        # then uncut minor dims
        cut = [k for k, c in enumerate(cuts) if c > 1]
        first, last = cut[0], cut[-1]
        if any(gi[k][0] != cuts[k] for k in range(first, last)):
            return None
        if any(gi[k][0] > 1 for k in range(first)) and first > 0:
            return None
        total = 1
        for c in cuts:
            total *= c
        # split: the cut goes to the major target dims
        left = total
        for n in gj:
            if left == 1:
                out.append(1)
            elif n % left == 0:
                out.append(left)
                left = 1
            elif left % n == 0:
                out.append(n)
                left //= n
            else:
                return None
        if left != 1:
            return None
    # the tile assignment's value dims reshape to the new counts (their
    # order stays row major), size-1 target dims getting 1
    array = s.array()
    subgroups = list(array.shape[len(source):])
    full = []
    k = 0
    for n in target:
        if n == 1:
            full.append(1)
        else:
            full.append(out[k])
            k += 1
    return HloSharding.tiled(array.reshape(full + subgroups), s.subgroups)


def sort_rows_sharding(sort: HloInstruction, s: HloSharding) -> HloSharding:
    """The sharding a sort's operands (and results) take from `s`: the cuts
    of the dims it does not sort along kept, the sorted dim whole on each
    device (each device sorts the rows of its chunk)."""
    rank = sort.operands[0].shape.rank
    return replicate_dims(s, rank, list(sort.attrs["dimensions"]), keep=list(range(rank)))


def gather_batch_dims(inst: HloInstruction) -> dict[int, int] | None:
    """A gather's indices dim -> its result dim, for the indices' batch
    dims (all but index_vector_dim; the batching dims among them): a cut of
    them carries through, each device gathering its indices' rows from the
    whole operand (from its own rows of a batching dim)."""
    a = inst.attrs
    indices_rank = inst.operands[1].shape.rank
    vector = a.get("index_vector_dim", indices_rank)
    batch_in = [d for d in range(indices_rank) if d != vector]
    offset = set(a.get("offset_dims", ()))
    batch_out = [d for d in range(inst.shape.rank) if d not in offset]
    if len(batch_in) != len(batch_out):
        return None
    return dict(zip(batch_in, batch_out))


def gather_operand_batch_dims(inst: HloInstruction) -> dict[int, int]:
    """A gather's operand batching dim -> its result dim (the indices'
    batching dim's): a cut of it carries through when the operand and the
    indices are cut alike, each device gathering its rows from its rows."""
    a = inst.attrs
    operand_dims = list(a.get("operand_batching_dims", ()))
    indices_dims = list(a.get("start_indices_batching_dims", ()))
    batch = gather_batch_dims(inst)
    if not operand_dims or batch is None or len(operand_dims) != len(indices_dims):
        return {}
    return {o: batch[i] for o, i in zip(operand_dims, indices_dims) if i in batch}


def gather_passthrough_dims(inst: HloInstruction) -> dict[int, int]:
    """A gather's operand dim -> its result dim, for the operand dims that
    every slice takes whole and no index picks (XLA's passthrough dims): a
    cut of them carries through, each device gathering from its own chunk."""
    a = inst.attrs
    operand = inst.operands[0].shape
    collapsed = set(a.get("collapsed_slice_dims", ())) | set(a.get("operand_batching_dims", ()))
    indexed = set(a.get("start_index_map", ()))
    sizes = list(a.get("slice_sizes", ()))
    offset = sorted(a.get("offset_dims", ()))
    kept = [d for d in range(operand.rank) if d not in collapsed]
    if len(kept) != len(offset) or len(sizes) != operand.rank:
        return {}
    return {d: out for d, out in zip(kept, offset)
            if d not in indexed and sizes[d] == operand.dims[d]}


def scatter_update_scatter_dims(inst: HloInstruction) -> dict[int, int]:
    """A one-operand scatter's updates dim -> its indices dim, for the
    updates' scatter dims (all but update_window_dims, in order: the
    indices' dims but index_vector_dim)."""
    a = inst.attrs
    indices_rank, updates_rank = inst.operands[1].shape.rank, inst.operands[2].shape.rank
    vector = a.get("index_vector_dim", indices_rank)
    window = set(a.get("update_window_dims", ()))
    in_indices = [d for d in range(indices_rank) if d != vector]
    in_updates = [d for d in range(updates_rank) if d not in window]
    return dict(zip(in_updates, in_indices)) if len(in_indices) == len(in_updates) else {}


def scatter_window_dims(inst: HloInstruction) -> dict[int, int]:
    """A one-operand scatter's operand dim -> its updates dim, for the
    window dims every update covers whole and no index picks (the
    passthrough dims): a cut of both alike scatters chunk by chunk."""
    a = inst.attrs
    operand, updates = inst.operands[0].shape, inst.operands[2].shape
    inserted = set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))
    kept = [d for d in range(operand.rank) if d not in inserted]
    window = sorted(a.get("update_window_dims", ()))
    if len(kept) != len(window):
        return {}
    indexed = set(a.get("scatter_dims_to_operand_dims", ()))
    return {d: w for d, w in zip(kept, window)
            if d not in indexed and updates.dims[w] == operand.dims[d]}


def scatter_operand_batch_dims(inst: HloInstruction) -> dict[int, int]:
    """A one-operand scatter's operand batching dim -> its updates dim (the
    indices' batching dim's): a cut of the three alike scatters each
    device's rows into its rows."""
    a = inst.attrs
    operand_dims = list(a.get("input_batching_dims", ()))
    indices_dims = list(a.get("scatter_indices_batching_dims", ()))
    if not operand_dims or len(operand_dims) != len(indices_dims):
        return {}
    back = {i: u for u, i in scatter_update_scatter_dims(inst).items()}
    return {o: back[i] for o, i in zip(operand_dims, indices_dims) if i in back}


def scatter_kept_dims(inst: HloInstruction) -> dict[int, int]:
    """A one-operand scatter's operand dim -> its updates dim, for the dims
    a cut of which it keeps (window dims taken whole, batching dims)."""
    return {**scatter_window_dims(inst), **scatter_operand_batch_dims(inst)}


def _scatter_forward(inst: HloInstruction, operand: HloSharding | None,
                     updates: HloSharding | None, n: int) -> HloSharding | None:
    """A scatter's result cut as its operand is, or as its updates are
    along the window and batching dims (the dims a scatter keeps)."""
    rank, urank = inst.shape.rank, inst.operands[2].shape.rank
    kept = scatter_kept_dims(inst)
    found = []
    if operand is not None and operand.kind == "tiled":
        counts = operand.counts(rank)
        if all(c == 1 or d in kept for d, c in enumerate(counts)):
            found.append(operand)
    if updates is not None and updates.kind == "tiled" and kept:
        back = {u: d for d, u in kept.items()}
        only = replicate_dims(updates, urank, [d for d in range(urank) if d not in back],
                              keep=list(range(urank)))
        carried = remap_sharding(only, back, urank, rank)
        if carried is not None and carried.kind == "tiled" and any(
                c > 1 for c in carried.counts(rank)):
            found.append(carried)
    return _best(found, rank, n) if found else None


def _loop_state(loop: HloInstruction, init: HloSharding | None,
                n: int, cache: dict | None = None) -> HloSharding | None:
    """A while loop's state sharding: its initial value's, where the body's
    root does not carry a stated cut (a tiled constraint) of that element
    that is more specific (the initial one not tiled)."""
    body = loop.attrs.get("body")
    root = getattr(body, "root", None)
    if root is None:
        return init
    if not loop.shape.is_tuple:
        carried = _stated_cut(root, n)
        return carried if carried is not None and (init is None or init.kind != "tiled") \
            else init
    if root.opcode != "tuple":
        return init
    count = len(loop.shape.tuple_shapes)
    elements = list(init.elements) if init is not None and init.is_tuple and \
        len(init.elements) == count else [None] * count
    changed = False
    for k, value in enumerate(root.operands[:count]):
        carried = _stated_cut(value, n)
        if carried is not None and (elements[k] is None or elements[k].kind != "tiled"):
            elements[k] = carried
            changed = True
    written = _written_cuts(body, elements, n, cache)
    for k, cut in written.items():
        elements[k] = cut
        changed = True
    if not changed:
        return init
    return HloSharding.tuple_of([e if e is not None else HloSharding.replicated()
                                 for e in elements])


def _written_cuts(body, elements: list, n: int,
                  cache: dict | None = None) -> dict[int, HloSharding]:
    """The state elements a loop body only writes into, slice by slice (a
    scan's stacked outputs: `dynamic-update-slice(state[k], update, i...)`
    and nothing else reads state[k]), that start uncut: each takes the cut
    its update gets from the rest of the state, where that cut leaves the
    written dims whole. So the stacked result comes out cut as each step's
    value is, as XLA's propagation through the loop gives it, instead of
    being gathered whole on every device at every step."""
    root, param = body.root, body.parameters[0] if body.parameters else None
    if param is None or root.opcode != "tuple":
        return {}
    candidates = {}
    for k, value in enumerate(root.operands[:len(elements)]):
        if elements[k] is not None and elements[k].kind == "tiled":
            continue
        if value.opcode != "dynamic-update-slice" or value.users != [root]:
            continue
        target = value.operands[0]
        if target.opcode != "get-tuple-element" or target.operands[0] is not param or \
                target.attrs["index"] != k or target.users != [value]:
            continue
        candidates[k] = value
    if not candidates:
        return {}
    order = body.instructions
    start = HloSharding.tuple_of([HloSharding.replicated() if e is None else e
                                  for e in elements])
    # (asked again each round of the caller's propagation: the body is
    # propagated once per starting state)
    key = (id(body), str(start))
    found = cache.get(key) if cache is not None else None
    if found is None:
        found = propagate(body, {id(param): start}, n, order)
        if cache is not None:
            cache[key] = found
    out = {}
    for k, dus in candidates.items():
        update = found.get(id(dus.operands[1]))
        if update is None or update.kind != "tiled" or update.has_manual_subgroup:
            continue
        rank = dus.shape.rank
        counts = update.counts(rank)
        written = [d for d in range(rank) if dus.operands[1].shape.dims[d] != dus.shape.dims[d]]
        if all(counts[d] == 1 for d in written) and any(c > 1 for c in counts):
            out[k] = update
    return out


def _stated_cut(value: HloInstruction, n: int) -> HloSharding | None:
    """The tiled sharding a constraint states for `value`, looking through
    copies, bitcasts and the calls jax wraps a loop body's code in."""
    for _ in range(16):
        op = value.opcode
        if op in ("copy", "bitcast"):
            value = value.operands[0]
        elif op == "get-tuple-element" and value.operands[0].opcode == "call":
            callee_root = value.operands[0].called_computations[0].root
            if callee_root.opcode != "tuple":
                return None
            value = callee_root.operands[value.attrs["index"]]
        elif op == "call":
            value = value.called_computations[0].root
        elif op == "custom-call" and value.attrs.get("custom_call_target") in \
                CONSTRAINT_TARGETS and open_dims(value) is None:
            stated = sharding_of(value, n)
            return stated if stated is not None and stated.kind == "tiled" and \
                not stated.has_manual_subgroup else None
        else:
            return None
    return None


def convolution_batch_dims(inst: HloInstruction) -> tuple[int, int] | None:
    """(input batch dim, result batch dim) of a convolution whose batch
    can be cut (no batch groups: feature groups leave the batch free);
    None otherwise."""
    if inst.attrs.get("batch_group_count", 1) != 1:
        return None
    labels = inst.attrs.get("dim_labels")
    if not isinstance(labels, str) or "->" not in labels or "_" not in labels:
        return None
    operands, result = labels.split("->")
    lhs = operands.split("_")[0]
    if lhs.count("b") != 1 or result.count("b") != 1:
        return None
    return lhs.index("b"), result.index("b")


def convolution_feature_dims(inst: HloInstruction) -> tuple[int, int] | None:
    """(kernel output-feature dim, result feature dim) of a convolution
    whose output features can be cut (no feature or batch groups: each
    result feature then reads one kernel slice and every input feature);
    None otherwise."""
    if convolution_batch_dims(inst) is None or inst.attrs.get("feature_group_count", 1) != 1:
        return None
    operands, result = inst.attrs["dim_labels"].split("->")
    rhs = operands.split("_")[1]
    if rhs.count("o") != 1 or result.count("f") != 1:
        return None
    return rhs.index("o"), result.index("f")


def convolution_group_layout(inst: HloInstruction) -> tuple[int, int, int, int] | None:
    """(input dim split into groups, kernel output-feature dim, result
    feature dim, group count) of a grouped convolution: feature groups
    split the input features (a depthwise one: a group per feature), batch
    groups the input batch (a depthwise kernel's gradient), group-major
    either way, as the kernel's output features and the result's features
    are; None for an ungrouped one (or both kinds at once)."""
    feature = int(inst.attrs.get("feature_group_count", 1))
    batch = int(inst.attrs.get("batch_group_count", 1))
    if (feature > 1) == (batch > 1):
        return None
    labels = inst.attrs.get("dim_labels")
    if not isinstance(labels, str) or "->" not in labels or "_" not in labels:
        return None
    operands, result = labels.split("->")
    lhs, rhs = operands.split("_")
    split = "f" if feature > 1 else "b"
    if any(x.count(c) != 1 for x, c in ((lhs, "b"), (lhs, "f"), (rhs, "o"), (result, "b"),
                                        (result, "f"))):
        return None
    return lhs.index(split), rhs.index("o"), result.index("f"), max(feature, batch)


def convolution_group_dims(inst: HloInstruction,
                           count: int) -> tuple[int, int, int] | None:
    """convolution_group_layout's three dims when they can be cut `count`
    ways along whole groups (count dividing the group count): each chunk
    of the split input dim, kernel output features and result features
    then holds the same groups, so each device convolves its own groups
    alone; None otherwise."""
    layout = convolution_group_layout(inst)
    if layout is None or count <= 1 or layout[3] % count:
        return None
    return layout[:3]


def merge(a: HloSharding, b: HloSharding, rank: int, n: int) -> HloSharding | None:
    """One tiling with both `a`'s and `b`'s cuts (None when they conflict)."""
    if a.kind != "tiled":
        return b if b.kind in ("tiled", "replicated") else None
    if b.kind != "tiled":
        return a if b.kind == "replicated" else None
    if a.has_manual_subgroup or b.has_manual_subgroup:
        return None
    ca, cb = a.counts(rank), b.counts(rank)
    xa, xb = device_coords(a, rank, n), device_coords(b, rank, n)
    counts = []
    for i in range(rank):
        if ca[i] > 1 and cb[i] > 1:
            if ca[i] != cb[i] or any(xa[d][i] != xb[d][i] for d in range(n)):
                return None
        counts.append(max(ca[i], cb[i]))

    def coords(d: int) -> list[int]:
        return [xa[d][i] if ca[i] > 1 else xb[d][i] for i in range(rank)]
    return from_coords(counts, coords, list(a.devices))


def _best(shardings: list[HloSharding], rank: int, n: int) -> HloSharding | None:
    tiled = [s for s in shardings if s.kind == "tiled"]
    if not tiled:
        return shardings[0] if shardings else None
    out = tiled[0]
    for s in tiled[1:]:
        merged = merge(out, s, rank, n)
        if merged is not None:
            out = merged
        elif tile_count(s, rank) > tile_count(out, rank):
            out = s
    return out


def _broadcast_forward(inst, s: HloSharding) -> HloSharding | None:
    if s.kind != "tiled" or s.has_manual_subgroup:
        return None
    dims = inst.attrs["dimensions"]
    out_rank = inst.shape.rank
    if list(dims) != sorted(dims):
        return None
    array = s.array()
    op_rank = s.rank
    shape = [1] * out_rank
    for j, d in enumerate(dims):
        shape[d] = array.shape[j]
    return HloSharding.tiled(array.reshape(shape + list(array.shape[op_rank:])),
                             s.subgroups)


def permute_sharding(s: HloSharding, perm: Sequence[int]) -> HloSharding:
    """Result dim i is operand dim perm[i]."""
    if s.kind != "tiled":
        return s
    array = s.array()
    rank = s.rank
    return HloSharding.tiled(array.transpose(list(perm) + list(range(rank, array.ndim))),
                             s.subgroups)


def remap_sharding(s: HloSharding, mapping: dict[int, int], src_rank: int,
           dst_rank: int) -> HloSharding | None:
    """A tiling of src dims carried to dst dims by `mapping` (unmapped
    sharded dims: None)."""
    if s.kind != "tiled":
        return s
    counts = s.counts(src_rank)
    if any(c > 1 and i not in mapping for i, c in enumerate(counts)):
        return None
    array = s.array()
    sharded = [i for i, c in enumerate(counts) if c > 1]
    order = sorted(sharded, key=lambda i: mapping[i])
    others = [i for i in range(src_rank) if i not in sharded]
    moved = array.transpose(order + others + list(range(src_rank, array.ndim)))
    shape = [1] * dst_rank
    for i in sharded:
        shape[mapping[i]] = counts[i]
    return HloSharding.tiled(moved.reshape(shape + list(array.shape[src_rank:])),
                             s.subgroups)


def _bits(inst: HloInstruction) -> int:
    return inst.shape.num_elements * bit_width(inst.shape.element_type)


def _dot_forward(inst, lhs: HloSharding | None, rhs: HloSharding | None,
                 n: int, defer: bool = False) -> HloSharding | None:
    """The result's sharding from the operands' batch and free dims; with
    `defer`, None where the two operands' cuts conflict (the users then
    choose, as a result constraint would)."""
    a = inst.attrs
    lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
    lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
    lr, rr = inst.operands[0].shape.rank, inst.operands[1].shape.rank
    lf = [i for i in range(lr) if i not in lb and i not in lc]
    rf = [i for i in range(rr) if i not in rb and i not in rc]
    out_rank = inst.shape.rank
    candidates = []
    for s, batch, free, offset, rank in ((lhs, lb, lf, len(lb), lr),
                                         (rhs, rb, rf, len(lb) + len(lf), rr)):
        if s is None or s.kind != "tiled":
            continue
        mapping = {d: k for k, d in enumerate(batch)}
        mapping.update({d: offset + k for k, d in enumerate(free)})
        contracting = [i for i in range(rank) if i not in mapping]
        keep = sorted(mapping, key=lambda i: mapping[i])
        dropped = replicate_dims(s, rank, contracting, keep=keep)
        out = remap_sharding(dropped, {k: mapping[d] for k, d in enumerate(keep)},
                     len(keep), out_rank)
        if out is not None:
            candidates.append(out)
    if defer and len(candidates) == 2 and merge(*candidates, out_rank, n) is None:
        return None
    if len(candidates) == 2 and _bits(inst.operands[0]) < _bits(inst.operands[1]):
        # XLA's propagation tries the larger operand's cuts first: keeping
        # the bigger array in place moves less data to the smaller one
        candidates.reverse()
    return _best(candidates, out_rank, n)


# jax's shard_alike: the operands of these custom calls with one group id
# get one sharding (Shardy's sharding groups). For programs compiled from
# their text (`xla_gpu.compile`); the jax plugin leaves such programs to
# XLA's partitioner, whose choice jax reports.
SHARDING_GROUP_TARGET = "xla.sdy.ShardingGroup"


def sharding_groups(order: list[HloInstruction]) -> list[list[HloInstruction]]:
    """The values tied into each sharding group, in `order`."""
    groups: dict[str, list[HloInstruction]] = {}
    for inst in order:
        if inst.opcode == "custom-call" and len(inst.operands) == 1 and \
                inst.attrs.get("custom_call_target") == SHARDING_GROUP_TARGET:
            key = str((inst.attrs.get("frontend_attributes") or {}).get(
                "xla.sdy.sharding_group_id", "")).split(":")[0].strip()
            members = groups.setdefault(key, [])
            if not any(m is inst.operands[0] for m in members):
                members.append(inst.operands[0])
    return [m for m in groups.values() if len(m) > 1]


class _Propagation:
    def __init__(self, comp: HloComputation, fixed: dict[int, HloSharding], n: int,
                 groups: list[list[HloInstruction]] | None = None):
        self.comp, self.n = comp, n
        self.fixed = fixed
        self.out: dict[int, HloSharding] = dict(fixed)
        self.first_round = True
        self.groups = groups or []
        # Loop bodies propagated for the state they start with (_written_cuts).
        self.loop_states: dict = {}

    def unify_groups(self) -> None:
        """Every member of a sharding group takes the group's sharding: a
        stated one first, else the first a member has; a member of another
        shape is left alone."""
        for members in self.groups:
            known = [m for m in members if id(m) in self.fixed] or \
                [m for m in members if id(m) in self.out]
            if not known:
                continue
            lead = known[0]
            s = self.out[id(lead)]
            for m in members:
                if id(m) not in self.fixed and m.shape.dims == lead.shape.dims and \
                        not m.shape.is_tuple:
                    self.out[id(m)] = s

    def get(self, inst: HloInstruction) -> HloSharding | None:
        return self.out.get(id(inst))

    def forward(self, inst: HloInstruction) -> HloSharding | None:
        op = inst.opcode
        ops = [self.get(o) for o in inst.operands]
        rank = inst.shape.rank if not inst.shape.is_tuple else 0
        if op in ELEMENTWISE and not inst.shape.is_tuple:
            same = [s for o, s in zip(inst.operands, ops)
                    if s is not None and o.shape.dims == inst.shape.dims]
            return _best(same, rank, self.n)
        if op == "broadcast" and ops[0] is not None and ops[0].kind == "tiled":
            # (a broadcast of a whole value is left to its users: each
            # device then builds only its chunk)
            return _broadcast_forward(inst, ops[0])
        if op == "transpose" and ops[0] is not None:
            return permute_sharding(ops[0], inst.attrs["dimensions"])
        if op == "custom-call" and len(ops) == 1 and not inst.shape.is_tuple and \
                inst.attrs.get("custom_call_target") in CONSTRAINT_TARGETS:
            return self.open_constraint(inst, ops[0], rank)
        if op == "custom-call" and inst.attrs.get("custom_call_target") in PASS_THROUGH_TARGETS:
            return ops[0]
        if op == "reshape" and ops[0] is not None:
            return reshape_sharding(ops[0], inst.operands[0].shape.dims, inst.shape.dims)
        if op == "sort" and ops[0] is not None and ops[0].kind == "tiled" and \
                not ops[0].has_manual_subgroup:
            rows = sort_rows_sharding(inst, ops[0])
            return HloSharding.tuple_of([rows] * len(inst.operands)) \
                if inst.shape.is_tuple else rows
        if op == "reduce" and ops[0] is not None and not inst.shape.is_tuple:
            operand_rank = inst.operands[0].shape.rank
            return replicate_dims(ops[0], operand_rank, inst.attrs["dimensions"])
        if op == "dot":
            # (a dot whose operands cut no batch or free dim is left to its
            # users: a cut result can then take a reduce-scatter)
            out = _dot_forward(inst, ops[0], ops[1], self.n, defer=self.first_round)
            return out if out is not None and out.kind == "tiled" else None
        if op in ("concatenate", "dynamic-update-slice", "reverse") and ops[0] is not None and \
                ops[0].kind == "tiled":
            # (XLA's: the result cut as the operand, the concatenated,
            # updated or reversed dim too, in the same device order (as
            # Shardy's mesh axes state it); the partitioner moves, writes
            # or brings each device the mirrored chunk along it)
            return ops[0]
        if op in _DIM_PRESERVING and ops[0] is not None:
            touched = touched_dims(inst)
            if touched is None:
                return None
            # (a window along a cut dim keeps it cut: halo exchange)
            kept = windowed_dims(inst, ops[0].counts(rank), touched) \
                if ops[0].kind == "tiled" else []
            return replicate_dims(ops[0], rank, sorted(touched - set(kept)),
                                  keep=list(range(rank)))
        if op == "get-tuple-element" and ops[0] is not None and ops[0].is_tuple:
            return ops[0].elements[inst.attrs["index"]]
        if op == "tuple" and any(s is not None for s in ops):
            return HloSharding.tuple_of([HloSharding.replicated() if s is None else s
                                         for s in ops])
        if op in ("copy", "opt-barrier", "optimization-barrier") and ops[0] is not None:
            return ops[0]
        if op == "gather":
            # (the indices' batch cut, and the operand's cut of the dims the
            # slices take whole, merged)
            found = []
            mapping = gather_batch_dims(inst)
            if ops[1] is not None and ops[1].kind == "tiled" and mapping is not None:
                found.append(remap_sharding(ops[1], mapping, inst.operands[1].shape.rank, rank))
            through = {**gather_passthrough_dims(inst), **gather_operand_batch_dims(inst)}
            if ops[0] is not None and ops[0].kind == "tiled" and through:
                op_rank = inst.operands[0].shape.rank
                kept = replicate_dims(ops[0], op_rank,
                                      [d for d in range(op_rank) if d not in through],
                                      keep=list(range(op_rank)))
                found.append(remap_sharding(kept, through, op_rank, rank))
            found = [f for f in found if f is not None]
            return _best(found, rank, self.n) if found else None
        if op == "convolution":
            return self.convolution_forward(inst, ops[0], ops[1], rank)
        if op == "scatter" and len(inst.operands) == 3 and not inst.shape.is_tuple:
            return _scatter_forward(inst, ops[0], ops[2], self.n)
        if op == "while":
            # the loop keeps its state cut as it starts, or as its body's
            # constraints cut what it carries over (the more specific: a
            # scan over layers whose body constrains its carry)
            return _loop_state(inst, ops[0], self.n, self.loop_states)
        return None

    def convolution_forward(self, inst, lhs: HloSharding | None, rhs: HloSharding | None,
                            rank: int) -> HloSharding | None:
        """As a dot's (XLA's propagation reads a convolution as one): the
        input's batch (and spatial) cuts, the kernel's output-feature cut,
        merged; conflicting, deferred to the users in the first round, then
        the larger operand's."""
        candidates = []
        if lhs is not None and lhs.kind == "tiled":
            out = self.convolution_from_input(inst, lhs, rank)
            if out is not None:
                candidates.append(out)
        feature = convolution_feature_dims(inst)
        layout = convolution_group_layout(inst)
        if rhs is not None and rhs.kind == "tiled" and layout is not None:
            # (groups: the kernel's output features cut along whole groups,
            # as the result's)
            grouped = convolution_group_dims(
                inst, rhs.counts(inst.operands[1].shape.rank)[layout[1]])
            feature = None if grouped is None else grouped[1:]
        if rhs is not None and rhs.kind == "tiled" and feature is not None:
            rhs_rank = inst.operands[1].shape.rank
            if rhs.counts(rhs_rank)[feature[0]] > 1:
                kept = replicate_dims(rhs, rhs_rank,
                                      [d for d in range(rhs_rank) if d != feature[0]],
                                      keep=list(range(rhs_rank)))
                out = remap_sharding(kept, {feature[0]: feature[1]}, rhs_rank, rank)
                if out is not None:
                    candidates.append(out)
        if len(candidates) == 2:
            if merge(*candidates, rank, self.n) is None and self.first_round:
                return None
            if _bits(inst.operands[0]) < _bits(inst.operands[1]):
                candidates.reverse()
        return _best(candidates, rank, self.n)

    def convolution_from_input(self, inst, lhs: HloSharding, rank: int):
        """The result's sharding from the input's batch cut and the spatial
        cuts a halo exchange reaches."""
        batch = convolution_batch_dims(inst)
        layout = convolution_group_layout(inst)
        if batch is None and layout is None:
            return None
        mapping = {} if batch is None else {batch[0]: batch[1]}
        # (a cut spatial dim stays cut where a halo exchange reaches)
        windows = convolution_windows(inst) or {}
        lhs_rank = inst.operands[0].shape.rank
        counts = lhs.counts(lhs_rank)
        for d_in, (d_out, window) in windows.items():
            if counts[d_in] > 1 and convolution_reach(
                    window, inst.operands[0].shape.dims[d_in], inst.shape.dims[d_out],
                    counts[d_in]) is not None:
                mapping[d_in] = d_out
        if layout is not None:
            # (the input's groups cut: the result's features alike; batch
            # groups: the input batch's cut becomes the features')
            grouped = convolution_group_dims(inst, counts[layout[0]])
            if grouped is not None:
                mapping[grouped[0]] = grouped[2]
        kept = [d for d in range(lhs_rank) if d not in mapping]
        dropped = replicate_dims(lhs, lhs_rank, kept, keep=list(range(lhs_rank)))
        return remap_sharding(dropped, mapping, lhs_rank, rank)

    def open_constraint(self, inst: HloInstruction, operand: HloSharding | None,
                        rank: int) -> HloSharding | None:
        """A constraint with open dims (one that states none is fixed
        already): its stated cuts, with the operand's cuts of the open dims
        added where the devices allow (Shardy's `{?}`). Until the operand
        has a sharding, the stated one (from the second round on)."""
        open_ = open_dims(inst)
        if open_ is None:
            return None
        stated = sharding_of(inst, self.n) or HloSharding.replicated()
        if stated.is_tuple:
            return None
        if operand is None or operand.kind != "tiled":
            return None if self.first_round else stated
        closed = [d for d in range(rank) if d not in open_]
        wanted = replicate_dims(operand, rank, closed, keep=list(range(rank)))
        merged = merge(stated, wanted, rank, self.n)
        return merged if merged is not None else stated

    def backward(self, user: HloInstruction, s: HloSharding) -> dict[int, HloSharding]:
        """Operand index -> a sharding the user's `s` suggests for it."""
        op = user.opcode
        if s.is_tuple or s.is_manual:
            return {}
        if op in ELEMENTWISE or op == "copy" or (
                op == "custom-call" and user.attrs.get("custom_call_target") in
                CONSTRAINT_TARGETS | PASS_THROUGH_TARGETS and len(user.operands) == 1):
            return {i: s for i, o in enumerate(user.operands)
                    if o.shape.dims == user.shape.dims}
        if op == "broadcast" and s.kind == "tiled":
            dims = list(user.attrs["dimensions"])
            return {0: replicate_dims(s, user.shape.rank,
                                      [i for i in range(user.shape.rank) if i not in dims],
                                      keep=dims)}
        if op == "transpose" and s.kind == "tiled":
            perm = list(user.attrs["dimensions"])
            inverse = [perm.index(i) for i in range(len(perm))]
            return {0: permute_sharding(s, inverse)}
        if op == "reshape":
            back = reshape_sharding(s, user.shape.dims, user.operands[0].shape.dims)
            return {0: back} if back is not None else {}
        if op == "concatenate" and s.kind == "tiled":
            return {i: s for i in range(len(user.operands))}
        if op in ("dynamic-update-slice", "reverse") and s.kind == "tiled":
            return {0: s}
        if op == "scatter" and s.kind == "tiled" and len(user.operands) == 3:
            # (the operand as the result; the updates along the dims a
            # scatter keeps, where those are all that is cut)
            rank = user.shape.rank
            kept = scatter_kept_dims(user)
            cut = [d for d, c in enumerate(s.counts(rank)) if c > 1]
            if any(d not in kept for d in cut):
                return {}
            updates = remap_sharding(s, {d: kept[d] for d in cut}, rank,
                                     user.operands[2].shape.rank)
            return {0: s, 2: updates} if updates is not None else {0: s}
        return {}

    def run(self, order: list[HloInstruction]) -> dict[int, HloSharding]:
        for round_ in range(2):
            self.first_round = round_ == 0
            for inst in order:
                if id(inst) not in self.out:
                    s = self.forward(inst)
                    if s is not None:
                        self.out[id(inst)] = s
            self.unify_groups()
            for inst in reversed(order):
                s = self.get(inst)
                if s is None:
                    continue
                for i, suggestion in self.backward(inst, s).items():
                    operand = inst.operands[i]
                    if id(operand) not in self.out and operand.opcode != "parameter":
                        self.out[id(operand)] = suggestion
            self.unify_groups()
        return self.out


def propagate(comp: HloComputation, fixed: dict[int, HloSharding],
              num_devices: int, order: list[HloInstruction]) -> dict[int, HloSharding]:
    """id(instruction) -> its sharding, for every instruction of `order`
    (the computation's instructions, operands first); `fixed`: the ones the
    module states. Non-tuple shardings come back normalized."""
    out = _Propagation(comp, fixed, num_devices, sharding_groups(order)).run(order)
    result = {}
    for inst in order:
        s = out.get(id(inst))
        result[id(inst)] = _normal(s, inst.shape, num_devices)
    return result


def _normal(s: HloSharding | None, shape, n: int) -> HloSharding:
    if shape.is_tuple:
        elements = s.elements if s is not None and s.is_tuple and \
            len(s.elements) == len(shape.tuple_shapes) else [None] * len(shape.tuple_shapes)
        return HloSharding.tuple_of([_normal(e, sub, n)
                                     for e, sub in zip(elements, shape.tuple_shapes)])
    if s is not None and s.is_tuple:
        return HloSharding.replicated()
    return normalize(s, shape.dims, n)
