"""GemmRewriter (XLA:GPU's GemmRewriter, the epilogue part): a dot that
GemmFusion left alone (a library GEMM: cuBLASLt on cuda, BLAS on the cpu
target) becomes a `__cublas$lt$matmul` custom call when cuBLASLt can run
some of the elementwise work after it as the GEMM's epilogue:

    D = act(dot(A, B) + beta * C + bias)

* a vector bias: `add(dot, broadcast(v))` with `v` along the output's
  single rhs-free (column) dimension, the most minor one in the output's
  layout (cuBLASLt adds the bias along the rows of its column-major result,
  which for the row-major output the runtime hands it is that dimension);
* a full-shape addend as `beta * C` (beta 1): `add(dot, c)` where `c` is no
  broadcast (that would be materialized), has the dot's shape and layout
  and no other user (the output may take C's buffer:
  `output_to_operand_aliasing`, set when `c` is computed here, not a
  parameter, loop state or constant; buffer assignment shares them when C
  is dead there, the gemm thunk copies C into the output otherwise);
* then one activation: ReLU (`maximum(x, 0)`) or GELU in the tanh
  approximation jax.nn.gelu emits, `x * 0.5 * (1 + tanh(sqrt(2/pi) * (x +
  0.044715 * x^3)))` (the factors in any order and association).

The epilogues are BIAS, RELU, BIAS_RELU, GELU and BIAS_GELU (XLA's names
in `gemm_backend_config.epilogue`; C only sets beta). As in XLA, only
f16 / bf16 / f32 / f64 results take an epilogue, every value absorbed must
have the dot's element type and a single user (a value something else also
reads stays out, and so does everything after it), and a dot with nothing
to absorb stays a dot (its gemm thunk is the same). The epilogue runs in
the GEMM's compute type (f32 for 16-bit types) and rounds once, as
cuBLASLt does, where the original program rounded after each op.
"""

from __future__ import annotations

import json

import numpy as np

from ..module import HloComputation, HloInstruction
from .pipeline import ComputationPass
from .util import is_effective_scalar

__all__ = ["GemmRewriter", "CUBLASLT_MATMUL_TARGET", "rewrite_candidate"]

CUBLASLT_MATMUL_TARGET = "__cublas$lt$matmul"

# cuBLASLt's epilogues are not defined for other result types.
_EPILOGUE_TYPES = frozenset({"f16", "bf16", "f32", "f64"})
# How close a GELU constant must be to its exact value: a rounding of the
# type (jax writes the constants in the computation's type).
_NEAR = {"f16": 2.0 ** -9, "bf16": 2.0 ** -7, "f32": 128 * 2.0 ** -23, "f64": 128 * 2.0 ** -52}
_SQRT_2_OVER_PI = float(np.sqrt(2 / np.pi))
# Addends whose buffer is (or forwards) a value that lives on after the
# call (a parameter, loop state, a constant): C is read, never written over.
_READ_ONLY_ADDENDS = frozenset({"parameter", "constant", "get-tuple-element", "bitcast"})


def _free_dims(rank: int, batch, contracting) -> tuple[int, ...]:
    used = set(batch) | set(contracting)
    return tuple(d for d in range(rank) if d not in used)


def _dot_supported(dot: HloInstruction) -> bool:
    """A dot cuBLASLt can run with an epilogue: an array of a float type
    the epilogues take, operands of one type (or 16-bit ones into f32)."""
    if dot.shape.is_tuple or "sparsity" in dot.attrs or dot.has_control_dependencies():
        return False
    t = dot.shape.element_type
    if t not in _EPILOGUE_TYPES or len(dot.operands) != 2:
        return False
    lt, rt = (o.shape.element_type for o in dot.operands)
    if any(o.shape.is_tuple for o in dot.operands) or lt != rt:
        return False
    return lt == t or (t == "f32" and lt in ("f16", "bf16"))


def _single_user(inst: HloInstruction, comp: HloComputation) -> HloInstruction | None:
    """The one user of `inst` when it has exactly one and is not the root."""
    if len(inst.users) != 1 or inst is comp.root:
        return None
    user = inst.users[0]
    if user.parent is not comp or user.has_control_dependencies() or user.shape.is_tuple:
        return None
    return user


