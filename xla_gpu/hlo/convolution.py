"""What a convolution's attributes say, read and checked once for every
consumer (the reference interpreter, the convolution emitter, the im2col
lowering of whole programs): dim_labels, the window and the feature and
batch groups as a `ConvolutionGeometry`, and XLA:GPU's cuDNN convolution
custom calls (the kind each target computes, its backend_config, which
operand holds the forward convolution's input, kernel and output, the
activation). No numpy, no MLIR.

Canonical dimensions: the input is (batch N, feature C, spatial...), the
kernel (output feature O, input feature C / G, window...), the output
(batch N / B, feature O, spatial...), for G feature groups and B batch
groups, whatever dim_labels says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .module import HloInstruction

__all__ = ["ConvolutionGeometry", "conv_geometry", "parse_dim_labels", "CUDNN_CONV_TARGETS",
           "CUDNN_ACTIVATIONS", "cudnn_backend_config", "cudnn_activation",
           "cudnn_operand_count", "forward_dims"]

# Positions of (major, minor, spatial...) dimensions in an array's logical dims.
DimPositions = tuple[int, int, tuple[int, ...]]

CUDNN_CONV_TARGETS = {
    "__cudnn$convForward": "forward",
    "__cudnn$convBackwardInput": "backward_input",
    "__cudnn$convBackwardFilter": "backward_filter",
    "__cudnn$convBiasActivationForward": "bias_activation",
}
# stream_executor's dnn::ActivationMode by name, and the names of its numbers.
CUDNN_ACTIVATIONS = {"kNone": "none", "kSigmoid": "sigmoid", "kRelu": "relu",
                     "kRelu6": "relu6", "kTanh": "tanh", "kElu": "elu",
                     "kLeakyRelu": "leaky_relu", "kGeluExact": "gelu"}
_ACTIVATION_NUMBERS = {"0": "kNone", "1": "kSigmoid", "2": "kRelu", "3": "kRelu6",
                       "5": "kTanh", "7": "kElu", "8": "kLeakyRelu", "9": "kGeluExact"}


def parse_dim_labels(text: Any, rank: int, inst: HloInstruction
                     ) -> tuple[DimPositions, DimPositions, DimPositions]:
    """dim_labels=b01f_01io->b01f as (batch, feature, spatial...) positions
    of the input, (output feature, input feature, spatial...) of the
    kernel and (batch, feature, spatial...) of the output."""
    if not isinstance(text, str) or "->" not in text or "_" not in text.split("->")[0]:
        raise inst.error(f"convolution needs dim_labels=<lhs>_<rhs>-><out>, got {text!r}")
    lhs, rest = text.split("_", 1)
    rhs, out = rest.split("->", 1)
    nsp = rank - 2
    parsed = []
    for labels, (major, minor), what in ((lhs, "bf", "input"), (rhs, "oi", "kernel"),
                                         (out, "bf", "output")):
        wanted = sorted([major, minor] + [str(i) for i in range(nsp)])
        if len(labels) != rank or sorted(labels) != wanted:
            raise inst.error(f"dim_labels '{text}': the {what} labels '{labels}' do not "
                             f"name {major}, {minor} and spatial dimensions "
                             f"0..{nsp - 1} of a rank-{rank} array")
        parsed.append((labels.index(major), labels.index(minor),
                       tuple(labels.index(str(i)) for i in range(nsp))))
    return parsed[0], parsed[1], parsed[2]


@dataclass(frozen=True)
class ConvolutionGeometry:
    """A convolution's dimensions and window, canonical (see the module
    docstring). `lhs`, `rhs`, `out`: (major, minor, spatial positions) of
    the input (batch, feature), kernel (output feature, input feature) and
    output (batch, feature) in their logical dims."""
    lhs: DimPositions
    rhs: DimPositions
    out: DimPositions
    batch: int            # input batch N
    features: int         # input features C
    out_batch: int        # N / batch groups
    out_features: int     # O
    group_features: int   # kernel input features C / G
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_lo: tuple[int, ...]
    pad_hi: tuple[int, ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    reversal: tuple[int, ...]
    groups: int
    batch_groups: int

    @property
    def in_dims(self) -> tuple[int, ...]:
        """The input's canonical dims: (N, C, spatial...)."""
        return (self.batch, self.features, *self.in_spatial)

    @property
    def kernel_dims(self) -> tuple[int, ...]:
        """The kernel's canonical dims: (O, C / G, window...)."""
        return (self.out_features, self.group_features, *self.size)

    @property
    def out_dims(self) -> tuple[int, ...]:
        """The output's canonical dims: (N / B, O, spatial...)."""
        return (self.out_batch, self.out_features, *self.out_spatial)


def _window_field(window: dict, key: str, default, nsp: int,
                  inst: HloInstruction) -> tuple:
    """One field of the window (`default` in every dimension when absent),
    as integers: pairs of them for `pad`."""
    value = window.get(key, (default,) * nsp)
    try:
        if key == "pad":
            return tuple((int(lo), int(hi)) for lo, hi in value)
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise inst.error(f"window {key}={value!r} is not a list of integers") from None


