"""TriangularSolveExpander and CholeskyExpander (XLA's passes of those
names, for backends without a solver library call): `triangular-solve` and
`cholesky` become while loops of dots, dynamic slices and
dynamic-update-slices, one row (solve) or one column (Cholesky) per
iteration, batched over the leading dimensions.

triangular-solve(a, b): every variant is reduced to M X = R with M
triangular. Only a's `lower` (or upper) triangle is read (the rest is
masked to zero, the diagonal too with `unit_diagonal`); `transpose_a`
transposes it (ADJOINT also conjugates); `left_side=false` (X op(a) = b)
is solved as op(a)^T X^T = b^T. Then, with X starting at zero, row i of X
is (R_i - M_i . X) / M_ii for i ascending (lower M) or descending (upper
M): the rows not solved yet are zero, so the dot takes only those solved.

cholesky(a): the lower factor L (a = L L^H) column by column from a's lower
triangle: c = a[:, j] - L . conj(L[j, :]), L[j, j] = sqrt(c_j), L[i, j] =
c_i / L[j, j] below the diagonal and zero above (the columns of L not
computed yet are zero). `lower=false` factors a^H's lower triangle (a's
upper one) and returns the conjugate transpose. A matrix that is not
positive definite gives NaNs (the square root of a negative pivot).

Each expansion is built as HLO text, parsed, and spliced in: the loop's
computations join the module, the straight-line part replaces the
instruction."""

from __future__ import annotations

from ..module import HloComputation, HloInstruction
from ..parser import parse_module
from ..shape import Shape, default_layout
from .pipeline import InstructionPass

__all__ = ["TriangularSolveExpander", "CholeskyExpander"]

_COMPONENT = {"c64": "f32", "c128": "f64"}


def _flag(inst: HloInstruction, name: str, default: bool = False) -> bool:
    value = inst.attrs.get(name, default)
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _dims(dims) -> str:
    return ",".join(str(d) for d in dims)


def _ty(t: str, dims) -> str:
    return f"{t}[{_dims(dims)}]"


class _Text:
    """Lines of one HLO computation, with fresh value names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def __call__(self, shape: str, op: str, attrs: str = "", name: str | None = None) -> str:
        self.count += 1
        name = name or f"v{self.count}"
        self.lines.append(f"  {name} = {shape} {op}{', ' + attrs if attrs else ''}")
        return name

    def body(self, root: str) -> str:
        lines = list(self.lines)
        for k, line in enumerate(lines):
            if line.startswith(f"  {root} = "):
                lines[k] = "  ROOT " + line[2:]
        return "\n".join(lines)


def _conj(c: _Text, t: str, dims, x: str) -> str:
    """x conjugated (itself for real types)."""
    if t not in _COMPONENT:
        return x
    part = _COMPONENT[t]
    re = c(_ty(part, dims), f"real({x})")
    im = c(_ty(part, dims), f"imag({x})")
    neg = c(_ty(part, dims), f"negate({im})")
    return c(_ty(t, dims), f"complex({re}, {neg})")


def _transpose(c: _Text, t: str, dims, x: str) -> tuple[str, tuple]:
    """x with its last two dimensions swapped."""
    r = len(dims)
    perm = list(range(r - 2)) + [r - 1, r - 2]
    out = tuple(dims[p] for p in perm)
    return c(_ty(t, out), f"transpose({x})", f"dimensions={{{_dims(perm)}}}"), out


def _triangle_mask(c: _Text, t: str, dims, x: str, lower: bool, strict: bool) -> str:
    """x with zeros outside its lower (upper) triangle, the diagonal
    excluded when `strict`."""
    r = len(dims)
    rows = c(_ty("s32", dims), "iota()", f"iota_dimension={r - 2}")
    cols = c(_ty("s32", dims), "iota()", f"iota_dimension={r - 1}")
    direction = ("GT" if strict else "GE") if lower else ("LT" if strict else "LE")
    keep = c(_ty("pred", dims), f"compare({rows}, {cols})", f"direction={direction}")
    zero = c(_ty(t, ()), _zero(t))
    zeros = c(_ty(t, dims), f"broadcast({zero})", "dimensions={}")
    return c(_ty(t, dims), f"select({keep}, {x}, {zeros})")


def _exact_shape(c: _Text, t: str, dims, x: str, shape: Shape) -> str:
    """x (default layout) in `shape`'s layout."""
    if shape.layout is None or tuple(shape.layout) == default_layout(len(dims)):
        return x
    return c(str(shape), f"copy({x})")


