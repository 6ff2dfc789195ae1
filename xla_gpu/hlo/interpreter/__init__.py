"""A numpy reference interpreter of HLO, with XLA's semantics where numpy's
differ. numpy and ml_dtypes only.

    outputs = evaluate(module, x, y)      # a tuple of numpy arrays

Conventions:

* Values are numpy arrays of the shape's dtype (`pred` -> np.bool_, bf16 and
  f8 -> ml_dtypes floats, s4/u4/s2/u2 -> ml_dtypes ints, one element per
  byte). Tuple results are flattened depth first; a non-tuple result is a
  1-tuple.
* Floating-point ops on f16, bf16 and f8 compute in f32 and round the result
  to the type, op by op (what XLA's CPU and GPU backends do). f32 ops compute
  in f64 and round to f32: exact for +, -, *, /, sqrt (a double rounding
  through f64 is harmless for them) and more accurate than f32 for the
  transcendental functions. Integer ops wrap around. `reduce-precision`
  works on the bits of f16 / bf16 / f32 / f64 values as XLA's emitters
  do (NaNs kept), on f8 / f4 values through f16.
* Computations called per element (reduce, scatter, map, reduce-window)
  are evaluated on whole numpy arrays at once when they are scalar
  computations ("batched"), so large reductions stay fast.
* Reduction order. `reduce` combines the init value with the reduced
  elements in row-major order of the reduced dimensions:
  - reducers that are a single add / multiply / maximum / minimum / and /
    or / xor of the two parameters run strictly sequentially
    (init, x0, x1, ...), via numpy's `ufunc.accumulate` for floating-point
    add/multiply (exact per-step rounding) and `ufunc.reduce` otherwise
    (where the order cannot change the result);
  - any other reducer runs sequentially, batched over the kept elements,
    when at most 1024 elements are reduced into each output; above that it
    runs as an order-preserving pairwise tree (x0 op x1, x2 op x3, ...; the
    partial results combined the same way; finally init op total), which
    assumes the reducer is associative, as XLA does.
  `reduce-window` applies the reducer over each window's elements in
  row-major order, starting from the init value. `scatter` applies the
  combiner to the updates in row-major order of the update elements.
* `sort` runs the bitonic network XLA:GPU's sort runs, calling the
  comparator as it does (swap the pair (i, j) when comp(x[j], x[i])),
  batched over all rows and pairs of a step: always a permutation, also
  for a comparator that is no strict weak order (LT on keys with NaNs),
  where it gives the compiled sort's order. `is_stable=true` breaks ties
  by original index, as XLA's StableSortExpander; `is_stable=false`
  leaves equal elements in the network's order (XLA allows any). `topk`
  and XLA:CPU's "TopK" custom call order like a stable sort (ties: lower
  index first).
* `convolution` follows dim_labels, the window (stride, padding, lhs / rhs
  dilation, reversal), feature_group_count and batch_group_count, summing
  in the compute type. `rng-bit-generator` reproduces XLA's Philox4x32 and
  ThreeFry expansions bit for bit (rng_default is Philox, as on CPU and GPU).
* `custom-call` runs the Python handler registered for its target
  (`register_custom_call(target, fn)`: `fn(*operands, **attributes)`, the
  attributes decoded from a typed-FFI backend_config); XLA's own targets
  TopK, __cublas$gemm / __cublas$lt$matmul and the single-device identities
  Sharding / SPMDFullToShardShape / SPMDShardToFullShape are built in.
  XLA:GPU's cuDNN convolutions (forward, backward input / filter as the
  adjoints of the convolution their window and dim_labels describe,
  bias + activation) are built in too.
* async-start / async-done and copy-start / copy-done pairs of scheduled
  dumps run at the start op.
* Values above MAX_ELEMENTS elements are refused before they are allocated.
* Many devices: `evaluate_devices(module, per_device_args, num_replicas=,
  num_partitions=, timeout=)` runs every device in its own thread;
  replica-id / partition-id give the device's ids and the collectives
  (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
  collective-broadcast, their async pairs, run at the start op) meet in a
  rendezvous (`devices`; what each collective computes:
  `xla_gpu.hlo.collectives`). Under `evaluate` (one device) a collective has
  one participant and is the identity.

The parts: `core` (the evaluator: walks a computation, dispatches each
instruction to its op's handler), `dtypes` (compute types, rounding),
`elementwise`, `data_movement` (slices, pads, concatenates, gather,
scatter...), `reductions` (reduce, reduce-window, select-and-scatter),
`control_flow`, `dot`, `sort`, `convolution`, `rng`, `fft`, `async_ops`,
`collective_ops`, `devices` (many devices and their rendezvous),
`custom_calls` (XLA's own targets; the handlers users register live in
`xla_gpu.ffi.registry`, which this module consults when a custom call runs).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..._lazy import lazy_attributes
from ...errors import ArgumentError
from ..module import HloComputation, HloModule
from .arguments import check_argument as _check_argument, flatten as _flatten
from .core import SUPPORTED_OPCODES, Evaluator
from .custom_calls import register_custom_call, registered_custom_calls, unregister_custom_call
from .devices import evaluate_devices
from .dtypes import MAX_ELEMENTS, Value
from .rng import philox4x32, threefry2x32

__all__ = ["evaluate", "evaluate_devices", "register_custom_call", "unregister_custom_call",
           "registered_custom_calls", "decode_ffi_attributes", "handler_attributes",
           "call_handler", "Evaluator", "MAX_ELEMENTS", "SUPPORTED_OPCODES",
           "philox4x32", "threefry2x32"]

# Custom-call helpers xla_gpu.ffi owns, importable from here as before; the
# FFI package is imported when one is first asked for, not with the
# interpreter.
__getattr__ = lazy_attributes(__name__, {"decode_ffi_attributes": "xla_gpu.ffi.attributes",
                                         "handler_attributes": "xla_gpu.ffi.attributes",
                                         "call_handler": "xla_gpu.ffi.registry"}, globals())


def evaluate(module_or_computation: HloModule | HloComputation,
             *args: np.ndarray) -> tuple[np.ndarray, ...]:
    """Evaluates the ENTRY computation of a module (or the given computation)
    on numpy inputs. Returns the result leaves, depth first.

    Raises ArgumentError (a ValueError) for arguments that do not match the
    parameters (count, shape or dtype; the message names the parameter) and
    HloError for instructions the interpreter cannot evaluate."""
    if isinstance(module_or_computation, HloModule):
        comp = module_or_computation.entry
    elif isinstance(module_or_computation, HloComputation):
        comp = module_or_computation
    else:
        raise ArgumentError("evaluate() takes an HloModule or HloComputation, "
                            f"got {type(module_or_computation).__name__}")
    params = comp.parameters
    if len(args) != len(params):
        raise ArgumentError(f"computation '{comp.name}' takes {len(params)} "
                            f"argument{'s' if len(params) != 1 else ''}, "
                            f"got {len(args)}")
    values = [_check_argument(p, a) for p, a in zip(params, args)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = Evaluator().run(comp, values)
    leaves: list[np.ndarray] = []
    _flatten(result, leaves)
    return tuple(np.array(leaf, copy=True) for leaf in leaves)