def conv_geometry(inst: HloInstruction, lhs_dims: Sequence[int], rhs_dims: Sequence[int],
                  out_dims: Sequence[int]) -> ConvolutionGeometry:
    """Checks and canonicalizes the convolution `inst` describes (its
    dim_labels, window and groups) for a (forward) input, kernel and output
    of these logical dims; raises HloError naming `inst` for anything that
    does not fit."""
    rank = len(lhs_dims)
    if rank < 2 or len(rhs_dims) != rank or len(out_dims) != rank:
        raise inst.error(f"convolution of ranks {len(lhs_dims)}, {len(rhs_dims)} -> "
                         f"{len(out_dims)}: all must be the same, at least 2")
    lhs, rhs, out = parse_dim_labels(inst.attrs.get("dim_labels"), rank, inst)
    nsp = rank - 2
    window = inst.attrs.get("window") or {}
    if not isinstance(window, dict):
        raise inst.error("convolution needs window={size=...}")
    if nsp and "size" not in window:
        raise inst.error(f"the window has no size for the {nsp} spatial dimensions")
    size = _window_field(window, "size", 1, nsp, inst)
    stride = _window_field(window, "stride", 1, nsp, inst)
    pad = _window_field(window, "pad", (0, 0), nsp, inst)
    lhs_dil = _window_field(window, "lhs_dilate", 1, nsp, inst)
    rhs_dil = _window_field(window, "rhs_dilate", 1, nsp, inst)
    reversal = _window_field(window, "rhs_reversal", 0, nsp, inst)
    if any(len(t) != nsp for t in (size, stride, pad, lhs_dil, rhs_dil, reversal)):
        raise inst.error(f"the window has fields of another rank than the {nsp} spatial "
                         "dimensions")
    if any(v < 1 for v in stride + lhs_dil + rhs_dil):
        raise inst.error("window strides and dilations must be >= 1")
    try:
        groups = int(inst.attrs.get("feature_group_count", 1))
        batch_groups = int(inst.attrs.get("batch_group_count", 1))
    except (TypeError, ValueError):
        raise inst.error("feature_group_count and batch_group_count must be integers") \
            from None
    if groups < 1 or batch_groups < 1:
        raise inst.error("feature_group_count and batch_group_count must be >= 1")
    n, c = lhs_dims[lhs[0]], lhs_dims[lhs[1]]
    o, i = rhs_dims[rhs[0]], rhs_dims[rhs[1]]
    if tuple(rhs_dims[d] for d in rhs[2]) != size:
        raise inst.error(f"kernel spatial dims {[rhs_dims[d] for d in rhs[2]]} do not match "
                         f"the window size {list(size)}")
    if i * groups != c or o % groups:
        raise inst.error(f"feature_group_count={groups}: {c} input features, kernel input "
                         f"features {i}, {o} output features do not divide into groups")
    if n % batch_groups or o % batch_groups:
        raise inst.error(f"batch_group_count={batch_groups} does not divide the batch {n} "
                         f"and the output features {o}")
    out_n, out_o = out_dims[out[0]], out_dims[out[1]]
    if out_n != n // batch_groups or out_o != o:
        raise inst.error(f"the output {list(out_dims)} does not have batch "
                         f"{n // batch_groups} and {o} features")
    in_sp = tuple(lhs_dims[d] for d in lhs[2])
    out_sp = tuple(out_dims[d] for d in out[2])
    for d in range(nsp):
        dilated = (in_sp[d] - 1) * lhs_dil[d] + 1 if in_sp[d] else 0
        extent = dilated + pad[d][0] + pad[d][1]
        span = (size[d] - 1) * rhs_dil[d] + 1
        expect = (extent - span) // stride[d] + 1 if extent >= span else 0
        if expect != out_sp[d]:
            raise inst.error(f"spatial dimension {d}: the window gives {expect} outputs, "
                             f"the result has {out_sp[d]}")
    return ConvolutionGeometry(lhs, rhs, out, n, c, out_n, o, i, in_sp, out_sp, size, stride,
                               tuple(p[0] for p in pad), tuple(p[1] for p in pad), lhs_dil,
                               rhs_dil, reversal, groups, batch_groups)


# -- cuDNN convolution custom calls ---------------------------------------------------


def cudnn_backend_config(inst: HloInstruction) -> dict:
    """The cudnn_conv_backend_config of a cuDNN convolution custom call
    (or the backend_config itself when it is not nested); {} when absent."""
    config = inst.backend_config()
    inner = config.get("cudnn_conv_backend_config", config)
    return inner if isinstance(inner, dict) else {}


def cudnn_operand_count(kind: str) -> tuple[int, ...]:
    """How many operands a cuDNN convolution of `kind` may take: (input,
    kernel) or their gradients' sources, plus bias and an optional side
    input for bias_activation."""
    return (3, 4) if kind == "bias_activation" else (2,)


def forward_dims(kind: str, operand_dims: Sequence[Sequence[int]], result_dims: Sequence[int]):
    """(input, kernel, output) dims of the forward convolution that a
    cuDNN convolution of `kind` belongs to: backward_input takes (output
    gradient, kernel) and returns the input's; backward_filter takes
    (input, output gradient) and returns the kernel's."""
    if kind == "backward_input":
        return result_dims, operand_dims[1], operand_dims[0]
    if kind == "backward_filter":
        return operand_dims[0], result_dims, operand_dims[1]
    return operand_dims[0], operand_dims[1], result_dims


def cudnn_activation(inst: HloInstruction, config: dict) -> str:
    """The activation a cuDNN convolution applies ("none", "relu", ...),
    from activation_mode given by name or number."""
    mode = str(config.get("activation_mode", "kNone"))
    mode = _ACTIVATION_NUMBERS.get(mode, mode)
    if mode not in CUDNN_ACTIVATIONS:
        raise inst.unsupported(f"activation_mode '{mode}' is not supported")
    return CUDNN_ACTIVATIONS[mode]