def _same_array(a, b) -> bool:
    return not a.is_tuple and not b.is_tuple and a.element_type == b.element_type and \
        tuple(a.dims) == tuple(b.dims) and tuple(a.minor_to_major) == tuple(b.minor_to_major)


def _other_operand(inst: HloInstruction, value: HloInstruction) -> HloInstruction | None:
    a, b = inst.operands
    if a is value and b is not value:
        return b
    if b is value and a is not value:
        return a
    return None


def _scalar_value(inst: HloInstruction) -> float | None:
    """The value of a broadcast scalar constant (or a constant whose
    elements are all one value); None otherwise."""
    if inst.has_control_dependencies():
        return None
    if inst.opcode == "broadcast" and len(inst.operands) == 1:
        inst = inst.operands[0]
        if not is_effective_scalar(inst.shape):
            return None
    if inst.opcode != "constant" or inst.literal is None or inst.shape.is_tuple:
        return None
    literal = np.asarray(inst.literal)
    if literal.size == 0 or np.iscomplexobj(literal):
        return None
    first = literal.reshape(-1)[0]
    if literal.size > 1 and not np.all(literal == first):
        return None
    value = float(first)
    return value if np.isfinite(value) else None


def _near(inst: HloInstruction, expected: float) -> bool:
    value = _scalar_value(inst)
    if value is None:
        return False
    tolerance = _NEAR.get(inst.shape.element_type)
    return tolerance is not None and abs(value - expected) <= tolerance * abs(expected)


class _Match:
    """What the rewrite absorbs after one dot."""

    def __init__(self, dot: HloInstruction):
        self.dot = dot
        self.c: HloInstruction | None = None
        self.bias: HloInstruction | None = None
        self.activation: str | None = None
        self.last = dot                        # the value the custom call replaces
        self.absorbed: list[HloInstruction] = []   # in order, the dot's first

    @property
    def epilogue(self) -> str:
        act = {"relu": "RELU", "gelu": "GELU", None: ""}[self.activation]
        if self.bias is not None:
            return f"BIAS_{act}" if act else "BIAS"
        return act or "DEFAULT"

    @property
    def empty(self) -> bool:
        return self.c is None and self.bias is None and self.activation is None


def _bias_vector(m: _Match, add: HloInstruction, other: HloInstruction) -> HloInstruction | None:
    """`v` when `other` is broadcast(v) along the output's column dimension
    as cuBLASLt's bias runs."""
    dot = m.dot
    if other.opcode != "broadcast" or len(other.operands) != 1 or other.has_control_dependencies():
        return None
    vector = other.operands[0]
    a = dot.attrs
    rank = len(dot.shape.dims)
    rhs = dot.operands[1]
    rhs_free = _free_dims(len(rhs.shape.dims), a.get("rhs_batch_dims", ()),
                          a.get("rhs_contracting_dims", ()))
    # One column dimension, the output's last (dot_general's order) and its
    # most minor in memory: the bias is then a contiguous row added to every
    # row of the row-major result.
    if len(rhs_free) != 1 or rank < 1 or vector.shape.is_tuple:
        return None
    if tuple(other.attrs.get("dimensions", ())) != (rank - 1,) or \
            len(vector.shape.dims) != 1 or tuple(dot.shape.minor_to_major)[0] != rank - 1:
        return None
    if vector.shape.element_type != dot.shape.element_type:
        return None
    return vector


def _match_add(m: _Match, add: HloInstruction, comp: HloComputation) -> bool:
    other = _other_operand(add, m.last)
    if other is None or not _same_array(add.shape, m.dot.shape):
        return False
    if m.bias is None:
        vector = _bias_vector(m, add, other)
        if vector is not None:
            m.bias = vector
            m.absorbed += [add, other]
            return True
    if m.c is None and other.opcode != "broadcast" and _same_array(other.shape, m.dot.shape) \
            and len(other.users) == 1 and other.parent is comp \
            and not other.has_control_dependencies():
        m.c = other
        m.absorbed.append(add)
        return True
    return False


def _is_zeros(inst: HloInstruction) -> bool:
    value = _scalar_value(inst)
    return value is not None and value == 0


