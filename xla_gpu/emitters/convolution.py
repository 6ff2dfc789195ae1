"""The direct-convolution emitter: one thread per result element summing
over its window, for the HLO `convolution` and XLA:GPU's cuDNN convolution
custom calls (`__cudnn$convForward`, `$convBackwardInput`,
`$convBackwardFilter`, `$convBiasActivationForward`).

    %out = xla_gpu.loop (%th, %bl)[%v] -> (result index) in #map
             iter_args(%o = %output) {
      %acc = scf.for <each summed variable> iter_args(%a = 0) {
        <positions in the dilated, padded input; in range and on the
         dilation grid -> the product, else 0>
      }
      <scale, side input, bias, activation (cuDNN forward)>
      tensor.insert ... into %o[result index]
    }

Semantics as HLO's convolution (and the reference interpreter), written on
canonical dimensions (batch, feature, spatial...) of the input and output
and (output feature, input feature, spatial...) of the kernel, whatever
dim_labels says:

  forward:  out[n, o, y] = sum over the window k and the group's input
            features c of in[bg(o) * N/B + n, g(o) * C/G + c, x] *
            kernel[o, c, k'] with x * lhs_dilation = y * stride +
            k * rhs_dilation - pad_lo (no term when x is off the dilation
            grid or outside the input), k' = size - 1 - k under window
            reversal, g(o) = o / (O/G) (feature groups), bg(o) = o / (O/B)
            (batch groups);
  backward input (cuDNN): the input's gradient from the output's: for each
            input element, the sum over the window and the group's output
            features of the output gradient at the positions that read it;
  backward filter (cuDNN): the kernel's gradient: for each kernel element,
            the sum over the output's batch and positions of the input
            element it read times the output gradient.

f16/bf16 (and f8) accumulate in f32, other types in their own; operands of
another type are converted to the result's type first (preferred element
type), as the interpreter does. The kernel reads and writes physical
buffers (any layout). XLA:GPU calls cuDNN; this is the correct, direct
fallback XLA's own emitters would write, and its cuDNN custom calls with
it. Large HLO convolutions inside whole programs are lowered to im2col +
gemm by the ConvolutionLowering pass (`hlo.passes.convolution_lowering`);
the small ones, a single convolution fusion (`xla_gpu.compile(...,
fusion=NAME)`) and the cuDNN calls come here (compiled by
`op_kernels.compile_convolution`).
"""

from __future__ import annotations

import math as pymath
from dataclasses import dataclass
from typing import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, math, scf, tensor
from mlir.dialects import complex as complex_ops

from ..analysis.fusion import Fusion
from ..errors import HloError
from ..hlo import HloComputation, HloInstruction, Shape
from ..hlo.convolution import (CUDNN_CONV_TARGETS, ConvolutionGeometry, conv_geometry,
                               cudnn_activation, cudnn_backend_config, cudnn_operand_count,
                               forward_dims)
from ..dialects import xla_gpu
from ..hlo.shape import bit_width, is_complex, is_float
from .base import KernelEmitter, LaunchDims
from .elemental import convert
from .loop_config import loop_config, thread_to_output_map
from .partitioner import sanitize
from .types import check_supported, complex_part, element_type

__all__ = ["ConvolutionEmitter", "ConvolutionGeometry", "convolution_kernel_fusion",
           "CUDNN_CONV_TARGETS", "conv_geometry"]

# -- the kernel's description ---------------------------------------------------------


@dataclass(frozen=True)
class ConvolutionKernelConfig:
    """What one convolution kernel computes. kind: forward,
    backward_input, backward_filter or bias_activation. operand_shapes /
    result_shape: logical shapes with layouts (the kernel's buffers are in
    their physical order). The epilogue: result scale, side-input scale,
    activation (cuDNN)."""
    kind: str
    operand_shapes: tuple[Shape, ...]
    result_shape: Shape
    result_scale: float = 1.0
    side_input_scale: float = 0.0
    activation: str = "none"
    leaky_relu_alpha: float = 0.0


