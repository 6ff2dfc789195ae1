"""The checks of a computation's arguments against its parameters, and the
flattening of a result into its leaves (`evaluate`, `evaluate_devices`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ArgumentError
from ..module import HloInstruction
from ..shape import Shape
from .dtypes import Value


def check_argument(param: HloInstruction, arg: Any, shape: Shape | None = None,
                   where: str = "") -> Value:
    shape = param.shape if shape is None else shape
    label = f"parameter {param.parameter_number} ('{param.name}'){where}"
    if shape.is_tuple:
        if not isinstance(arg, (tuple, list)) or \
                len(arg) != len(shape.tuple_shapes):
            raise ArgumentError(f"{label}: expected a tuple of "
                                f"{len(shape.tuple_shapes)} arrays for {shape}")
        return tuple(check_argument(param, a, s, f"{where}[{i}]")
                     for i, (a, s) in enumerate(zip(arg, shape.tuple_shapes)))
    if shape.element_type == "token":
        return np.zeros((0,), np.uint8)
    try:
        arr = np.asarray(arg)
    except Exception as e:  # ragged lists, objects numpy cannot convert
        raise ArgumentError(f"{label}: not an array ({type(arg).__name__}: "
                            f"{e})") from None
    if arr.dtype != shape.dtype:
        raise ArgumentError(f"{label}: expected dtype {shape.dtype} "
                            f"({shape.element_type}), got {arr.dtype}")
    if arr.shape != shape.dims:
        raise ArgumentError(f"{label}: expected shape {shape.dims} "
                            f"({shape}), got {arr.shape}")
    return arr


def flatten(value: Value, out: list) -> None:
    if isinstance(value, tuple):
        for v in value:
            flatten(v, out)
    else:
        out.append(value)