def _factors(node: HloInstruction, x: HloInstruction, top: bool,
             interior: list[HloInstruction]) -> list[HloInstruction] | None:
    """The leaves of the multiply tree at `node` (x is always a leaf; an
    inner multiply is opened only when its one user is the tree);
    None when an inner multiply has other users."""
    if node is x or node.opcode != "multiply" or node.has_control_dependencies():
        return [node]
    if not top and len(node.users) != 1:
        return [node]
    interior.append(node)
    out: list[HloInstruction] = []
    for operand in node.operands:
        part = _factors(operand, x, False, interior)
        if part is None:
            return None
        out += part
    return out


def _split(factors: list[HloInstruction], x: HloInstruction, count_x: int,
           constant: float, rest: int) -> list[HloInstruction] | None:
    """The non-constant, non-x factors when `factors` are x `count_x` times,
    one constant near `constant` and `rest` other values; else None."""
    xs = [f for f in factors if f is x]
    consts = [f for f in factors if f is not x and _near(f, constant)]
    others = [f for f in factors if f is not x and not any(f is c for c in consts)]
    if len(xs) != count_x or len(consts) != 1 or len(others) != rest:
        return None
    return others


def _match_gelu(x: HloInstruction, comp: HloComputation) -> tuple | None:
    """(the GELU's result, the instructions it consists of) when every user
    of `x` belongs to jax's tanh-approximated GELU of `x`; None otherwise."""
    if x is comp.root:
        return None
    starts: list[HloInstruction] = []
    for user in x.users:
        node = user
        for _ in range(3):
            if node.opcode != "multiply" or node.parent is not comp:
                break
            starts.append(node)
            if len(node.users) != 1:
                break
            node = node.users[0]
    for top in reversed(starts):
        found = _gelu_at(top, x)
        if found is not None:
            nodes = found
            ids = {id(n) for n in nodes}
            if all(id(u) in ids for u in x.users) and _closed(nodes, top):
                return top, nodes
    return None


def _closed(nodes: list[HloInstruction], top: HloInstruction) -> bool:
    """Every instruction of the pattern but its result is read only inside it."""
    ids = {id(n) for n in nodes}
    for n in nodes:
        if n is top:
            continue
        if n.opcode in ("constant", "broadcast"):
            continue   # shared constants stay; only removed when dead
        if any(id(u) not in ids for u in n.users):
            return False
    return True


def _gelu_at(top: HloInstruction, x: HloInstruction) -> list[HloInstruction] | None:
    interior: list[HloInstruction] = []
    outer = _factors(top, x, True, interior)
    if outer is None:
        return None
    rest = _split(outer, x, 1, 0.5, 1)
    if rest is None or rest[0].opcode != "add" or len(rest[0].users) != 1:
        return None
    one_plus = rest[0]
    tanh = _other_of(one_plus, lambda i: _near(i, 1.0))
    if tanh is None or tanh.opcode != "tanh" or len(tanh.users) != 1:
        return None
    inner = tanh.operands[0]
    if len(inner.users) != 1:
        return None
    scaled = _factors(inner, x, False, interior) if inner.opcode == "multiply" else None
    rest = _split(scaled or [], x, 0, _SQRT_2_OVER_PI, 1)
    if rest is None or rest[0].opcode != "add" or len(rest[0].users) != 1:
        return None
    poly = rest[0]
    cubic = _other_operand(poly, x)
    if cubic is None or cubic.opcode != "multiply" or len(cubic.users) != 1:
        return None
    cubic_factors = _factors(cubic, x, False, interior)
    if cubic_factors is None or _split(cubic_factors, x, 3, 0.044715, 0) is None:
        return None
    consts = [f for f in outer + (scaled or []) + cubic_factors + list(one_plus.operands)
              if f is not x and f.opcode in ("constant", "broadcast")]
    return [*interior, one_plus, tanh, poly, *_with_broadcast_operands(consts)]


def _with_broadcast_operands(values: list[HloInstruction]) -> list[HloInstruction]:
    """`values` and the constants they broadcast (removed with them when
    nothing else reads them)."""
    return [*values, *(v.operands[0] for v in values if v.opcode == "broadcast")]


def _other_of(add: HloInstruction, is_constant) -> HloInstruction | None:
    if add.opcode != "add" or len(add.operands) != 2:
        return None
    a, b = add.operands
    if is_constant(a) and not is_constant(b):
        return b
    if is_constant(b) and not is_constant(a):
        return a
    return None