def kernel_config(inst: HloInstruction) -> ConvolutionKernelConfig:
    """The kernel of an HLO convolution or a cuDNN convolution custom call
    (checked: shapes, window, groups, operand count, activation)."""
    if inst.opcode == "convolution":
        kind, config = "forward", {}
    elif inst.opcode == "custom-call" and \
            inst.attrs.get("custom_call_target") in CUDNN_CONV_TARGETS:
        kind = CUDNN_CONV_TARGETS[inst.attrs["custom_call_target"]]
        config = cudnn_backend_config(inst)
    else:
        raise inst.error("not a convolution")
    needed = cudnn_operand_count(kind)
    if len(inst.operands) not in needed:
        raise inst.error(f"takes {' or '.join(map(str, needed))} operands, got "
                         f"{len(inst.operands)}")
    result = inst.shape.leaves()[0]
    shapes = tuple(o.shape for o in inst.operands)
    for s in (*shapes, result):
        if s.is_tuple:
            raise inst.error(f"a convolution operand or result is a tuple ({s})")
        check_supported(s, inst)
    if kind != "forward" and (is_complex(result.element_type) or
                              any(is_complex(s.element_type) for s in shapes)):
        raise inst.unsupported(f"complex {kind} convolutions are not supported")
    dims = [s.dims for s in shapes]
    geom = conv_geometry(inst, *forward_dims(kind, dims, result.dims))
    if kind == "bias_activation":
        if tuple(dims[2]) != (geom.out_features,):
            raise inst.error(f"the bias is {shapes[2]}, expected [{geom.out_features}] "
                             "(output features)")
        if len(dims) == 4 and tuple(dims[3]) != tuple(result.dims):
            raise inst.error("the side input does not have the output's shape")
    activation = cudnn_activation(inst, config)
    if activation != "none" and kind not in ("forward", "bias_activation"):
        raise inst.error(f"an activation on a {kind} convolution")
    return ConvolutionKernelConfig(
        kind, shapes, result, float(config.get("conv_result_scale", 1) or 0),
        float(config.get("side_input_scale", 0) or 0), activation,
        float(config.get("leakyrelu_alpha", 0) or 0))


def _accumulator_type(t: str) -> str:
    if is_float(t):
        return "f32" if bit_width(t) < 32 else t
    if t == "pred":
        return "s32"
    return t


# -- the emitter ---------------------------------------------------------------------


def _index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


