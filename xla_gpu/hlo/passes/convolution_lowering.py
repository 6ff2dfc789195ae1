"""ConvolutionLowering: large convolutions as kernels plus a GEMM (im2col),
for whole programs on both targets.

XLA:GPU calls cuDNN for a convolution. Here a convolution of at least
DIRECT_CONVOLUTION_MACS multiply-adds becomes (smaller ones stay, and run
as the direct-convolution kernel of `emitters.convolution`):

  1. an im2col kernel: the input transposed to [N, spatial..., C], padded
     (edge padding, and interior padding for lhs dilation), and for every
     kernel position the strided window slice, gathered into patches
     [N, out_spatial..., window..., C];
  2. a kernel relayout of the filter to [window..., I, O] (skipped when the
     filter already is in that order);
  3. a gemm contracting (window..., C) with (window..., I);
  4. a kernel putting the product into the output's dimension order and
     layout (a bitcast when it already is).

feature_group_count splits C and O into groups that become a batch
dimension of the gemm; batch_group_count splits the input batch and O the
same way. rhs_reversal reverses the window order; rhs dilation spaces the
window positions. Semantics as HLO's convolution (and the reference
interpreter): out[n, o, p] = sum over window w and the group's input
features c of padded_dilated_input[n, c, p * stride + w * rhs_dilation] *
kernel[o, c, w].

The patches are gathered as one strided slice per window position, or,
when the output has fewer positions than the window (a filter gradient,
whose window spans the image), one window-sized slice per output
position, so that the im2col kernel compares each element against few
concatenated pieces. On the cpu target (`emulates_grid`) nearly every
convolution is lowered (HOST_DIRECT_CONVOLUTION_MACS), and an input stored
batch-minor (jax's filter gradients, f01b) is gathered in its own order as
[C, window..., out..., N] against the kernel as [I, window..., O]: the gemm
contracts the major dimensions (BLAS takes the transposed operand as it
is) and writes [out..., N, O], which is the filter gradient's 01bf layout.

The new instructions carry metadata op_type "xla_gpu.convolution" and the
convolution's name, so that thunk emission groups their thunks into one
convolution thunk.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from ..convolution import ConvolutionGeometry, conv_geometry
from ..module import HloComputation, HloInstruction, HloModule
from ..shape import Shape
from .pipeline import HloPass
from .util import program_computations

__all__ = ["ConvolutionLowering", "lower_convolution", "lowers_to_gemm",
           "CONVOLUTION_OP_TYPE", "DIRECT_CONVOLUTION_MACS", "HOST_DIRECT_CONVOLUTION_MACS"]

CONVOLUTION_OP_TYPE = "xla_gpu.convolution"
# Multiply-adds below which a convolution runs as one direct kernel (no
# temporaries, as XLA's cuDNN call) rather than im2col + gemm (a patch matrix
# of input elements x window in temporary memory, but the gemm's speed).
DIRECT_CONVOLUTION_MACS = 1 << 24
# The same threshold where the grid is emulated on the host (the cpu
# target): there the direct kernel runs a thread's whole window serially
# at well under a multiply-add a nanosecond, 20-50x slower than BLAS on the
# patch matrix, so only tiny convolutions stay direct.
HOST_DIRECT_CONVOLUTION_MACS = 1 << 16


class ConvolutionLowering(HloPass):
    """Lowers every convolution of the program's sequential computations
    (the ENTRY, loop bodies and conditions, branches, called computations)
    that `lowers_to_gemm` to im2col + gemm; fusion bodies are left alone.
    `emulates_grid`: for the cpu target (HOST_DIRECT_CONVOLUTION_MACS)."""
    name = "convolution-lowering"

    def __init__(self, emulates_grid: bool = False):
        self.emulates_grid = emulates_grid

    def run(self, module: HloModule) -> bool:
        changed = False
        for comp in program_computations(module):
            for conv in list(comp.instructions):
                if conv.opcode != "convolution" or conv.parent is not comp or \
                        not lowers_to_gemm(conv, self.emulates_grid):
                    continue
                created, result, computations = lower_convolution(
                    conv, *conv.operands, unique=module.unique_name,
                    unique_comp=module.unique_computation_name,
                    batch_minor_patches=self.emulates_grid)
                for computation in computations:
                    module.add_computation(computation, before=comp, unique=False)
                for inst in created:
                    comp.add_instruction(inst, keep_name=True)
                conv.replace_with(result)
                changed = True
        return changed


def lowers_to_gemm(inst: HloInstruction, emulates_grid: bool = False) -> bool:
    """Whether an HLO convolution becomes im2col + gemm: large ones, where
    the gemm's throughput pays for the patch matrix (`emulates_grid`: on
    the cpu target, where that is nearly all)."""
    lhs, rhs = inst.operands
    geom = conv_geometry(inst, lhs.shape.dims, rhs.shape.dims, inst.shape.dims)
    window = 1
    for size in geom.size:
        window *= size
    macs = inst.shape.num_elements * window * geom.group_features
    return macs >= (HOST_DIRECT_CONVOLUTION_MACS if emulates_grid else DIRECT_CONVOLUTION_MACS)


class _Body:
    """Instructions of one fused computation being built."""

    def __init__(self):
        self.instructions: list[HloInstruction] = []
        self.count = 0

    def add(self, opcode: str, shape: Shape, operands=(), **attrs) -> HloInstruction:
        self.count += 1
        inst = HloInstruction(f"{opcode.replace('-', '_')}.{self.count}", opcode, shape,
                              list(operands), dict(attrs))
        self.instructions.append(inst)
        return inst

    def parameter(self, number: int, shape: Shape) -> HloInstruction:
        inst = HloInstruction(f"param_{number}", "parameter", shape, [], {}, None, number)
        self.instructions.append(inst)
        return inst

    def zero(self, element_type: str) -> HloInstruction:
        shape = Shape(element_type, ())
        inst = HloInstruction(f"zero.{self.count}", "constant", shape, [], {},
                              np.zeros((), shape.dtype))
        self.count += 1
        self.instructions.append(inst)
        return inst

    def transpose(self, value: HloInstruction, perm: list[int]) -> HloInstruction:
        if perm == list(range(len(perm))):
            return value
        dims = tuple(value.shape.dims[p] for p in perm)
        return self.add("transpose", Shape(value.shape.element_type, dims), [value],
                        dimensions=tuple(perm))

    def reshape(self, value: HloInstruction, dims) -> HloInstruction:
        dims = tuple(dims)
        if dims == tuple(value.shape.dims) and value.shape.is_row_major:
            return value
        return self.add("reshape", Shape(value.shape.element_type, dims), [value])

    def computation(self, name: str, root: HloInstruction) -> HloComputation:
        return HloComputation(name, list(self.instructions), root).link_instructions()


def lower_convolution(conv: HloInstruction, lhs: HloInstruction, rhs: HloInstruction,
                      unique: Callable[[str], str], unique_comp: Callable[[str], str],
                      batch_minor_patches: bool = False
                      ) -> tuple[list[HloInstruction], HloInstruction, list[HloComputation]]:
    """The instructions replacing `conv` (reading `lhs` and `rhs`), the one
    holding its value, and the fused computations they call.
    `batch_minor_patches` (the cpu target, whose gemm takes either operand
    order): an input stored batch-minor (a filter gradient) is gathered
    into patches [C, window..., out..., N] in its own order, and the gemm
    contracts their major dimensions."""
    geom = conv_geometry(conv, lhs.shape.dims, rhs.shape.dims, conv.shape.dims)
    if geom.groups > 1 and geom.batch_groups > 1:
        raise conv.unsupported("feature_group_count and batch_group_count both above 1")
    computations: list[HloComputation] = []
    entry: list[HloInstruction] = []
    metadata = {"op_type": CONVOLUTION_OP_TYPE, "op_name": conv.name}

    def fusion(suffix: str, body: _Body, root: HloInstruction, operands) -> HloInstruction:
        comp = body.computation(unique_comp(f"{conv.name}_{suffix}_computation"), root)
        computations.append(comp)
        inst = HloInstruction(unique(f"{conv.name}.{suffix}"), "fusion", root.shape,
                              list(operands), {"kind": "kLoop", "calls": comp,
                                               "metadata": dict(metadata)},
                              None, None, conv.location)
        entry.append(inst)
        return inst

    batch_minor = batch_minor_patches and _reads_batch_minor(lhs.shape, geom)
    body, root = _im2col(conv, lhs.shape, geom, batch_minor)
    patches = fusion("im2col", body, root, [lhs])
    body, root = _filter(rhs.shape, geom, batch_minor)
    kernel = rhs if root.opcode == "parameter" and rhs.shape.is_row_major else \
        fusion("filter", body, root, [rhs])
    dot = _gemm(conv, patches, kernel, geom, unique(f"{conv.name}.gemm"), metadata,
                batch_minor)
    entry.append(dot)
    body, root = _output(dot.shape, conv.shape, geom, batch_minor)
    if root is None:
        return entry, dot, computations
    return entry, fusion("output", body, root, [dot]), computations


def _grouped(geom: ConvolutionGeometry) -> int:
    """The number of groups the gemm batches over (feature or batch
    groups; 1 when neither)."""
    return geom.groups if geom.groups > 1 else geom.batch_groups


def _reads_batch_minor(lhs_shape: Shape, geom: ConvolutionGeometry) -> bool:
    """Whether the input's batch dimension is stored inside its feature
    dimension (and no groups split either), where patches in the input's
    own order read it contiguously: jax's filter gradients (f01b), whose
    [N, out..., window..., C] patches stride across the whole input."""
    (lb, lf, _), minor_to_major = geom.lhs, list(lhs_shape.minor_to_major)
    if geom.groups > 1 or geom.batch_groups > 1:
        return False
    return minor_to_major.index(lb) < minor_to_major.index(lf)


def _im2col(conv: HloInstruction, lhs_shape: Shape, geom: ConvolutionGeometry,
            batch_minor: bool = False) -> tuple[_Body, HloInstruction]:
    """Step 1: the input's patches [N, out..., window..., C] (feature
    groups: [G, N, out..., window..., C / G]; batch groups: [B, N / B, out...,
    window..., C]); `batch_minor` (no groups): [C, window..., out..., N]
    instead, for an input whose batch is its minor dimension (a filter
    gradient as jax writes it), read in its own order."""
    (lb, lf, lsp), nsp = geom.lhs, len(geom.size)
    n, c, size = geom.batch, geom.features, geom.size
    out_sp = list(geom.out_spatial)
    body = _Body()
    x = body.parameter(0, lhs_shape)
    outer, inner = (lf, lb) if batch_minor else (lb, lf)
    x = body.transpose(x, [outer] + list(lsp) + [inner])         # [N|C, S..., C|N]
    lt = x.shape.element_type
    lo = [max(p, 0) for p in geom.pad_lo]
    hi = [max(p, 0) for p in geom.pad_hi]
    crop = [max(-p, 0) for p in geom.pad_lo]
    if any(lo) or any(hi) or any(d > 1 for d in geom.lhs_dilation):
        dims = [x.shape.dims[0]] + \
            [(s - 1) * dl + 1 + a + b if s else a + b
             for s, dl, a, b in zip(geom.in_spatial, geom.lhs_dilation, lo, hi)] + \
            [x.shape.dims[-1]]
        config = [(0, 0, 0)] + [(a, b, dl - 1)
                                for a, b, dl in zip(lo, hi, geom.lhs_dilation)] + [(0, 0, 0)]
        x = body.add("pad", Shape(lt, tuple(dims)), [x, body.zero(lt)], padding=config)
    by_output = 0 < math.prod(out_sp) < math.prod(size)
    patches = _patch_pieces(conv, body, x, geom, crop, by_output, window_first=batch_minor)
    if batch_minor:
        return body, body.reshape(patches, [c] + list(size) + out_sp + [n])
    patches = body.reshape(patches, [n] + out_sp + list(size) + [c])
    if geom.groups > 1:
        groups = geom.groups
        # [N, out..., window..., G, Cg] -> [G, N, out..., window..., Cg]
        patches = body.reshape(patches, [n] + out_sp + list(size) + [groups, c // groups])
        perm = [1 + 2 * nsp] + list(range(1 + 2 * nsp)) + [2 + 2 * nsp]
        patches = body.transpose(patches, perm)
    elif geom.batch_groups > 1:
        patches = body.reshape(patches, [geom.batch_groups, n // geom.batch_groups] +
                               out_sp + list(size) + [c])
    return body, patches


def _patch_pieces(conv: HloInstruction, body: _Body, x: HloInstruction,
                  geom: ConvolutionGeometry, crop: list[int], by_output: bool,
                  window_first: bool) -> HloInstruction:
    """The patches of the padded input x = [A, S..., B] as [A, out...,
    prod(window), B] (window_first: [A, prod(window), out..., B]) when
    gathered per window position: one slice strided by the convolution's
    stride each, few pieces when the window is small (a forward or
    input-gradient convolution). `by_output`: per output position instead,
    one window-sized slice (strided by the rhs dilation) each, as [A,
    prod(out), window..., B] (window_first: [A, window..., prod(out), B]):
    few pieces when the output is small and the window large (a filter
    gradient, whose window spans the image). Every element of the patch
    kernel compares its index against each piece, so the smaller count
    wins."""
    nsp, size, out_sp = len(geom.size), geom.size, list(geom.out_spatial)
    a, b = x.shape.dims[0], x.shape.dims[-1]
    padded, lt = x.shape.dims, x.shape.element_type
    # The positions one piece per element of, and the extent of each piece.
    positions, extent = (out_sp, list(size)) if by_output else (list(size), out_sp)
    reversed_dims = tuple(1 + d for d in range(nsp)
                          if by_output and geom.reversal[d] and size[d] > 1)
    # The pieces' own axis: first of the spatial ones when it stands for
    # the window (positions) in a window_first order, or for the output
    # positions in the other; last otherwise.
    axis = 1 if window_first != by_output else 1 + nsp
    piece_dims = [a] + extent + [b]
    piece_shape = Shape(lt, tuple(piece_dims))
    pieces = []
    for at in itertools.product(*[range(s) for s in positions]):
        bounds = [(0, a, 1)]
        for d in range(nsp):
            if by_output:
                start = crop[d] + at[d] * geom.stride[d]
                step = geom.rhs_dilation[d]
            else:
                w = size[d] - 1 - at[d] if geom.reversal[d] else at[d]
                start = crop[d] + w * geom.rhs_dilation[d]
                step = geom.stride[d]
            limit = start + (extent[d] - 1) * step + 1 if extent[d] else start
            if limit > padded[1 + d] or start < 0:
                what = "output" if by_output else "window"
                raise conv.error(f"{what} position {list(at)} reads outside the padded "
                                 f"input (spatial dimension {d})")
            bounds.append((start, limit, step))
        bounds.append((0, b, 1))
        piece = body.add("slice", piece_shape, [x], slice=bounds)
        if reversed_dims:
            # rhs_reversal: window position w of the patch reads the
            # input at the mirrored position.
            piece = body.add("reverse", piece_shape, [piece], dimensions=reversed_dims)
        pieces.append(body.reshape(piece, piece_dims[:axis] + [1] + piece_dims[axis:]))
    if len(pieces) == 1:
        return pieces[0]
    dims = list(pieces[0].shape.dims)
    dims[axis] = len(pieces)
    return body.add("concatenate", Shape(lt, tuple(dims)), pieces, dimensions=(axis,))


def _filter(rhs_shape: Shape, geom: ConvolutionGeometry, batch_minor: bool = False
            ) -> tuple[_Body, HloInstruction]:
    """Step 2: the kernel as [window..., I, O] (grouped: [G, window..., I,
    O / G]; batch_minor: [I, window..., O]); the root is the parameter
    itself when no relayout is needed."""
    (ro, ri, rsp), nsp = geom.rhs, len(geom.size)
    body = _Body()
    w = body.parameter(0, rhs_shape)
    if batch_minor:
        return body, body.transpose(w, [ri] + list(rsp) + [ro])
    w = body.transpose(w, list(rsp) + [ri, ro])
    g = _grouped(geom)
    if g > 1:
        w = body.reshape(w, list(geom.size) + [geom.group_features, g, geom.out_features // g])
        w = body.transpose(w, [nsp + 1] + list(range(nsp)) + [nsp, nsp + 2])
    return body, w


def _gemm(conv: HloInstruction, patches: HloInstruction, kernel: HloInstruction,
          geom: ConvolutionGeometry, name: str, metadata: dict,
          batch_minor: bool = False) -> HloInstruction:
    """Step 3: the dot contracting the patches' (window..., C) with the
    kernel's (window..., I), batched over the groups (batch_minor: (C,
    window...) with (I, window...), giving [out..., N, O])."""
    nsp, out_sp = len(geom.size), list(geom.out_spatial)
    g = _grouped(geom)
    if batch_minor:
        lhs_contracting = rhs_contracting = tuple(range(0, nsp + 1))
        dot_dims = out_sp + [geom.batch, geom.out_features]
        attrs = {}
    elif g > 1:
        batch_n = geom.batch if geom.groups > 1 else geom.batch // geom.batch_groups
        lhs_contracting = tuple(range(2 + nsp, 3 + 2 * nsp))
        rhs_contracting = tuple(range(1, 2 + nsp))
        dot_dims = [g, batch_n] + out_sp + [geom.out_features // g]
        attrs = dict(lhs_batch_dims=(0,), rhs_batch_dims=(0,))
    else:
        lhs_contracting = tuple(range(1 + nsp, 2 + 2 * nsp))
        rhs_contracting = tuple(range(0, nsp + 1))
        dot_dims = [geom.batch] + out_sp + [geom.out_features]
        attrs = {}
    attrs.update(lhs_contracting_dims=lhs_contracting, rhs_contracting_dims=rhs_contracting,
                 metadata=dict(metadata))
    return HloInstruction(name, "dot", Shape(conv.shape.element_type, tuple(dot_dims)),
                          [patches, kernel], attrs, None, None, conv.location)


def _output(dot_shape: Shape, out_shape: Shape, geom: ConvolutionGeometry,
            batch_minor: bool = False) -> tuple[_Body, HloInstruction | None]:
    """Step 4: the product in the output's dimension order and layout; the
    root is None when the product already is the output (a bitcast)."""
    (ob, of, osp), nsp = geom.out, len(geom.size)
    body = _Body()
    r = body.parameter(0, dot_shape)
    if _grouped(geom) > 1:
        # [G, N, out..., Og] -> [N, out..., G, Og] -> [N, out..., O]
        r = body.transpose(r, list(range(1, 2 + nsp)) + [0, 2 + nsp])
        r = body.reshape(r, [geom.out_batch] + list(geom.out_spatial) + [geom.out_features])
    # Where the product holds each output dimension: [N, out..., O], or
    # (batch_minor) [out..., N, O].
    position_of = {ob: nsp if batch_minor else 0, of: nsp + 1}
    for d in range(nsp):
        position_of[osp[d]] = d if batch_minor else 1 + d
    r = body.transpose(r, [position_of[j] for j in range(out_shape.rank)])
    if r.opcode == "parameter":
        if out_shape.is_row_major:
            return body, None
        r = body.add("copy", Shape(out_shape.element_type, tuple(out_shape.dims)), [r])
    # The output leaf takes the convolution's own shape (and layout).
    r.shape = out_shape
    return body, r