def rewrite_candidate(dot: HloInstruction, comp: HloComputation) -> _Match | None:
    """What GemmRewriter would absorb after `dot` (None: nothing; the dot
    stays)."""
    if dot.opcode != "dot" or dot.parent is not comp or not _dot_supported(dot):
        return None
    m = _Match(dot)
    while m.activation is None:
        user = _single_user(m.last, comp)
        if user is None:
            break
        if user.opcode == "add" and _match_add(m, user, comp):
            m.last = user
            continue
        if user.opcode == "maximum" and _same_array(user.shape, dot.shape):
            other = _other_operand(user, m.last)
            if other is not None and _is_zeros(other):
                m.activation = "relu"
                m.absorbed += [user, *_with_broadcast_operands([other])]
                m.last = user
                continue
        break
    if m.activation is None and all(_same_array(u.shape, dot.shape) for u in m.last.users):
        gelu = _match_gelu(m.last, comp)
        if gelu is not None:
            m.activation = "gelu"
            m.last, nodes = gelu
            m.absorbed += nodes
    return None if m.empty else m


def _backend_config(m: _Match) -> str:
    a = m.dot.attrs

    def dims(key: str) -> list[str]:
        # XLA prints the repeated int64 fields as strings.
        return [str(int(d)) for d in a.get(key, ())]

    precision = str(a.get("operand_precision", "")).strip("{} ")
    operand_precision = [p.strip().upper() for p in precision.split(",") if p.strip()] or \
        ["DEFAULT", "DEFAULT"]
    gemm = {
        "alpha_real": 1, "alpha_imag": 0, "beta": 1 if m.c is not None else 0,
        "dot_dimension_numbers": {
            "lhs_contracting_dimensions": dims("lhs_contracting_dims"),
            "rhs_contracting_dimensions": dims("rhs_contracting_dims"),
            "lhs_batch_dimensions": dims("lhs_batch_dims"),
            "rhs_batch_dimensions": dims("rhs_batch_dims")},
        "precision_config": {"operand_precision": operand_precision,
                             "algorithm": "ALG_UNSET"},
        "epilogue": m.epilogue,
    }
    return json.dumps({"gemm_backend_config": gemm}, separators=(",", ":"))


class GemmRewriter(ComputationPass):
    """See the module text."""
    name = "gemm-rewriter"

    def run_on(self, comp: HloComputation) -> bool:
        changed = False
        for dot in [i for i in comp.post_order() if i.opcode == "dot"]:
            m = rewrite_candidate(dot, comp)
            if m is not None:
                self._rewrite(comp, m)
                changed = True
        return changed

    def _rewrite(self, comp: HloComputation, m: _Match) -> None:
        dot = m.dot
        operands = list(dot.operands)
        if m.c is not None:
            operands.append(m.c)
        if m.bias is not None:
            operands.append(m.bias)
        call = HloInstruction.create(
            "custom-call", m.last.shape, operands, name="cublas-lt-matmul",
            custom_call_target=CUBLASLT_MATMUL_TARGET, backend_config=_backend_config(m))
        if m.c is not None and m.c.opcode not in _READ_ONLY_ADDENDS:
            # C is dead after the call: the output may reuse its buffer.
            call.attrs["output_to_operand_aliasing"] = "{{}: (2, {})}"
        if "metadata" in dot.attrs:
            call.attrs["metadata"] = dot.attrs["metadata"]
        call.location = dot.location
        comp.add_instruction(call)
        last = m.last
        last.replace_with(call)
        # What the call absorbed goes once nothing reads it any more (a
        # broadcast constant something else also reads stays).
        doomed = [i for i in _unique([dot, *m.absorbed]) if i is not last]
        removed = True
        while removed:
            removed = False
            for inst in doomed:
                if inst.parent is comp and not inst.users and inst is not comp.root and \
                        inst.opcode != "parameter":
                    comp.remove_instruction(inst)
                    removed = True


def _unique(items: list[HloInstruction]) -> list[HloInstruction]:
    seen: set[int] = set()
    out = []
    for inst in items:
        if id(inst) not in seen:
            seen.add(id(inst))
            out.append(inst)
    return out
