"""Programs partitioned by xla_gpu's SPMD partitioner: the per-device
ProgramExecutable, and what turns jax.jit's global arrays into each
device's arguments and each device's results back into global arrays.

    exe = xla_gpu.compile(annotated_text, num_partitions=8, target="cpu")
    outs = exe.run(x, w)            # global arrays in, global arrays out
    exe.run_partitioned(per_device) # as any SPMD program
    exe.partitioned_hlo             # the per-device module the partitioner made
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError
from ..hlo.passes.spmd import PartitionResult, assemble, split
from ..runtime.program import ProgramExecutable

__all__ = ["PartitionedProgram"]


class PartitionedProgram:
    """A ProgramExecutable of the per-device module, with the shardings of
    the entry's parameters and outputs. Every attribute the program has is
    read through (name, notes, hlo_text, run_partitioned...)."""

    def __init__(self, program: ProgramExecutable, partition: PartitionResult,
                 partitioned_hlo: str):
        self.program = program
        self.parameter_shardings = list(partition.parameter_shardings)
        self.output_shardings = list(partition.output_shardings)
        self.parameter_shapes = list(partition.parameter_shapes)
        self.output_shapes = list(partition.output_shapes)
        self.partition_notes = list(partition.notes)
        self.partitioned_hlo = partitioned_hlo

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["program"], name)

    def __repr__(self) -> str:
        return (f"PartitionedProgram({self.program.name!r}, "
                f"{self.program.num_partitions} partitions)")

    def split_arguments(self, args: Sequence[Any]) -> list[list[np.ndarray]]:
        """Each device's arguments: the chunks of the global `args`."""
        if len(args) != len(self.parameter_shapes):
            raise ArgumentError(f"program '{self.program.name}' takes "
                                f"{len(self.parameter_shapes)} arguments, got {len(args)}")
        n = self.program.num_devices
        per_parameter = []
        for i, (value, shape, sharding) in enumerate(zip(args, self.parameter_shapes,
                                                        self.parameter_shardings)):
            if shape.is_tuple:
                raise ArgumentError(f"argument {i}: tuple parameters are not split")
            array = np.asarray(value)
            if array.shape != tuple(shape.dims):
                raise ArgumentError(f"argument {i}: expected global shape "
                                    f"{tuple(shape.dims)} ({shape}), got {array.shape}")
            per_parameter.append(split(array, sharding, n))
        return [[chunks[d] for chunks in per_parameter] for d in range(n)]

    def run(self, *args, timeout: float | None = None, **unknown) -> tuple:
        """Runs on every device (the cpu target's emulated devices) with the
        global arrays `args` cut by the parameters' shardings; returns the
        global outputs (jax.jit's semantics)."""
        if unknown:
            raise ArgumentError(f"run() got an unexpected keyword argument "
                                f"'{next(iter(unknown))}'")
        per_device = self.program.run_partitioned(self.split_arguments(args),
                                                  timeout=timeout)
        return tuple(assemble([outs[i] for outs in per_device], sharding, shape.dims, None)
                     for i, (shape, sharding) in enumerate(zip(self.output_shapes,
                                                                self.output_shardings)))
