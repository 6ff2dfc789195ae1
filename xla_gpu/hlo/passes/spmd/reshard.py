"""Emitting per-device code: the collectives, partition-id tables, and
resharding a value from one sharding to another (all-gathers along the
tile assignment's groups, then a dynamic-slice at offsets read by
partition-id; one all-to-all where a cut moves to another dim over the
same devices). A base of the partitioner: `self.comp` is the computation
being built, `self.n` the device count.

Uneven cuts (as XLA's): a dim of n cut c ways is held in chunks of
ceil(n / c) by every device, the last chunks partly (or wholly) padding.
A value holds its true size along the dims it does not cut and the padded
chunk along the ones it cuts: cutting pads the whole value to c * ceil(n /
c) before the dynamic-slice (which would clamp the last chunk's offset
otherwise), and gathering slices the padding off again. What the padding
holds is unspecified (any value): the ops that would read it into real
results mask it first (`mask_padding`)."""

from __future__ import annotations

import numpy as np

from ....errors import UnsupportedError
from ...collectives import replica_groups_text
from ...module import HloComputation, HloInstruction
from ...shape import Shape
from .placement import (device_coords, from_coords, groups_along, replicate_dims,
                        same_placement)
from .sharding import HloSharding

__all__ = ["Emitter"]


class Emitter:
    """A base of the partitioner: `self.comp` is the computation being
    built, `self.n` the device count, `self.channel` the last channel id
    given, `self.reducers` the reducer computations made (one per kind and
    element type)."""

    # What a floating-point value's padding is made of (any value is
    # correct; tests set NaN so that padding read into a result shows).
    padding_value = 0.0

    def add(self, opcode: str, shape: Shape, operands=(), **attrs) -> HloInstruction:
        return self.comp.add_instruction(HloInstruction.create(opcode, shape, operands,
                                                               **attrs))

    def next_channel(self) -> str:
        self.channel += 1
        return str(self.channel)

    def collective_permute(self, x: HloInstruction, pairs) -> HloInstruction:
        """`x` sent along `pairs` ((source, target) partitions; a device no
        pair targets receives zeros)."""
        return self.add("collective-permute", x.shape, [x],
                        source_target_pairs=replica_groups_text(pairs),
                        channel_id=self.next_channel())

    def partition_id(self) -> HloInstruction:
        if self._pid is None:
            pid = self.add("partition-id", Shape("u32", ()))
            self._pid = self.add("convert", Shape("s32", ()), [pid])
        return self._pid

    def table_value(self, values: list[int]) -> HloInstruction:
        """values[partition-id] as an s32 scalar."""
        if len(set(values)) == 1:
            return self.scalar(values[0])
        key = tuple(values)
        hit = self._tables.get(key)
        if hit is not None:
            return hit
        table = self.comp.add_instruction(HloInstruction.create_constant(
            np.array(values, dtype=np.int32), Shape("s32", (len(values),), (0,))))
        picked = self.add("dynamic-slice", Shape("s32", (1,), (0,)), [table, self.partition_id()],
                          dynamic_slice_sizes=(1,))
        value = self.add("reshape", Shape("s32", ()), [picked])
        self._tables[key] = value
        return value

    def scalar(self, value: int) -> HloInstruction:
        return self.comp.add_instruction(HloInstruction.create_constant(
            np.array(value, dtype=np.int32), Shape("s32", ())))

    def reducer(self, element_type: str, kind: str = "add") -> HloComputation:
        key = f"{kind}.{element_type}"
        comp = self.reducers.get(key)
        if comp is None:
            scalar = Shape(element_type, ())
            name = self.module.unique_computation_name(f"spmd_{kind}_{element_type}")
            comp = HloComputation(name)
            x = comp.add_instruction(HloInstruction.create_parameter(0, scalar, "x"))
            y = comp.add_instruction(HloInstruction.create_parameter(1, scalar, "y"))
            op = kind if element_type != "pred" else "or"
            comp.set_root(comp.add_instruction(HloInstruction.create(op, scalar, [x, y])))
            self.module.add_computation(comp)
            self.reducers[key] = comp
        return comp

    def local_shape(self, shape: Shape, s: HloSharding) -> Shape:
        if shape.is_tuple:
            return Shape(tuple_shapes=tuple(
                self.local_shape(sub, e if s.is_tuple else HloSharding.replicated())
                for sub, e in zip(shape.tuple_shapes, s.elements or
                                  [HloSharding.replicated()] * len(shape.tuple_shapes))))
        return shape.with_dims(s.local_dims(shape.dims))

    def global_groups(self, groups) -> str:
        """The replica_groups text of partition `groups` for a collective
        with global device ids: with replicas, each replica's devices
        (replica * partitions + partition) in groups of their own (XLA's
        CreateReplicaGroups). The all-to-alls and collective-permutes name
        partitions instead (cross-partition: within each replica)."""
        replicas = self.module.replica_count
        if replicas > 1:
            groups = [[r * self.n + d for d in g] for r in range(replicas) for g in groups]
        return replica_groups_text(groups)

    def all_gather(self, x: HloInstruction, dim: int, groups) -> HloInstruction:
        dims = list(x.shape.dims)
        dims[dim] *= len(groups[0])
        return self.add("all-gather", x.shape.with_dims(tuple(dims)), [x],
                        dimensions=(dim,), replica_groups=self.global_groups(groups),
                        use_global_device_ids=True, channel_id=self.next_channel())

    def all_reduce(self, x: HloInstruction, groups, kind: str = "add",
                   to_apply: HloComputation | None = None) -> HloInstruction:
        """`to_apply`: the reducer (default: one of `kind` made here)."""
        return self.add("all-reduce", x.shape, [x], replica_groups=self.global_groups(groups),
                        use_global_device_ids=True, channel_id=self.next_channel(),
                        to_apply=to_apply or self.reducer(x.shape.element_type, kind))

    def reduce_scatter(self, x: HloInstruction, dim: int, groups) -> HloInstruction:
        dims = list(x.shape.dims)
        dims[dim] //= len(groups[0])
        return self.add("reduce-scatter", x.shape.with_dims(tuple(dims)), [x],
                        dimensions=(dim,), replica_groups=self.global_groups(groups),
                        use_global_device_ids=True, channel_id=self.next_channel(),
                        to_apply=self.reducer(x.shape.element_type))

    # ---------------------------------------------------------- resharding

    def reshard(self, x: HloInstruction, source: HloSharding, target: HloSharding,
                global_shape: Shape) -> HloInstruction:
        """x (source's chunk of a value of global_shape) as target's chunk."""
        if global_shape.is_tuple:
            if source == target:
                return x
            parts = []
            for i, sub in enumerate(global_shape.tuple_shapes):
                element = self.add("get-tuple-element", x.shape.tuple_shapes[i], [x], index=i)
                parts.append(self.reshard(element, source.elements[i], target.elements[i], sub))
            return self.add("tuple", Shape(tuple_shapes=tuple(p.shape for p in parts)), parts)
        rank, n = global_shape.rank, self.n
        if same_placement(source, target, rank, n):
            return x
        if source.is_manual or target.is_manual:
            raise UnsupportedError(f"cannot reshard between manual and {target} shardings")
        moved = self.try_permute(x, source, target, global_shape)
        if moved is None:
            moved = self.try_all_to_all(x, source, target, global_shape)
        if moved is not None:
            return moved
        current = source
        if source.kind == "tiled":
            sc, tc = source.counts(rank), target.counts(rank)
            xs = device_coords(source, rank, n)
            xt = device_coords(target, rank, n)
            for dim in range(rank):
                if sc[dim] == 1:
                    continue
                if sc[dim] == tc[dim] and all(xs[d][dim] == xt[d][dim] for d in range(n)):
                    continue
                x = self.all_gather(x, dim, groups_along(current, rank, [dim]))
                x = self.slice_dim(x, dim, global_shape.dims[dim])
                current = replicate_dims(current, rank, [dim], keep=list(range(rank)))
        return self.slice_to(x, current, target, global_shape)

    def slice_to(self, x, current: HloSharding, target: HloSharding, global_shape: Shape):
        """Cuts target's chunk out of x where current holds a dim whole."""
        rank, n = global_shape.rank, self.n
        if target.kind != "tiled":
            return x
        cc, tc = current.counts(rank), target.counts(rank)
        xt = device_coords(target, rank, n)
        local = list(x.shape.dims)
        padded = list(x.shape.dims)
        offsets = []
        cut = False
        for dim in range(rank):
            if cc[dim] == 1 and tc[dim] > 1:
                size = -(-global_shape.dims[dim] // tc[dim])
                local[dim] = size
                padded[dim] = size * tc[dim]
                offsets.append(self.table_value([xt[d][dim] * size for d in range(n)]))
                cut = True
            else:
                offsets.append(self.scalar(0))
        if not cut:
            return x
        x = self.pad_high(x, padded)
        return self.add("dynamic-slice", x.shape.with_dims(tuple(local)), [x, *offsets],
                        dynamic_slice_sizes=tuple(local))

    # ---------------------------------------------------------- padding

    def zero(self, element_type: str) -> HloInstruction:
        shape = Shape(element_type, ())
        return self.comp.add_instruction(HloInstruction.create_constant(
            np.zeros((), shape.dtype), shape))

    def pad_high(self, x: HloInstruction, dims) -> HloInstruction:
        """x grown to `dims` at the high end of each dim (with
        `padding_value`, zero by default: any value would do)."""
        if tuple(dims) == tuple(x.shape.dims):
            return x
        config = [(0, int(want) - have, 0) for have, want in zip(x.shape.dims, dims)]
        shape = Shape(x.shape.element_type, ())
        if self.padding_value != 0 and np.issubdtype(shape.dtype, np.floating):
            fill = self.comp.add_instruction(HloInstruction.create_constant(
                np.array(self.padding_value, shape.dtype), shape))
        else:
            fill = self.zero(shape.element_type)
        return self.add("pad", x.shape.with_dims(tuple(dims)), [x, fill], padding=config)

    def slice_dim(self, x: HloInstruction, dim: int, size: int) -> HloInstruction:
        """The first `size` elements of x along `dim` (padding cut off)."""
        if x.shape.dims[dim] == size:
            return x
        dims = list(x.shape.dims)
        dims[dim] = size
        return self.add("slice", x.shape.with_dims(tuple(dims)), [x],
                        slice=[(0, n, 1) for n in dims])

    def mask_padding(self, x: HloInstruction, s: HloSharding, global_shape: Shape,
                     dims, value: HloInstruction | None = None) -> HloInstruction:
        """x (s's chunk of a value of global_shape) with the padding along
        `dims` replaced by the scalar `value` (a reduction's identity; zero
        by default, for a dot's contracting dims): select(index < the real
        elements of this device's chunk, x, value)."""
        rank, n = global_shape.rank, self.n
        counts = s.counts(rank)
        dims = [d for d in dims if counts[d] > 1 and global_shape.dims[d] % counts[d]]
        if not dims:
            return x
        coords = device_coords(s, rank, n)
        local = tuple(x.shape.dims)
        mask = None
        for dim in dims:
            size = local[dim]
            # Real elements of this device's chunk: the chunks before it
            # take size each, the rest of the dim is real (0 past the end).
            real = [max(0, min(size, global_shape.dims[dim] - coords[d][dim] * size))
                    for d in range(n)]
            index = self.add("iota", Shape("s32", local), iota_dimension=dim)
            limit = self.add("broadcast", Shape("s32", local), [self.table_value(real)],
                             dimensions=())
            inside = self.add("compare", Shape("pred", local), [index, limit],
                              direction="LT")
            mask = inside if mask is None else \
                self.add("and", Shape("pred", local), [mask, inside])
        if value is None:
            value = self.zero(x.shape.element_type)
        fill = self.add("broadcast", x.shape.with_dims(local), [value], dimensions=())
        return self.add("select", x.shape.with_dims(local), [mask, x, fill])

    def try_permute(self, x, source: HloSharding, target: HloSharding, global_shape):
        """When every target chunk lies inside one source chunk (the target
        cuts each dim as often as the source, or a multiple of it, the
        chunks nesting): one collective-permute brings each device a source
        chunk holding its target chunk (none when all hold theirs), then a
        local dynamic-slice. Covers a cut over devices in another order and
        a cut moving to another mesh axis of more devices."""
        rank, n = global_shape.rank, self.n
        if source.kind != "tiled" or target.kind != "tiled" or \
                source.has_manual_subgroup or target.has_manual_subgroup:
            return None
        sc, tc = source.counts(rank), target.counts(rank)
        if any(t % s_ for s_, t in zip(sc, tc)):
            return None
        dims = global_shape.dims
        ratio = [t // s_ for s_, t in zip(sc, tc)]
        if any(r > 1 and -(-dims[i] // sc[i]) != r * -(-dims[i] // tc[i])
               for i, r in enumerate(ratio)):
            return None
        xs, xt = device_coords(source, rank, n), device_coords(target, rank, n)
        wanted = [tuple(c // r for c, r in zip(xt[d], ratio)) for d in range(n)]
        holders: dict[tuple, list[int]] = {}
        for d in source.devices:
            holders.setdefault(xs[d], []).append(d)
        pairs = []
        for chunk, have in holders.items():
            need = [d for d in target.devices if wanted[d] == chunk]
            if len(need) != len(have):
                return None
            keep = set(have) & set(need)
            pairs += [(d, d) for d in keep]
            pairs += list(zip([d for d in have if d not in keep],
                              [d for d in need if d not in keep]))
        if any(a != b for a, b in pairs):
            x = self.collective_permute(x, sorted(pairs))
        if all(r == 1 for r in ratio):
            return x
        local = list(x.shape.dims)
        offsets = []
        for i, r in enumerate(ratio):
            if r == 1:
                offsets.append(self.scalar(0))
                continue
            local[i] = x.shape.dims[i] // r
            offsets.append(self.table_value([xt[d][i] % r * local[i] for d in range(n)]))
        return self.add("dynamic-slice", x.shape.with_dims(tuple(local)), [x, *offsets],
                        dynamic_slice_sizes=tuple(local))

    def try_all_to_all(self, x, source: HloSharding, target: HloSharding, global_shape):
        """One all-to-all when the cut moves from dim a to dim b (everything
        else cut as often), then a collective-permute where the target
        holds the chunks on other devices; on a 2-D mesh, an all-to-all
        that moves part of a's cut to b, then a collective-permute where
        the devices end up holding each other's chunks."""
        rank, n = global_shape.rank, self.n
        if source.kind != "tiled" or target.kind != "tiled":
            return None
        moved = self.try_partial_all_to_all(x, source, target, global_shape)
        if moved is not None:
            return moved
        sc, tc = source.counts(rank), target.counts(rank)
        a = [i for i in range(rank) if sc[i] > 1 and tc[i] == 1]
        b = [i for i in range(rank) if tc[i] > 1 and sc[i] == 1]
        if len(a) != 1 or len(b) != 1 or sc[a[0]] != tc[b[0]]:
            return None
        a, b = a[0], b[0]
        if any(sc[i] != tc[i] for i in range(rank) if i not in (a, b)):
            return None
        # The exchange moves the cut over the source's devices (`middle`:
        # each device's chunk of a becomes its chunk of b); where the
        # target holds the chunks on other devices, a collective-permute
        # then puts them in place (XLA's all-to-all, then its reorder).
        xs = device_coords(source, rank, n)

        def coords(d):
            c = list(xs[d])
            c[a], c[b] = 0, xs[d][a]
            return c
        middle = from_coords(tc, coords, list(source.devices))
        if middle is None:
            return None
        k = sc[a]
        groups = groups_along(source, rank, [a])
        if any(sorted(g) != sorted(t) for g, t in zip(groups, groups_along(middle, rank, [b]))):
            return None
        # Split b into [k, b/k] (chunk j goes to the group's j-th device),
        # exchange on the new dim, then put the received chunks of a back
        # in order: [k, a/k] -> a.
        # (an uneven b is padded to k chunks first; an uneven a comes back
        # as k padded chunks, the padding then sliced off)
        padded = list(x.shape.dims)
        padded[b] = -(-padded[b] // k) * k
        x = self.pad_high(x, padded)
        dims = list(x.shape.dims)
        split = dims[:b] + [k, dims[b] // k] + dims[b + 1:]
        y = self.add("reshape", x.shape.with_dims(tuple(split)), [x])
        y = self.add("all-to-all", y.shape, [y], dimensions=(b,),
                     replica_groups=replica_groups_text(groups), channel_id=self.next_channel())
        # y dims: the split dim b now indexes the sender (its chunk of a).
        a_pos = a if a < b else a + 1
        order = [i for i in range(len(split)) if i != b]
        order.insert(order.index(a_pos), b)
        moved_dims = tuple(split[i] for i in order)
        y = self.add("transpose", x.shape.with_dims(moved_dims), [y],
                     dimensions=tuple(order))
        final = [x.shape.dims[i] * k if i == a else
                 (x.shape.dims[i] // k if i == b else x.shape.dims[i])
                 for i in range(rank)]
        y = self.add("reshape", x.shape.with_dims(tuple(final)), [y])
        y = self.slice_dim(y, a, global_shape.dims[a])
        if same_placement(middle, target, rank, n):
            return y
        return self.try_permute(y, middle, target, global_shape)

    def try_partial_all_to_all(self, x, source: HloSharding, target: HloSharding,
                               global_shape):
        """Dim a cut k times more in the source, dim b k times more in the
        target (the other dims cut as often), over a 2-D mesh (the source
        cuts two dims, or replicates, or the target does): an all-to-all within
        groups of k devices holding the same chunks but for a's finest
        split, then a collective-permute to the target's devices."""
        rank, n = global_shape.rank, self.n
        if source.has_manual_subgroup or target.has_manual_subgroup:
            return None
        sc, tc = source.counts(rank), target.counts(rank)
        a = [i for i in range(rank) if sc[i] > tc[i]]
        b = [i for i in range(rank) if tc[i] > sc[i]]
        if len(a) != 1 or len(b) != 1:
            return None
        a, b = a[0], b[0]
        if sc[a] % tc[a] or tc[b] % sc[b] or sc[a] // tc[a] != tc[b] // sc[b]:
            return None
        k = sc[a] // tc[a]
        # Uneven chunks: a dim a made whole comes back as k padded chunks
        # (the padding then sliced off), a dim b cut from whole is padded to
        # k chunks first (a concatenate of uneven rows on a 2-D mesh); any
        # other uneven exchange would split chunks off their boundaries.
        dims_g = global_shape.dims
        if (dims_g[a] % sc[a] and tc[a] != 1) or (dims_g[b] % tc[b] and sc[b] != 1) or \
                any(dims_g[i] % sc[i] for i in range(rank) if i not in (a, b)):
            return None
        if sum(c > 1 for c in sc) < 2 and not source.subgroups and tc[a] == 1:
            return None         # one mesh axis: the plain all-to-all's case
        # (a cut of one dim over all devices splitting onto two dims, as a
        # concatenate's moved cut going back, is an exchange in groups too)
        array = source.array()
        shape = list(array.shape)
        split = shape[:a] + [sc[a] // k, k] + shape[a + 1:]
        grouped = array.reshape(split)
        groups = [[int(d) for d in row] for row in
                  np.moveaxis(grouped, a + 1, -1).reshape(-1, k)]
        xs = device_coords(source, rank, n)

        def coords(d):
            c = list(xs[d])
            c[a], c[b] = xs[d][a] // k, xs[d][b] * k + xs[d][a] % k
            return c
        middle = from_coords(tc, coords, list(source.devices))
        if middle is None:
            return None
        # the exchange: b split into k pieces (piece j to the group's j-th
        # device), the received pieces of a put back in order
        padded = list(x.shape.dims)
        padded[b] = -(-padded[b] // k) * k
        x = self.pad_high(x, padded)
        dims = list(x.shape.dims)
        pieces = dims[:b] + [k, dims[b] // k] + dims[b + 1:]
        y = self.add("reshape", x.shape.with_dims(tuple(pieces)), [x])
        y = self.add("all-to-all", y.shape, [y], dimensions=(b,),
                     replica_groups=replica_groups_text(groups), channel_id=self.next_channel())
        a_pos = a if a < b else a + 1
        order = [i for i in range(len(pieces)) if i != b]
        order.insert(order.index(a_pos), b)
        y = self.add("transpose", x.shape.with_dims(tuple(pieces[i] for i in order)), [y],
                     dimensions=tuple(order))
        final = [dims[i] * k if i == a else (dims[i] // k if i == b else dims[i])
                 for i in range(rank)]
        y = self.add("reshape", x.shape.with_dims(tuple(final)), [y])
        if tc[a] == 1:
            y = self.slice_dim(y, a, dims_g[a])
        if same_placement(middle, target, rank, n):
            return y
        return self.try_permute(y, middle, target, global_shape)

    def only_slices(self, have: HloSharding, want: HloSharding, rank: int) -> bool:
        """Whether resharding `have` to `want` needs no collective: every
        dim `have` cuts, `want` cuts the same way (the rest is a slice)."""
        if have.kind != "tiled":
            return not want.is_manual
        if want.kind != "tiled":
            return False
        hc, wc = have.counts(rank), want.counts(rank)
        hx, wx = device_coords(have, rank, self.n), device_coords(want, rank, self.n)
        return all(hc[i] == 1 or (hc[i] == wc[i] and
                                  all(hx[d][i] == wx[d][i] for d in range(self.n)))
                   for i in range(rank))

