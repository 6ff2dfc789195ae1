"""xla_gpu's SPMD partitioner, as HLO passes: a module with sharding
annotations (jax's lowering: `sharding=` attributes, Shardy's or GSPMD's
annotation custom calls) becomes the one per-device program every device
runs, with the collectives between them.

  sharding      HloSharding: XLA's `sharding={...}` attribute, parse / print
  placement     which device holds which chunk; device groups
  propagation   shardings for every value (XLA's ShardingPropagation, simplified)
  partitioner   the per-device module (XLA's SpmdPartitioner, simplified),
                with reshard (collectives, resharding), dot (XLA's
                dot_handler, simplified), halo (windows along a cut dim:
                halo exchange) and manual (shard_map regions)
  arrays        global arrays <-> per-device chunks

    from xla_gpu.hlo.passes.spmd import partition_module
    result = partition_module(parse_module(text), num_partitions=8)
    print(module_to_text(result.module))

`python -m xla_gpu.hlo.passes.spmd FILE --num-partitions 8` prints it.
"""

from .arrays import assemble, split
from .partitioner import (PartitionResult, SpmdFallbackWarning, needs_partitioning,
                          partition_module)
from .propagation import propagate
from .sharding import HloSharding, ShardingError, parse_sharding, sharding_of

__all__ = ["HloSharding", "ShardingError", "parse_sharding", "sharding_of",
           "propagate", "partition_module", "PartitionResult", "needs_partitioning",
           "SpmdFallbackWarning",
           "split", "assemble", "partition_text"]


def partition_text(text: str, num_partitions: int, source: str = "<hlo>") -> str:
    """The per-device HLO text of an annotated module's text."""
    from ...parser import parse_module
    from ...printer import module_to_text
    result = partition_module(parse_module(text, source=source), num_partitions)
    return module_to_text(result.module)