def _splice(comp: HloComputation, inst: HloInstruction, text: str,
            operands: list[HloInstruction]) -> None:
    """Parses `text` (an ENTRY taking `operands` and helper computations),
    adds the helpers to the module and the ENTRY's instructions to `comp`,
    and replaces `inst` with its root."""
    parsed = parse_module(text, source=f"<{inst.opcode} expansion of '{inst.name}'>").link()
    module = comp.module
    for helper in parsed.computations:
        if helper is parsed.entry:
            continue
        if module is None:
            raise inst.error("cannot be expanded outside a module")
        module.add_computation(helper, before=comp)
    mapping: dict[int, HloInstruction] = {}
    for node in parsed.entry.post_order():
        if node.opcode == "parameter":
            mapping[id(node)] = operands[node.parameter_number]
            continue
        clone = node.clone_with([mapping[id(o)] for o in node.operands])
        mapping[id(node)] = comp.add_instruction(clone)
    inst.replace_with(mapping[id(parsed.entry.root)])


def _scalar_zero_indices(c: _Text, count: int) -> list[str]:
    if count == 0:
        return []
    zero = c("s32[]", "constant(0)")
    return [zero] * count


def _loop_state(elements: list[str]) -> str:
    """A loop state: the counter, then `elements`."""
    return "(" + ", ".join(["s32[]"] + elements) + ")"


def _zero(t: str) -> str:
    return "constant((0, 0))" if t in _COMPONENT else "constant(0)"


def _counter_condition(name: str, state: str, n: int) -> str:
    return f"""{name} {{
  s = {state} parameter(0)
  c = s32[] get-tuple-element(s), index=0
  n = s32[] constant({n})
  ROOT lt = pred[] compare(c, n), direction=LT
}}
"""


