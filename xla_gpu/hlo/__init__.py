"""The HLO front end: the graph (`module`), a parser and printer of HLO
text, the shape verifier, a numpy reference interpreter, and the HLO pass
pipeline (`xla_gpu.hlo.passes`); `graph` holds the iterative walks every
order is built on, `convolution` what a convolution's attributes mean.

Imports only numpy and ml_dtypes (never MLIR): a compiled kernel's expected
outputs can be computed where no compiler is installed.

    from xla_gpu.hlo import parse_module, evaluate
    module = parse_module(text)
    (out,) = evaluate(module, x)
"""

from .interpreter import evaluate
from .module import (HloComputation, HloError, HloInstruction, HloModule,
                     HloParseError, Location)
from .parser import parse_file, parse_module
from .printer import computation_to_text, module_to_text
from .shape import (ELEMENT_TYPES, Shape, bit_width, is_complex, is_float,
                    is_integral, is_signed_int, is_unsigned_int, numpy_dtype)

__all__ = [
    "parse_module", "parse_file", "evaluate", "module_to_text",
    "computation_to_text",
    "HloModule", "HloComputation", "HloInstruction", "HloError",
    "HloParseError", "Location",
    "Shape", "ELEMENT_TYPES", "numpy_dtype", "bit_width", "is_float",
    "is_complex", "is_integral", "is_signed_int", "is_unsigned_int",
]
