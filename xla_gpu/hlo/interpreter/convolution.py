"""convolution and XLA:GPU's cuDNN convolution custom calls (forward,
backward input / filter, bias + activation), following dim_labels and the
window."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..convolution import (CUDNN_CONV_TARGETS, ConvolutionGeometry, conv_geometry,
                           cudnn_activation, cudnn_backend_config, cudnn_operand_count,
                           forward_dims)
from ..module import HloError, HloInstruction
from .dtypes import Value, check_elements, down, etype_of, up
from .elementwise import convert, erf


def _conv_geometry(inst: HloInstruction, lhs_dims, rhs_dims,
                   out_dims) -> ConvolutionGeometry:
    """The checked geometry of a convolution (or a cuDNN convolution custom
    call) with this (forward) input, kernel and output, refused when its
    dilated, padded input would be too large to hold."""
    geom = conv_geometry(inst, lhs_dims, rhs_dims, out_dims)
    check_elements("the dilated, padded input", _padded_layout(geom)[0])
    return geom


def _padded_layout(geom: ConvolutionGeometry):
    """(the dilated input's canonical shape padded, where the input lands in
    it (dilation strides included), the crop of negative padding)."""
    dil = [max((d - 1) * b + 1, 0) for d, b in zip(geom.in_spatial, geom.lhs_dilation)]
    grown = [max(lo, 0) + d + max(hi, 0)
             for lo, hi, d in zip(geom.pad_lo, geom.pad_hi, dil)]
    place = (slice(None), slice(None)) + tuple(
        slice(max(lo, 0), max(lo, 0) + d, b)
        for lo, d, b in zip(geom.pad_lo, dil, geom.lhs_dilation))
    crop = (slice(None), slice(None)) + tuple(
        slice(max(-lo, 0), g - max(-hi, 0))
        for lo, hi, g in zip(geom.pad_lo, geom.pad_hi, grown))
    return (geom.batch, geom.features, *grown), place, crop


def _padded_input(x: np.ndarray, geom: ConvolutionGeometry) -> np.ndarray:
    """The canonical input dilated and padded (negative padding cropped)."""
    padded_dims, place, crop = _padded_layout(geom)
    buf = np.zeros(padded_dims, x.dtype)
    buf[place] = x
    return buf[crop]


def _windows(geom: ConvolutionGeometry):
    """(kernel offset, the index of the padded input it multiplies)."""
    out = geom.out_spatial
    for k in np.ndindex(*geom.size):
        yield k, (slice(None), slice(None)) + tuple(
            slice(k[d] * geom.rhs_dilation[d],
                  k[d] * geom.rhs_dilation[d] + (out[d] - 1) * geom.stride[d]
                  + 1, geom.stride[d]) for d in range(len(out)))


def _to_canonical(x: np.ndarray, labels) -> np.ndarray:
    major, minor, spatial = labels
    return np.transpose(x, [major, minor, *spatial])


def _from_canonical(x: np.ndarray, labels) -> np.ndarray:
    major, minor, spatial = labels
    return np.transpose(x, np.argsort([major, minor, *spatial]))


def _oriented_kernel(w: np.ndarray, geom: ConvolutionGeometry) -> np.ndarray:
    for d, r in enumerate(geom.reversal):
        if r:
            w = np.flip(w, axis=2 + d)
    return w


def _conv_forward(x: np.ndarray, w: np.ndarray,
                  geom: ConvolutionGeometry) -> np.ndarray:
    """out[n, o, p] = sum over the window and the group's input features
    of the dilated, padded input times the kernel (canonical arrays)."""
    n_in, c_in, i_feat = geom.batch, geom.features, geom.group_features
    n_out, o_feat = geom.out_batch, geom.out_features
    points = math.prod(geom.out_spatial)
    bg, g = geom.batch_groups, geom.groups
    padded = _padded_input(x, geom)
    w = _oriented_kernel(w, geom)
    acc = np.zeros((n_out, o_feat, points), x.dtype)
    if points and acc.size:
        for k, index in _windows(geom):
            v = padded[index].reshape(n_in, c_in, points)
            wk = w[(slice(None), slice(None)) + k]
            if bg > 1:
                part = np.einsum("gncp,goc->ngop",
                                 v.reshape(bg, n_out, c_in, points),
                                 wk.reshape(bg, o_feat // bg, i_feat))
            else:
                part = np.einsum("ngcp,goc->ngop",
                                 v.reshape(n_in, g, i_feat, points),
                                 wk.reshape(g, o_feat // g, i_feat))
            acc += part.reshape(n_out, o_feat, points)
    return acc.reshape(geom.out_dims)


def _conv_backward_input(dy: np.ndarray, w: np.ndarray,
                         geom: ConvolutionGeometry) -> np.ndarray:
    """The adjoint of _conv_forward in its input: the gradient of the
    input given the output's (cuDNN's backward-input convolution)."""
    n_in, c_in, i_feat = geom.batch, geom.features, geom.group_features
    n_out, o_feat = geom.out_batch, geom.out_features
    points = math.prod(geom.out_spatial)
    bg, g = geom.batch_groups, geom.groups
    padded_dims, place, crop = _padded_layout(geom)
    grad_buf = np.zeros(padded_dims, dy.dtype)
    grad = grad_buf[crop]
    w = _oriented_kernel(w, geom)
    dy = dy.reshape(n_out, o_feat, points)
    if points and dy.size:
        for k, index in _windows(geom):
            wk = w[(slice(None), slice(None)) + k]
            if bg > 1:
                part = np.einsum("ngop,goc->gncp",
                                 dy.reshape(n_out, bg, o_feat // bg, points),
                                 wk.reshape(bg, o_feat // bg, i_feat))
            else:
                part = np.einsum("ngop,goc->ngcp",
                                 dy.reshape(n_out, g, o_feat // g, points),
                                 wk.reshape(g, o_feat // g, i_feat))
            grad[index] += part.reshape((n_in, c_in) + geom.out_spatial)
    return np.array(grad_buf[place], copy=True)


def _conv_backward_filter(x: np.ndarray, dy: np.ndarray,
                          geom: ConvolutionGeometry) -> np.ndarray:
    """The adjoint of _conv_forward in its kernel: the gradient of the
    kernel given the input and the output's gradient (cuDNN's
    backward-filter convolution)."""
    n_in, c_in, i_feat = geom.batch, geom.features, geom.group_features
    n_out, o_feat = geom.out_batch, geom.out_features
    points = math.prod(geom.out_spatial)
    bg, g = geom.batch_groups, geom.groups
    padded = _padded_input(x, geom)
    dy = dy.reshape(n_out, o_feat, points)
    dw = np.zeros(geom.kernel_dims, x.dtype)
    if points and dy.size:
        for k, index in _windows(geom):
            v = padded[index].reshape(n_in, c_in, points)
            if bg > 1:
                part = np.einsum("gncp,ngop->goc",
                                 v.reshape(bg, n_out, c_in, points),
                                 dy.reshape(n_out, bg, o_feat // bg, points))
            else:
                part = np.einsum("ngcp,ngop->goc",
                                 v.reshape(n_in, g, i_feat, points),
                                 dy.reshape(n_out, g, o_feat // g, points))
            dw[(slice(None), slice(None)) + k] = part.reshape(o_feat, i_feat)
    return _oriented_kernel(dw, geom)


def in_type(value: np.ndarray, src: str, etype: str) -> np.ndarray:
    """`value` (of type src) converted to `etype`'s compute type."""
    return up(convert(value, src, etype) if src != etype else value, etype)


