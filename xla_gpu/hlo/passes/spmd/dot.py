"""Partitioning a dot (XLA's dot_handler, simplified): the cheapest of
cutting the operands as the result is (no collective on the result), or
partial dots over a contracting dim both operands cut alike, summed by an
all-reduce (a reduce-scatter where the result is cut over the same
devices). Cost: the elements a collective moves per device, about (an
operand gathered: its size; partial sums: twice theirs), which reproduces
XLA's size-dependent choice."""

from __future__ import annotations

import math

from .placement import device_coords, from_coords
from .sharding import HloSharding

__all__ = ["DotPartitioning"]


class DotPartitioning:
    """A base of the partitioner (uses its emitter and values)."""

    def emit_dot(self, inst, s: HloSharding):
        a = inst.attrs
        lhs, rhs = inst.operands
        lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
        lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
        lr, rr = lhs.shape.rank, rhs.shape.rank
        lf = [i for i in range(lr) if i not in lb and i not in lc]
        rf = [i for i in range(rr) if i not in rb and i not in rc]
        n, out_rank = self.n, inst.shape.rank
        ls, rs = self.values[id(lhs)][1], self.values[id(rhs)][1]
        if any(x.is_manual or x.has_manual_subgroup for x in (ls, rs, s)):
            return self.whole(inst, "dot of manual values")
        # Per device: (batch chunk, lhs free chunk, rhs free chunk, contracting chunk).
        plans = []
        xo = device_coords(s, out_rank, n)
        co = s.counts(out_rank)
        nb = len(lb)

        def operand_sharding(rank, batch, free, contracting, counts_of, coords_of, order):
            def coords(d):
                c = [0] * rank
                for k, dim in enumerate(batch):
                    c[dim] = coords_of(d)[0][k]
                for k, dim in enumerate(free):
                    c[dim] = coords_of(d)[1][k]
                for k, dim in enumerate(contracting):
                    c[dim] = coords_of(d)[2][k]
                return c
            counts = [1] * rank
            for k, dim in enumerate(batch):
                counts[dim] = counts_of[0][k]
            for k, dim in enumerate(free):
                counts[dim] = counts_of[1][k]
            for k, dim in enumerate(contracting):
                counts[dim] = counts_of[2][k]
            return from_coords(counts, coords, order)

        order = list(s.devices) if s.kind == "tiled" else list(range(n))
        # Plan 1: the operands cut as the result is.
        l1 = operand_sharding(lr, lb, lf, lc,
                              (co[:nb], co[nb:nb + len(lf)], [1] * len(lc)),
                              lambda d: (xo[d][:nb], xo[d][nb:nb + len(lf)], [0] * len(lc)),
                              order)
        r1 = operand_sharding(rr, rb, rf, rc,
                              (co[:nb], co[nb + len(lf):], [1] * len(rc)),
                              lambda d: (xo[d][:nb], xo[d][nb + len(lf):], [0] * len(rc)),
                              order)
        # Costs: elements a collective moves per device, about (an operand
        # gathered: its whole size; partial sums: twice their size).
        def moved(have: HloSharding, want: HloSharding, operand) -> int:
            return 0 if self.only_slices(have, want, operand.shape.rank) else \
                operand.shape.num_elements

        if l1 is not None and r1 is not None:
            cost = moved(ls, l1, lhs) + moved(rs, r1, rhs)
            plans.append((cost, 0, "result", l1, r1, None))
        # Plan 2: partial sums over a contracting dim both operands cut alike.
        for which, base, base_rank in (("lhs", ls, lr), ("rhs", rs, rr)):
            if base.kind != "tiled":
                continue
            bc, bx = base.counts(base_rank), device_coords(base, base_rank, n)
            b_batch, b_free, b_con = (lb, lf, lc) if which == "lhs" else (rb, rf, rc)
            if all(bc[d] == 1 for d in b_con):
                continue
            counts = ([bc[d] for d in b_batch], [bc[d] for d in b_free],
                      [bc[d] for d in b_con])

            def coords_of(d, bx=bx, b_batch=b_batch, b_free=b_free, b_con=b_con):
                return ([bx[d][i] for i in b_batch], [bx[d][i] for i in b_free],
                        [bx[d][i] for i in b_con])
            order2 = list(base.devices)
            if which == "lhs":
                l2 = operand_sharding(lr, lb, lf, lc, counts, coords_of, order2)
                r2 = operand_sharding(rr, rb, rf, rc,
                                      (counts[0], [1] * len(rf), counts[2]),
                                      lambda d: (coords_of(d)[0], [0] * len(rf),
                                                 coords_of(d)[2]), order2)
                out_counts = list(counts[0]) + list(counts[1]) + [1] * len(rf)
                out_coords = lambda d: list(coords_of(d)[0]) + list(coords_of(d)[1]) + \
                    [0] * len(rf)
            else:
                r2 = operand_sharding(rr, rb, rf, rc, counts, coords_of, order2)
                l2 = operand_sharding(lr, lb, lf, lc,
                                      (counts[0], [1] * len(lf), counts[2]),
                                      lambda d: (coords_of(d)[0], [0] * len(lf),
                                                 coords_of(d)[2]), order2)
                out_counts = list(counts[0]) + [1] * len(lf) + list(counts[1])
                out_coords = lambda d: list(coords_of(d)[0]) + [0] * len(lf) + \
                    list(coords_of(d)[1])
            partial = from_coords(out_counts, out_coords, order2)
            if l2 is None or r2 is None or partial is None:
                continue
            # The all-reduce groups: per result chunk (and replica), one
            # device per contracting chunk.
            by_chunk: dict[tuple, dict[tuple, list[int]]] = {}
            for d in order2:
                by_chunk.setdefault(tuple(out_coords(d)), {}).setdefault(
                    tuple(coords_of(d)[2]), []).append(d)
            groups = []
            for per_k in by_chunk.values():
                ks = sorted(per_k)
                for i in range(len(per_k[ks[0]])):
                    groups.append([per_k[k][i] for k in ks])
            summed = 2 * inst.shape.num_elements // math.prod(partial.counts(out_rank))
            cost = moved(ls, l2, lhs) + moved(rs, r2, rhs) + summed
            plans.append((cost, 1, which, l2, r2, (partial, groups)))
        if not plans:
            return self.whole(inst, "no way to cut this dot")
        # (on a tie, partial sums: what XLA picks for a dot whose one
        # operand is whole)
        plans.sort(key=lambda p: (p[0], -p[1]))
        _, _, _, lw, rw, reduction = plans[0]
        x = self.value(lhs, lw)
        y = self.value(rhs, rw)
        if reduction is None:
            return self.add_clone(inst, [x, y], self.local_shape(inst.shape, s)), s
        partial, groups = reduction
        # Contracting over an uneven cut: the padding of both operands made
        # zero, or it would be summed into real results (both, not one:
        # padding may hold an inf or NaN, and 0 * inf is NaN).
        x = self.mask_padding(x, lw, lhs.shape, lc)
        y = self.mask_padding(y, rw, rhs.shape, rc)
        local = self.add_clone(inst, [x, y], self.local_shape(inst.shape, partial))
        scattered = self.try_reduce_scatter(local, partial, s, groups, inst.shape)
        if scattered is not None:
            return scattered, s
        summed = self.all_reduce(local, groups)
        return self.reshard(summed, partial, s, inst.shape), s

    def try_reduce_scatter(self, x, partial: HloSharding, target: HloSharding, groups,
                           global_shape):
        """A reduce-scatter instead of all-reduce + slice: the target cuts
        one more dim than the partial sum, over exactly the all-reduce's
        groups in their order."""
        rank, n = global_shape.rank, self.n
        if target.kind != "tiled":
            return None
        pc, tc = partial.counts(rank), target.counts(rank)
        extra = [i for i in range(rank) if tc[i] != pc[i]]
        if len(extra) != 1 or pc[extra[0]] != 1 or tc[extra[0]] != len(groups[0]):
            return None
        dim = extra[0]
        xp, xt = device_coords(partial, rank, n), device_coords(target, rank, n)
        for g in groups:
            for position, d in enumerate(g):
                if xt[d][dim] != position:
                    return None
                if any(xt[d][i] != xp[d][i] for i in range(rank) if i != dim):
                    return None
        # (an uneven cut: the partial sums padded to whole chunks first)
        padded = list(x.shape.dims)
        padded[dim] = -(-padded[dim] // len(groups[0])) * len(groups[0])
        return self.reduce_scatter(self.pad_high(x, padded), dim, groups)

