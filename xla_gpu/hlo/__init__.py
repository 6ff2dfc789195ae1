"""The HLO front end: the graph (`module`), a parser and printer of HLO
text, the shape verifier, a numpy reference interpreter, and the HLO pass
pipeline (`xla_gpu.hlo.passes`); `graph` holds the iterative walks every
order is built on, `convolution` what a convolution's attributes mean.

Imports only numpy and ml_dtypes (never MLIR): a compiled kernel's expected
outputs can be computed where no compiler is installed. The names below are
loaded from their modules when first used.

    from xla_gpu.hlo import parse_module, evaluate
    module = parse_module(text)
    (out,) = evaluate(module, x)
"""

from __future__ import annotations

from .._lazy import lazy_attributes

# What the package exports, by module: imported when first used, so that
# the runtime (which needs only `shape`) and a cache hit never load the
# parser or the interpreter (nor ml_dtypes).
_EXPORTS = {
    "evaluate": "interpreter", "evaluate_devices": "interpreter",
    "HloComputation": "module", "HloError": "module", "HloInstruction": "module",
    "HloModule": "module", "HloParseError": "module", "Location": "module",
    "parse_file": "parser", "parse_module": "parser",
    "computation_to_text": "printer", "module_to_text": "printer",
    "ELEMENT_TYPES": "shape", "Shape": "shape", "bit_width": "shape",
    "is_complex": "shape", "is_float": "shape", "is_integral": "shape",
    "is_signed_int": "shape", "is_unsigned_int": "shape", "numpy_dtype": "shape",
}

__getattr__ = lazy_attributes(__name__, {name: f".{module}" for name, module in _EXPORTS.items()},
                              globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "parse_module", "parse_file", "evaluate", "evaluate_devices", "module_to_text",
    "computation_to_text",
    "HloModule", "HloComputation", "HloInstruction", "HloError",
    "HloParseError", "Location",
    "Shape", "ELEMENT_TYPES", "numpy_dtype", "bit_width", "is_float",
    "is_complex", "is_integral", "is_signed_int", "is_unsigned_int",
]