def _h_convolution(ev, inst, ops, batch):
    lhs, rhs = np.asarray(ops[0]), np.asarray(ops[1])
    out_shape = inst.shape
    geom = _conv_geometry(inst, lhs.shape, rhs.shape, out_shape.dims)
    etype = out_shape.element_type
    x = _to_canonical(in_type(lhs, etype_of(inst, 0), etype), geom.lhs)
    w = _to_canonical(in_type(rhs, etype_of(inst, 1), etype), geom.rhs)
    return down(_from_canonical(_conv_forward(x, w, geom), geom.out), etype)


def custom_cudnn_conv(ev, inst, ops) -> Value:
    """XLA:GPU's cuDNN convolution custom calls. Their window and dim_labels
    describe the forward convolution (input `lhs`, kernel `rhs`, output
    `out` labels): convForward computes it; convBackwardInput takes (output
    gradient, kernel) and returns the input gradient; convBackwardFilter
    takes (input, output gradient) and returns the kernel gradient;
    convBiasActivationForward takes (input, kernel, bias[, side input]) and
    returns act(conv_result_scale * conv + side_input_scale * side + bias).
    The result is a tuple (value, u8 workspace) or the value alone."""
    target = str(inst.attrs.get("custom_call_target"))
    kind = CUDNN_CONV_TARGETS[target]
    config = cudnn_backend_config(inst)
    leaves = inst.shape.leaves()
    result_shape = leaves[0]
    etype = result_shape.element_type
    arrays = [np.asarray(o) for o in ops]
    needed = cudnn_operand_count(kind)
    if len(arrays) not in needed:
        raise HloError(f"{target} takes {' or '.join(map(str, needed))} "
                       f"operands, got {len(arrays)}")
    geom = _conv_geometry(inst, *forward_dims(kind, [a.shape for a in arrays],
                                              result_shape.dims))

    def operand(k: int, labels) -> np.ndarray:
        return _to_canonical(in_type(arrays[k], etype_of(inst, k), etype),
                             labels)
    if kind == "backward_input":
        value = _from_canonical(_conv_backward_input(
            operand(0, geom.out), operand(1, geom.rhs), geom), geom.lhs)
    elif kind == "backward_filter":
        value = _from_canonical(_conv_backward_filter(
            operand(0, geom.lhs), operand(1, geom.out), geom), geom.rhs)
    else:
        value = _conv_forward(operand(0, geom.lhs), operand(1, geom.rhs), geom)
    value = value * float(config.get("conv_result_scale", 1))
    if kind in ("forward", "bias_activation"):
        if kind == "bias_activation":
            bias = in_type(arrays[2], etype_of(inst, 2), etype)
            if bias.shape != (geom.out_features,):
                raise HloError(f"{target}: the bias has shape "
                               f"{list(bias.shape)}, expected "
                               f"[{geom.out_features}] (output features)")
            if len(arrays) == 4:
                side = operand(3, geom.out)
                if side.shape != value.shape:
                    raise HloError(f"{target}: the side input does not have "
                                   "the output's shape")
                value = value + float(config.get("side_input_scale", 0)) * side
            value = value + bias.reshape((1, -1) + (1,) * (value.ndim - 2))
        act = cudnn_activation(inst, config)
        if act == "relu":
            value = np.maximum(value, 0)
        elif act == "relu6":
            value = np.clip(value, 0, 6)
        elif act == "sigmoid":
            value = 1 / (1 + np.exp(-value))
        elif act == "tanh":
            value = np.tanh(value)
        elif act == "elu":
            value = np.where(value > 0, value, np.expm1(value))
        elif act == "leaky_relu":
            alpha = float(config.get("leakyrelu_alpha", 0))
            value = np.where(value > 0, value, alpha * value)
        elif act == "gelu":
            value = 0.5 * value * (1 + erf(value / np.sqrt(2)))
        value = _from_canonical(value, geom.out)
    result = down(value, etype)
    if not inst.shape.is_tuple:
        return result
    return (result,) + tuple(np.zeros(leaf.dims, leaf.dtype)
                             for leaf in leaves[1:])


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "convolution": _h_convolution,
}