class TriangularSolveExpander(InstructionPass):
    name = "triangular-solve-expander"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "triangular-solve":
            return False
        a, b = inst.operands
        if a.shape.is_tuple or b.shape.rank < 2 or a.shape.rank != b.shape.rank:
            raise inst.error("triangular-solve needs a [..., n, n] and b of the same rank")
        t = inst.shape.element_type
        adims, bdims = tuple(a.shape.dims), tuple(b.shape.dims)
        r = len(adims)
        batch = adims[:-2]
        n = adims[-1]
        left = _flag(inst, "left_side")
        lower = _flag(inst, "lower")
        unit = _flag(inst, "unit_diagonal")
        mode = str(inst.attrs.get("transpose_a", "NO_TRANSPOSE")).upper()
        if mode not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
            raise inst.error(f"triangular-solve: unknown transpose_a {mode}")
        swap = (mode != "NO_TRANSPOSE") != (not left)
        m_lower = lower != swap

        c = _Text()
        c(str(a.shape), "parameter(0)", name="a")
        c(str(b.shape), "parameter(1)", name="b")
        m = _triangle_mask(c, t, adims, "a", lower, unit)
        if swap:
            m, _ = _transpose(c, t, adims, m)
        if mode == "ADJOINT":
            m = _conj(c, t, adims, m)
        rhs, rdims = ("b", bdims) if left else _transpose(c, t, bdims, "b")
        k = rdims[-1]
        mty, rty = _ty(t, adims), _ty(t, rdims)
        state = _loop_state([mty, rty, rty])
        zero = c(_ty(t, ()), _zero(t))
        x0 = c(rty, f"broadcast({zero})", "dimensions={}")
        start = c("s32[]", "constant(0)")
        init = c(state, f"tuple({start}, {m}, {rhs}, {x0})")
        body_name, cond_name = "triangular_solve_body", "triangular_solve_condition"
        loop = c(state, f"while({init})", f"condition={cond_name}, body={body_name}")
        y = c(rty, f"get-tuple-element({loop})", "index=3")
        if not left:
            y, _ = _transpose(c, t, rdims, y)
        root = _exact_shape(c, t, bdims, y, inst.shape)

        # One row of X per iteration.
        bd = _Text()
        bd(state, "parameter(0)", name="s")
        cnt = bd("s32[]", "get-tuple-element(s)", "index=0")
        mm = bd(mty, "get-tuple-element(s)", "index=1")
        rr = bd(rty, "get-tuple-element(s)", "index=2")
        xx = bd(rty, "get-tuple-element(s)", "index=3")
        if m_lower:
            i = cnt
        else:
            last = bd("s32[]", f"constant({n - 1})")
            i = bd("s32[]", f"subtract({last}, {cnt})")
        zeros = _scalar_zero_indices(bd, len(batch) + 1)
        zb = zeros[:len(batch)]
        z = zeros[-1]
        row = bd(_ty(t, (*batch, 1, n)), f"dynamic-slice({', '.join([mm, *zb, i, z])})",
                 f"dynamic_slice_sizes={{{_dims((*batch, 1, n))}}}")
        bdim = _dims(range(len(batch)))
        acc = bd(_ty(t, (*batch, 1, k)), f"dot({row}, {xx})",
                 f"lhs_batch_dims={{{bdim}}}, lhs_contracting_dims={{{r - 1}}}, "
                 f"rhs_batch_dims={{{bdim}}}, rhs_contracting_dims={{{r - 2}}}")
        ri = bd(_ty(t, (*batch, 1, k)), f"dynamic-slice({', '.join([rr, *zb, i, z])})",
                f"dynamic_slice_sizes={{{_dims((*batch, 1, k))}}}")
        xi = bd(_ty(t, (*batch, 1, k)), f"subtract({ri}, {acc})")
        if not unit:
            d = bd(_ty(t, (*batch, 1, 1)), f"dynamic-slice({', '.join([mm, *zb, i, i])})",
                   f"dynamic_slice_sizes={{{_dims((*batch, 1, 1))}}}")
            d = bd(_ty(t, batch), f"reshape({d})")
            d = bd(_ty(t, (*batch, 1, k)), f"broadcast({d})",
                   f"dimensions={{{bdim}}}")
            xi = bd(_ty(t, (*batch, 1, k)), f"divide({xi}, {d})")
        xn = bd(rty, f"dynamic-update-slice({', '.join([xx, xi, *zb, i, z])})")
        one = bd("s32[]", "constant(1)")
        nxt = bd("s32[]", f"add({cnt}, {one})")
        out = bd(state, f"tuple({nxt}, {mm}, {rr}, {xn})")

        text = (f"HloModule triangular_solve\n\n{body_name} {{\n{bd.body(out)}\n}}\n\n"
                f"{_counter_condition(cond_name, state, n)}\n"
                f"ENTRY expansion {{\n{c.body(root)}\n}}\n")
        _splice(comp, inst, text, [a, b])
        return True


