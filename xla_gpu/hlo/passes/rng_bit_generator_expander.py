"""RngBitGeneratorExpander (XLA's pass of that name): an `rng-bit-generator`
becomes elementwise HLO over iotas — the counter-based generator evaluated
at each output element's position — built as one loop fusion (its values
are each used several times, where fusion, built bottom-up, would stop),
which consumers may still fuse into, on both targets; the new state is a
few scalar ops beside it. The bits are XLA's
(XLA:CPU and XLA:GPU give the same), as the reference interpreter computes
them:

- Philox4x32-10 (`rng_philox`, and `rng_default`, which XLA maps to it): a
  128-bit counter (state[1] low, state[2] high; with a 2-word state the
  high word is state[0]) advanced once per 4 output words, the key
  state[0]; output word w of block b is word w % 4 of Philox(counter + b).
  A 64-bit output element takes two consecutive words (low first); narrower
  ones take the low bits of one word. The new state advances the counter by
  the number of blocks.
- Threefry2x32-20 (`rng_three_fry`): 64-bit outputs are the two words of
  Threefry(state[1] + i); narrower outputs split one dimension in halves of
  pairs (the first even-sized one, else the largest), the two words of each
  counter filling an even and an odd position there.

The 32x32 -> 64-bit products of Philox are computed in u64; every other
word operation in u32 (wrapping, as the generator's definition wants)."""

from __future__ import annotations

import math

import numpy as np

from ..module import HloComputation, HloInstruction
from ..shape import Shape, bit_width
from .pipeline import InstructionPass
from .util import array_shape

__all__ = ["RngBitGeneratorExpander"]

_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA


class _Builder:
    """Elementwise HLO of one shape (`dims`), added to `comp`."""

    def __init__(self, comp: HloComputation, dims: tuple[int, ...]):
        self.comp, self.dims = comp, tuple(dims)

    def shape(self, element_type: str) -> Shape:
        return array_shape(element_type, self.dims)

    def const(self, value: int, element_type: str) -> HloInstruction:
        scalar = array_shape(element_type, ())
        c = self.comp.add_instruction(HloInstruction.create_constant(
            np.array(value, scalar.dtype), scalar))
        if not self.dims:
            return c
        return self.comp.add("broadcast", self.shape(element_type), [c], dimensions=())

    def spread(self, scalar: HloInstruction) -> HloInstruction:
        """A scalar broadcast to `dims`."""
        if not self.dims:
            return scalar
        return self.comp.add("broadcast", self.shape(scalar.shape.element_type), [scalar],
                             dimensions=())

    def op(self, opcode: str, *operands: HloInstruction, **attrs) -> HloInstruction:
        etype = "pred" if opcode == "compare" else operands[-1].shape.element_type
        return self.comp.add(opcode, self.shape(etype), list(operands), **attrs)

    def convert(self, x: HloInstruction, element_type: str) -> HloInstruction:
        if x.shape.element_type == element_type:
            return x
        return self.comp.add("convert", self.shape(element_type), [x])

    def iota(self, dimension: int, element_type: str = "u64") -> HloInstruction:
        return self.comp.add("iota", self.shape(element_type), [], iota_dimension=dimension)

    def add(self, x, y):
        return self.op("add", x, y)

    def xor(self, x, y):
        return self.op("xor", x, y)

    def low32(self, x):
        """The low word of a u64, as u32."""
        return self.convert(x, "u32")

    def high32(self, x):
        """The high word of a u64, as u32."""
        return self.convert(self.op("shift-right-logical", x, self.const(32, "u64")), "u32")

    def join64(self, low, high):
        """(u32 low, u32 high) -> u64."""
        return self.op("or", self.convert(low, "u64"),
                       self.op("shift-left", self.convert(high, "u64"), self.const(32, "u64")))

    def rotl32(self, x, r: int):
        return self.op("or", self.op("shift-left", x, self.const(r, "u32")),
                       self.op("shift-right-logical", x, self.const(32 - r, "u32")))

    def choose(self, index, options: list[HloInstruction]) -> HloInstruction:
        """options[index] (index a u64 array below len(options))."""
        chosen = options[-1]
        for k in range(len(options) - 2, -1, -1):
            is_k = self.op("compare", index, self.const(k, "u64"), direction="EQ")
            chosen = self.op("select", is_k, options[k], chosen)
        return chosen

    def linear_index(self, dims: tuple[int, ...], coordinates) -> HloInstruction:
        """The row-major position in `dims` of per-dimension u64 coordinates."""
        total = None
        stride = 1
        for d in range(len(dims) - 1, -1, -1):
            term = coordinates[d]
            if stride != 1:
                term = self.op("multiply", term, self.const(stride, "u64"))
            total = term if total is None else self.add(total, term)
            stride *= dims[d]
        return total if total is not None else self.const(0, "u64")


