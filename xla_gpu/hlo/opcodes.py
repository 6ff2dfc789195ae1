"""One table of HLO opcodes and element-type families, for the parser, the
verifiers, the interpreter, the fusion passes and the emitters. No
third-party imports.

Elementwise ops compute each output element from the operand elements at
the same index (select/clamp may take scalar predicates or bounds, which
are broadcast).
"""

from __future__ import annotations

__all__ = ["UNARY_ELEMENTWISE", "BINARY_ELEMENTWISE", "TERNARY_ELEMENTWISE",
           "ELEMENTWISE", "ELEMENTWISE_OPCODES", "HLO_OPCODES", "FLOAT_MATH", "FIXED_ARITY",
           "MIN_ARITY", "SAME_TYPE_ELEMENTWISE", "F8_TYPES", "F4_TYPES",
           "MINIFLOAT_TYPES", "SMALL_FLOAT_TYPES", "SUB_BYTE_INT_TYPES", "is_f8",
           "is_minifloat", "SIDE_EFFECTING", "has_side_effect"]

UNARY_ELEMENTWISE = frozenset("""
abs negate sign ceil floor round-nearest-afz round-nearest-even not exponential
exponential-minus-one log log-plus-one sqrt rsqrt cbrt tanh logistic sine cosine
tan erf is-finite popcnt count-leading-zeros real imag copy convert
bitcast-convert reduce-precision acos acosh asin asinh atanh cosh sinh
""".split())

BINARY_ELEMENTWISE = frozenset("""
add subtract multiply divide remainder maximum minimum power atan2 and or xor
shift-left shift-right-arithmetic shift-right-logical compare complex mulhi
""".split())

TERNARY_ELEMENTWISE = frozenset({"select", "clamp"})

# Every elementwise op (`map` applies a scalar computation elementwise).
ELEMENTWISE = UNARY_ELEMENTWISE | BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE
ELEMENTWISE_OPCODES = ELEMENTWISE | frozenset({"map"})

# Transcendental and rounding ops on floating-point values.
FLOAT_MATH = frozenset("""
exponential exponential-minus-one log log-plus-one sqrt rsqrt cbrt tanh logistic
sine cosine tan erf ceil floor round-nearest-afz round-nearest-even
acos acosh asin asinh atanh cosh sinh
""".split())

# Ops whose operands (all of them) have the result's element type.
SAME_TYPE_ELEMENTWISE = frozenset("""
negate sign ceil floor round-nearest-afz round-nearest-even not exponential
exponential-minus-one log log-plus-one sqrt rsqrt cbrt tanh logistic sine cosine
tan erf popcnt count-leading-zeros copy reduce-precision add subtract multiply
divide remainder maximum minimum power atan2 and or xor shift-left
shift-right-arithmetic shift-right-logical clamp acos acosh asin asinh atanh cosh
sinh mulhi
""".split())

# Every opcode HLO text may name: XLA's opcode list plus the elementwise
# extensions above. The parser rejects any other, as XLA's does; an op the
# compiler cannot handle yet fails later, with the instruction named.
HLO_OPCODES = ELEMENTWISE_OPCODES | frozenset("""
add-dependency after-all all-gather all-gather-done all-gather-start all-reduce
all-reduce-done all-reduce-start all-to-all async-done async-start async-update
batch-norm-grad batch-norm-inference batch-norm-training bitcast broadcast call
cholesky collective-broadcast collective-permute collective-permute-done
collective-permute-start concatenate conditional constant convolution copy-done
copy-start custom-call domain dot dynamic-reshape dynamic-slice
dynamic-update-slice fft fusion gather get-dimension-size get-tuple-element
infeed iota opt-barrier optimization-barrier outfeed pad parameter partition-id
ragged-all-to-all ragged-dot recv recv-done reduce reduce-scatter reduce-window
replica-id reshape reverse rng rng-bit-generator rng-get-and-update-state
scaled-dot scatter select-and-scatter send send-done set-dimension-size slice
sort stochastic-convert topk transpose triangular-solve tuple while
""".split())

# Operand counts of the fixed-arity opcodes.
FIXED_ARITY: dict[str, int] = {op: 1 for op in UNARY_ELEMENTWISE}
FIXED_ARITY.update({op: 2 for op in BINARY_ELEMENTWISE})
FIXED_ARITY.update({op: 3 for op in TERNARY_ELEMENTWISE})
FIXED_ARITY.update({
    "parameter": 0, "constant": 0, "iota": 0, "broadcast": 1, "reshape": 1,
    "bitcast": 1, "transpose": 1, "slice": 1, "reverse": 1, "get-tuple-element": 1,
    "pad": 2, "gather": 2, "dot": 2,
})

# The fewest operands of the variadic opcodes.
MIN_ARITY: dict[str, int] = {
    "dynamic-slice": 1, "dynamic-update-slice": 2, "concatenate": 1,
    "reduce": 2, "reduce-window": 2, "scatter": 3, "select-and-scatter": 3,
    "sort": 1, "map": 1, "while": 1, "conditional": 1,
}

F8_TYPES = ("f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz",
            "f8e4m3", "f8e3m4", "f8e8m0fnu")
F4_TYPES = ("f4e2m1fn",)
# Floats of 8 bits or fewer: no LLVM type; held as their bit pattern in a
# byte and computed in f32.
MINIFLOAT_TYPES = F8_TYPES + F4_TYPES
# Float types XLA computes in f32 and rounds back after every op.
SMALL_FLOAT_TYPES = frozenset({"f16", "bf16", *MINIFLOAT_TYPES})
SUB_BYTE_INT_TYPES = frozenset({"s2", "s4", "u2", "u4"})


def is_f8(element_type: str) -> bool:
    return element_type in F8_TYPES


def is_minifloat(element_type: str) -> bool:
    """f8 and f4 types: held as their codes in a byte (see MINIFLOAT_TYPES)."""
    return element_type in MINIFLOAT_TYPES


# Ops DCE keeps although nothing reads them (XLA's HasSideEffect).
SIDE_EFFECTING = frozenset({
    "send", "send-done", "recv", "recv-done", "infeed", "outfeed", "rng",
    "rng-get-and-update-state", "rng-bit-generator", "after-all",
    "all-reduce", "all-gather", "all-to-all", "collective-permute",
    "reduce-scatter", "all-reduce-start", "all-reduce-done",
    "collective-permute-start", "collective-permute-done", "domain",
    "collective-broadcast", "all-gather-start", "all-gather-done",
    "add-dependency", "opt-barrier", "optimization-barrier", "ragged-all-to-all",
})


def has_side_effect(inst) -> bool:
    """As XLA's HasSideEffect: a while, conditional or call has the side
    effects of the computations it runs (a jax.debug.print in a branch
    keeps the conditional alive although nothing reads its result)."""
    if inst.opcode in SIDE_EFFECTING:
        return True
    if inst.opcode == "custom-call":
        flag = inst.attrs.get("custom_call_has_side_effect")
        return flag is True or str(flag).lower() == "true"
    if inst.opcode in _RUNS_COMPUTATIONS:
        return any(has_side_effect(i) for comp in inst.called_computations
                   for i in comp.instructions)
    return False


_RUNS_COMPUTATIONS = frozenset({"while", "conditional", "call"})