class CholeskyExpander(InstructionPass):
    name = "cholesky-expander"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "cholesky":
            return False
        (a,) = inst.operands
        if a.shape.is_tuple or a.shape.rank < 2 or a.shape.dims[-1] != a.shape.dims[-2]:
            raise inst.error("cholesky needs a [..., n, n] operand")
        t = inst.shape.element_type
        dims = tuple(a.shape.dims)
        r = len(dims)
        batch = dims[:-2]
        n = dims[-1]
        lower = _flag(inst, "lower")

        c = _Text()
        c(str(a.shape), "parameter(0)", name="a")
        src = "a"
        if not lower:
            src, _ = _transpose(c, t, dims, src)
            src = _conj(c, t, dims, src)
        mty = _ty(t, dims)
        state = _loop_state([mty, mty])
        zero = c(_ty(t, ()), _zero(t))
        l0 = c(mty, f"broadcast({zero})", "dimensions={}")
        start = c("s32[]", "constant(0)")
        init = c(state, f"tuple({start}, {src}, {l0})")
        body_name, cond_name = "cholesky_body", "cholesky_condition"
        loop = c(state, f"while({init})", f"condition={cond_name}, body={body_name}")
        y = c(mty, f"get-tuple-element({loop})", "index=2")
        if not lower:
            y, _ = _transpose(c, t, dims, y)
            y = _conj(c, t, dims, y)
        root = _exact_shape(c, t, dims, y, inst.shape)

        # One column of L per iteration.
        bd = _Text()
        bd(state, "parameter(0)", name="s")
        j = bd("s32[]", "get-tuple-element(s)", "index=0")
        aa = bd(mty, "get-tuple-element(s)", "index=1")
        ll = bd(mty, "get-tuple-element(s)", "index=2")
        zeros = _scalar_zero_indices(bd, len(batch) + 1)
        zb, z = zeros[:len(batch)], zeros[-1]
        row_dims, col_dims = (*batch, 1, n), (*batch, n, 1)
        row = bd(_ty(t, row_dims), f"dynamic-slice({', '.join([ll, *zb, j, z])})",
                 f"dynamic_slice_sizes={{{_dims(row_dims)}}}")
        row = _conj(bd, t, row_dims, row)
        bdim = _dims(range(len(batch)))
        prod = bd(_ty(t, col_dims), f"dot({ll}, {row})",
                  f"lhs_batch_dims={{{bdim}}}, lhs_contracting_dims={{{r - 1}}}, "
                  f"rhs_batch_dims={{{bdim}}}, rhs_contracting_dims={{{r - 1}}}")
        acol = bd(_ty(t, col_dims), f"dynamic-slice({', '.join([aa, *zb, z, j])})",
                  f"dynamic_slice_sizes={{{_dims(col_dims)}}}")
        col = bd(_ty(t, col_dims), f"subtract({acol}, {prod})")
        pivot = bd(_ty(t, (*batch, 1, 1)), f"dynamic-slice({', '.join([col, *zb, j, z])})",
                   f"dynamic_slice_sizes={{{_dims((*batch, 1, 1))}}}")
        pivot = bd(_ty(t, batch), f"reshape({pivot})")
        if t in _COMPONENT:
            # The pivot of a Hermitian matrix is real: its square root too.
            part = _COMPONENT[t]
            re = bd(_ty(part, batch), f"real({pivot})")
            root_re = bd(_ty(part, batch), f"sqrt({re})")
            pz = bd(_ty(part, ()), "constant(0)")
            pzb = bd(_ty(part, batch), f"broadcast({pz})", "dimensions={}")
            diag = bd(_ty(t, batch), f"complex({root_re}, {pzb})")
        else:
            diag = bd(_ty(t, batch), f"sqrt({pivot})")
        diag = bd(_ty(t, col_dims), f"broadcast({diag})", f"dimensions={{{bdim}}}")
        below = bd(_ty(t, col_dims), f"divide({col}, {diag})")
        rows = bd(_ty("s32", col_dims), "iota()", f"iota_dimension={r - 2}")
        jb = bd(_ty("s32", col_dims), f"broadcast({j})", "dimensions={}")
        gt = bd(_ty("pred", col_dims), f"compare({rows}, {jb})", "direction=GT")
        eq = bd(_ty("pred", col_dims), f"compare({rows}, {jb})", "direction=EQ")
        tz = bd(_ty(t, ()), _zero(t))
        tzb = bd(_ty(t, col_dims), f"broadcast({tz})", "dimensions={}")
        on_diag = bd(_ty(t, col_dims), f"select({eq}, {diag}, {tzb})")
        new_col = bd(_ty(t, col_dims), f"select({gt}, {below}, {on_diag})")
        ln = bd(mty, f"dynamic-update-slice({', '.join([ll, new_col, *zb, z, j])})")
        one = bd("s32[]", "constant(1)")
        nxt = bd("s32[]", f"add({j}, {one})")
        out = bd(state, f"tuple({nxt}, {aa}, {ln})")

        text = (f"HloModule cholesky\n\n{body_name} {{\n{bd.body(out)}\n}}\n\n"
                f"{_counter_condition(cond_name, state, n)}\n"
                f"ENTRY expansion {{\n{c.body(root)}\n}}\n")
        _splice(comp, inst, text, [a])
        return True