def _philox(b: _Builder, counter_low, counter_high, key_low, key_high) -> list:
    """Philox4x32-10 of the u64 counter halves; four u32 words."""
    words = [b.low32(counter_low), b.high32(counter_low),
             b.low32(counter_high), b.high32(counter_high)]
    k0, k1 = key_low, key_high
    m0, m1 = (b.const(m, "u64") for m in _PHILOX_MULTIPLIERS)
    for _ in range(10):
        c0, c1, c2, c3 = words
        p0 = b.op("multiply", b.convert(c0, "u64"), m0)
        p1 = b.op("multiply", b.convert(c2, "u64"), m1)
        words = [b.xor(b.xor(b.high32(p1), c1), k0), b.low32(p1),
                 b.xor(b.xor(b.high32(p0), c3), k1), b.low32(p0)]
        k0 = b.add(k0, b.const(_PHILOX_KEY_STEPS[0], "u32"))
        k1 = b.add(k1, b.const(_PHILOX_KEY_STEPS[1], "u32"))
    return words


def _threefry(b: _Builder, x0, x1, key_low, key_high) -> tuple:
    """Threefry2x32 with 20 rounds on u32 words."""
    ks = [key_low, key_high,
          b.xor(b.xor(key_low, key_high), b.const(_THREEFRY_PARITY, "u32"))]
    x0, x1 = b.add(x0, ks[0]), b.add(x1, ks[1])
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x0 = b.add(x0, x1)
            x1 = b.xor(b.rotl32(x1, r), x0)
        x0 = b.add(x0, ks[(i + 1) % 3])
        x1 = b.add(b.add(x1, ks[(i + 2) % 3]), b.const(i + 1, "u32"))
    return x0, x1


def _threefry_split(dims: tuple[int, ...]) -> int | None:
    """The dimension a narrow threefry output splits in pairs."""
    if not dims:
        return None
    even = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if even is not None:
        return even
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


class RngBitGeneratorExpander(InstructionPass):
    name = "rng-bit-generator-expander"

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        if inst.opcode != "rng-bit-generator":
            return False
        state = inst.operands[0]
        leaves = inst.shape.leaves()
        if not inst.shape.is_tuple or len(leaves) != 2 or state.shape.element_type != "u64" \
                or state.shape.rank != 1 or state.shape.dims[0] < 2:
            raise inst.error("rng-bit-generator takes a u64[n >= 2] state and returns "
                             "(state, bits)")
        out = leaves[1]
        bits = bit_width(out.element_type)
        if out.element_type in ("pred", "c64", "c128") or bits not in (8, 16, 32, 64):
            raise inst.unsupported(f"rng-bit-generator cannot produce {out.element_type}")
        algorithm = str(inst.attrs.get("algorithm", "rng_default")).lower()
        if algorithm == "rng_default":
            algorithm = "rng_philox"
        if algorithm not in ("rng_philox", "rng_three_fry"):
            raise inst.error(f"unknown rng algorithm '{algorithm}'")

        words = state.shape.dims[0]
        dims = tuple(out.dims)
        # The bits: one loop fusion over the output, its state a parameter
        # (the generator's values are used several times each: built
        # unfused, fusion would stop at every shared value).
        body = HloComputation(f"{inst.name}.bits")
        state_param = body.add_instruction(
            HloInstruction.create_parameter(0, state.shape, "state"))
        raw, blocks = _bits(body, state_param, words, dims, bits, algorithm)
        unsigned = f"u{bits}"
        b = _Builder(body, dims)
        raw = b.convert(raw, unsigned)               # the low bits of the word
        if out.element_type != unsigned:
            raw = body.add("bitcast-convert", array_shape(out.element_type, dims), [raw])
        body.set_root(raw)
        if comp.module is not None:
            comp.module.add_computation(body, before=comp)
        fused = comp.add("fusion", raw.shape, [state], kind="kLoop", calls=body)

        # The new state: the counter advanced by the blocks drawn.
        scalars = _Builder(comp, ())
        low = _word(comp, state, 1)
        new_low = scalars.add(low, scalars.const(blocks, "u64"))
        changed = {1: new_low}
        if algorithm == "rng_philox" and words >= 3:
            high = _word(comp, state, 2)
            wrapped = scalars.op("compare", new_low, low, direction="LT")
            changed[2] = scalars.add(high, scalars.convert(wrapped, "u64"))
        pieces = []
        for k in range(words):
            if k in changed:
                pieces.append(comp.add("reshape", array_shape("u64", (1,)), [changed[k]]))
            elif not pieces or k - 1 in changed:
                end = next((j for j in range(k, words) if j in changed), words)
                pieces.append(comp.add("slice", array_shape("u64", (end - k,)), [state],
                                       slice=[(k, end, 1)]))
        new_state = pieces[0] if len(pieces) == 1 else comp.add(
            "concatenate", array_shape("u64", (words,)), pieces, dimensions=(0,))
        result = comp.add("tuple", Shape("", (), None, (new_state.shape, fused.shape)),
                          [new_state, fused])
        inst.replace_with(result)
        return True