class ConvolutionEmitter(KernelEmitter):
    """One thread per element of the result (the loop emitter's launch),
    a loop nest over the summed variables."""

    name = "convolution"

    def __init__(self, fusion: Fusion):
        super().__init__(fusion)
        if len(fusion.roots) != 1:
            raise HloError(f"fusion '{fusion.name}': the convolution emitter needs the "
                           "convolution as the only root")
        self.root = root = fusion.roots[0]
        for op in root.operands:
            if op.opcode != "parameter":
                raise root.error("the convolution emitter reads fusion parameters only "
                                 f"('{op.name}' is a {op.opcode})")
        config = fusion.config
        if config is None:   # a convolution fusion: row-major logical arrays
            config = kernel_config(root)
        self.config: ConvolutionKernelConfig = config
        c = config
        self.geom = conv_geometry(root, *forward_dims(
            c.kind, [s.dims for s in c.operand_shapes], c.result_shape.dims))
        self.out_physical = c.result_shape.physical_shape()
        self.loop = loop_config(list(self.out_physical.dims), [root],
                                [c.result_shape.element_type])

    def launch_dims(self) -> LaunchDims:
        return LaunchDims(self.loop.threads, self.loop.blocks)

    def root_groups(self):
        return []

    def is_excluded(self, inst) -> bool:
        return inst is self.root

    # -- reading operands ------------------------------------------------------------
    def _read(self, params, k: int, logical: Sequence[ir.Value]) -> ir.Value:
        """Operand k at a logical index, converted to the accumulator type."""
        shape = self.config.operand_shapes[k]
        physical = [logical[d] for d in shape.major_to_minor]
        value = tensor.extract(params[k], physical)
        return convert(convert(value, shape.element_type, self._compute),
                       self._compute, self._acc)

    def emit_entry(self, params, outputs, thread_id, block_id):
        c = self.config
        result = c.result_shape
        self._compute = result.element_type        # operands are converted to it
        self._acc = _accumulator_type(result.element_type)
        if result.element_type == "pred":
            self._compute = "pred"
        attr = self.index_map(thread_to_output_map(self.loop, list(self.out_physical.dims)))
        loop = xla_gpu.build_loop(attr, [thread_id, block_id], [outputs[0]])
        block = loop.region.blocks[0]
        rank = self.out_physical.rank
        order = result.major_to_minor
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            physical = args[1:1 + rank]
            it = args[1 + rank]
            logical: list = [None] * rank
            for p, d in enumerate(order):
                logical[d] = physical[p]
            if c.kind == "backward_input":
                value = self._backward_input(params, logical)
            elif c.kind == "backward_filter":
                value = self._backward_filter(params, logical)
            else:
                value = self._forward(params, logical)
            value = self._epilogue(params, logical, value)
            value = convert(value, self._acc, result.element_type)
            xla_gpu.YieldOp([tensor.insert(value, it, physical)])
        return list(loop.results)

    # -- arithmetic in the accumulator type ------------------------------------------------
    # Complex convolutions (c64 / c128, HLO's forward convolution) sum
    # complex products, as XLA:CPU does: the complex dialect's ops, lowered
    # to arith on the parts with the elementwise complex ops.
    def _zero(self) -> ir.Value:
        return self._const(0)

    def _mul(self, a, b):
        if is_complex(self._acc):
            return complex_ops.mul(a, b)
        return arith.mulf(a, b) if is_float(self._acc) else arith.muli(a, b)

    def _add(self, a, b):
        if is_complex(self._acc):
            return complex_ops.add(a, b)
        return arith.addf(a, b) if is_float(self._acc) else arith.addi(a, b)

    def _sum(self, ranges: Sequence[int], body: Callable[[list], ir.Value]) -> ir.Value:
        """sum over the variables of `ranges` (an scf.for nest) of body(ivs)."""
        def nest(level: int, ivs: list, acc: ir.Value) -> ir.Value:
            if level == len(ranges):
                return self._add(acc, body(ivs))
            loop = scf.ForOp(_index(0), _index(ranges[level]), _index(1), [acc])
            with ir.InsertionPoint(loop.body):
                inner = nest(level + 1, ivs + [loop.induction_variable],
                             loop.inner_iter_args[0])
                scf.YieldOp([inner])
            return loop.results[0]
        return nest(0, [], self._zero())

    def _on_grid(self, numerator: ir.Value, step: int, limit: int):
        """(numerator / step clamped into [0, limit), whether numerator is a
        multiple of step >= 0 with that quotient < limit)."""
        zero = _index(0)
        ok = arith.cmpi(arith.CmpIPredicate.sge, numerator, zero)
        q = numerator
        if step > 1:
            rem = arith.remsi(numerator, _index(step))
            ok = arith.andi(ok, arith.cmpi(arith.CmpIPredicate.eq, rem, zero))
            q = arith.divsi(numerator, _index(step))
        ok = arith.andi(ok, arith.cmpi(arith.CmpIPredicate.slt, q, _index(limit)))
        clamped = arith.minsi(arith.maxsi(q, zero), _index(max(limit - 1, 0)))
        return clamped, ok

    def _input_position(self, y, k):
        """The input's spatial index that output position `y` reads at
        window position `k` (x * lhs_dilation = y * stride + k *
        rhs_dilation - pad_lo), clamped, and whether it exists (on the
        dilation grid, inside the input)."""
        g = self.geom
        ok, x = None, []
        for d in range(len(k)):
            p = arith.addi(arith.muli(y[d], _index(g.stride[d])),
                           arith.muli(k[d], _index(g.rhs_dilation[d])))
            p = arith.subi(p, _index(g.pad_lo[d]))
            xd, okd = self._on_grid(p, g.lhs_dilation[d], g.in_spatial[d])
            ok = self._and(ok, okd)
            x.append(xd)
        return x, ok

    def _guarded(self, ok, value):
        return arith.select(ok, value, self._zero()) if ok is not None else value

    @staticmethod
    def _and(a, b):
        return b if a is None else arith.andi(a, b)

    def _place(self, labels, batch, feature, spatial, rank):
        index: list = [None] * rank
        index[labels[0]] = batch
        index[labels[1]] = feature
        for d, v in zip(labels[2], spatial):
            index[d] = v
        return index

    # -- the three sums --------------------------------------------------------------------
    def _groups_of_output_feature(self, o):
        g = self.geom
        fg = arith.divui(o, _index(g.out_features // g.groups)) if g.groups > 1 else None
        bg = arith.divui(o, _index(g.out_features // g.batch_groups)) \
            if g.batch_groups > 1 else None
        return fg, bg

    def _kernel_spatial(self, k: Sequence[ir.Value]) -> list:
        g = self.geom
        return [arith.subi(_index(g.size[d] - 1), k[d]) if g.reversal[d] else k[d]
                for d in range(len(k))]

    def _forward(self, params, out_index):
        g = self.geom
        rank = len(out_index)
        n, o = out_index[g.out[0]], out_index[g.out[1]]
        y = [out_index[d] for d in g.out[2]]
        fg, bg = self._groups_of_output_feature(o)
        batch = n if bg is None else arith.addi(arith.muli(bg, _index(g.out_batch)), n)
        base_feature = None if fg is None else arith.muli(fg, _index(g.group_features))

        def term(ivs):
            c, k = ivs[0], ivs[1:]
            x, ok = self._input_position(y, k)
            feature = c if base_feature is None else arith.addi(base_feature, c)
            a = self._read(params, 0, self._place(g.lhs, batch, feature, x, rank))
            w = self._read(params, 1, self._place(g.rhs, o, c, self._kernel_spatial(k), rank))
            return self._guarded(ok, self._mul(a, w))

        return self._sum([g.group_features, *g.size], term)

    def _backward_input(self, params, in_index):
        g = self.geom
        rank = len(in_index)
        nb, ci = in_index[g.lhs[0]], in_index[g.lhs[1]]
        x = [in_index[d] for d in g.lhs[2]]
        per_group = g.out_features // (g.groups * g.batch_groups)
        if g.groups > 1:
            group = arith.divui(ci, _index(g.group_features))
            c = arith.remui(ci, _index(g.group_features))
        else:
            group, c = None, ci
        if g.batch_groups > 1:
            group = arith.divui(nb, _index(g.out_batch))
            n = arith.remui(nb, _index(g.out_batch))
        else:
            n = nb
        base_o = None if group is None else arith.muli(group, _index(per_group))

        def term(ivs):
            oo, k = ivs[0], ivs[1:]
            o = oo if base_o is None else arith.addi(base_o, oo)
            ok, y = None, []
            for d in range(len(k)):
                p = arith.addi(arith.muli(x[d], _index(g.lhs_dilation[d])), _index(g.pad_lo[d]))
                p = arith.subi(p, arith.muli(k[d], _index(g.rhs_dilation[d])))
                yd, okd = self._on_grid(p, g.stride[d], g.out_spatial[d])
                ok = self._and(ok, okd)
                y.append(yd)
            dy = self._read(params, 0, self._place(g.out, n, o, y, rank))
            w = self._read(params, 1, self._place(g.rhs, o, c, self._kernel_spatial(k), rank))
            return self._guarded(ok, self._mul(dy, w))

        return self._sum([per_group, *g.size], term)

    def _backward_filter(self, params, kernel_index):
        g = self.geom
        rank = len(kernel_index)
        o, c = kernel_index[g.rhs[0]], kernel_index[g.rhs[1]]
        stored = [kernel_index[d] for d in g.rhs[2]]
        k = self._kernel_spatial(stored)   # the window position it multiplies
        fg, bg = self._groups_of_output_feature(o)
        feature = c if fg is None else arith.addi(arith.muli(fg, _index(g.group_features)), c)

        def term(ivs):
            n, y = ivs[0], ivs[1:]
            batch = n if bg is None else arith.addi(arith.muli(bg, _index(g.out_batch)), n)
            x, ok = self._input_position(y, k)
            a = self._read(params, 0, self._place(g.lhs, batch, feature, x, rank))
            dy = self._read(params, 1, self._place(g.out, n, o, y, rank))
            return self._guarded(ok, self._mul(a, dy))

        return self._sum([g.out_batch, *g.out_spatial], term)

    # -- the cuDNN epilogue ----------------------------------------------------------------
    def _const(self, v: float) -> ir.Value:
        t = element_type(self._acc)
        if is_complex(self._acc):
            part = element_type(complex_part(self._acc))
            zero = arith.constant(part, ir.FloatAttr.get(part, 0.0))
            return complex_ops.create_(t, arith.constant(part, ir.FloatAttr.get(part, float(v))),
                                       zero)
        if is_float(self._acc):
            return arith.constant(t, ir.FloatAttr.get(t, float(v)))
        return arith.constant(t, int(v))

    def _epilogue(self, params, out_index, value):
        c = self.config
        if c.result_scale != 1.0:
            value = self._mul(value, self._const(c.result_scale))
        if c.kind not in ("forward", "bias_activation"):
            return value
        if c.kind == "bias_activation":
            if len(c.operand_shapes) == 4 and c.side_input_scale != 0:
                side = self._read(params, 3, out_index)
                value = self._add(value, self._mul(self._const(c.side_input_scale), side))
            o = out_index[self.geom.out[1]]
            value = self._add(value, self._read(params, 2, [o]))
        act = c.activation
        if act == "none":
            return value
        if not is_float(self._acc):
            raise self.root.error(f"activation {act} on integers")
        zero, one = self._const(0), self._const(1)
        if act == "relu":
            return arith.maximumf(value, zero)
        if act == "relu6":
            return arith.minimumf(arith.maximumf(value, zero), self._const(6))
        if act == "sigmoid":
            return arith.divf(one, arith.addf(one, math.exp(arith.negf(value))))
        if act == "tanh":
            return math.tanh(value)
        positive = arith.cmpf(arith.CmpFPredicate.OGT, value, zero)
        if act == "elu":
            return arith.select(positive, value, math.expm1(value))
        if act == "leaky_relu":
            return arith.select(positive, value,
                                arith.mulf(self._const(c.leaky_relu_alpha), value))
        if act == "gelu":
            half = self._const(0.5)
            scaled = arith.mulf(value, self._const(1 / pymath.sqrt(2)))
            return arith.mulf(arith.mulf(half, value), arith.addf(one, math.erf(scaled)))
        raise self.root.error(f"unsupported activation {act}")


# -- the kernel's fusion ---------------------------------------------------------------


def convolution_kernel_fusion(inst: HloInstruction, name: str | None = None) -> Fusion:
    """The kernel's fusion: the operands as parameters in physical order
    and the convolution (its value only, no cuDNN scratch) as the root."""
    config = kernel_config(inst)
    params = [HloInstruction(f"p{k}", "parameter", o.shape.physical_shape(), [], {}, None, k,
                             o.location) for k, o in enumerate(inst.operands)]
    attrs = {k: v for k, v in inst.attrs.items()
             if k not in ("control-predecessors", "metadata")}
    root = HloInstruction(inst.name, inst.opcode, config.result_shape.physical_shape(), params,
                          attrs, None, None, inst.location)
    kernel_name = sanitize(name or inst.name)
    comp = HloComputation(f"{kernel_name}_computation", params + [root], root, False,
                          inst.location)
    for p in params:
        p.parent, p.users = comp, [root]
    root.parent = comp
    return Fusion(kernel_name, comp, [root], [root], "convolution", None, config=config)