def _word(comp: HloComputation, state: HloInstruction, k: int) -> HloInstruction:
    """state[k] as a u64 scalar."""
    piece = comp.add("slice", array_shape("u64", (1,)), [state], slice=[(k, k + 1, 1)])
    return comp.add("reshape", array_shape("u64", ()), [piece])


def _bits(comp: HloComputation, state: HloInstruction, words: int, dims: tuple[int, ...],
          bits: int, algorithm: str) -> tuple[HloInstruction, int]:
    """The generator's raw words (u32, or u64 for 64-bit outputs) at every
    output position, and how far the counter advances."""
    scalars = _Builder(comp, ())
    key = _word(comp, state, 0)
    key_low, key_high = scalars.low32(key), scalars.high32(key)
    count = math.prod(dims)
    b = _Builder(comp, dims)
    coordinates = [b.iota(d) for d in range(len(dims))]
    if algorithm == "rng_philox":
        low = _word(comp, state, 1)
        high = _word(comp, state, 2) if words >= 3 else key
        position = b.linear_index(dims, coordinates)
        per_block = 2 if bits == 64 else 4          # output elements per block
        block = b.op("divide", position, b.const(per_block, "u64"))
        slot = b.op("remainder", position, b.const(per_block, "u64"))
        counter_low = b.add(b.spread(low), block)
        carry = b.op("compare", counter_low, b.spread(low), direction="LT")
        counter_high = b.add(b.spread(high), b.convert(carry, "u64"))
        w = _philox(b, counter_low, counter_high, b.spread(key_low), b.spread(key_high))
        if bits == 64:
            return b.choose(slot, [b.join64(w[0], w[1]), b.join64(w[2], w[3])]), \
                -(-count * 2 // 4)
        return b.choose(slot, w), -(-count // 4)
    start = _word(comp, state, 1)
    if bits == 64:
        counter = b.add(b.spread(start), b.linear_index(dims, coordinates))
        o0, o1 = _threefry(b, b.low32(counter), b.high32(counter),
                           b.spread(key_low), b.spread(key_high))
        return b.join64(o0, o1), count
    split = _threefry_split(dims)
    if split is None:
        half: tuple[int, ...] = (1,)
        halved = [b.const(0, "u64")]
        odd = None
    else:
        half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
        halved = list(coordinates)
        halved[split] = b.op("shift-right-logical", coordinates[split], b.const(1, "u64"))
        odd = b.op("and", coordinates[split], b.const(1, "u64"))
    counter = b.add(b.spread(start), b.linear_index(half, halved))
    o0, o1 = _threefry(b, b.low32(counter), b.high32(counter),
                       b.spread(key_low), b.spread(key_high))
    return (o0 if odd is None else b.choose(odd, [o0, o1])), math.prod(half)
