"""GEMM fusion autotuning (XLA's GemmFusionAutotuner): each `__triton_gemm`
fusion the pass pipeline formed gets the tile configuration that ran fastest
on the target it will run on, among a small candidate set.

    XLA_GPU_AUTOTUNE=1   tune (off by default: compiles stay deterministic)
    XLA_GPU_AUTOTUNE=0   the heuristic table (`analysis.gemm.default_tiling`,
                         XLA's default configs when nothing was tuned)

For each fusion: the candidates (`candidate_tilings`: output tiles, block_k
and split_k around the dot's sizes, the heuristic table's first; then the
library: the gemm thunk, cuBLASLt on cuda and BLAS on cpu, with the
prologue and epilogue as kernels, XLA's cuBLAS candidate) are each compiled
by the program compiler as a one-fusion program (split_k > 1: the
partial-sum GEMM kernel and the reduction kernel that adds the partials),
run once on the same random operands and checked against the heuristic
configuration's result (a candidate that computes something else is
rejected, as XLA's autotuner compares with its reference), then timed as
the program runs (thunk overheads included; the median of 3
measurements). The winner is written into the fusion's backend_config
(the library: the fusion becomes a `__cublas` one, opened into a gemm thunk
and kernels), and the program compiler's split-k rewrite applies a split.
cuda: the same code runs there (wall clock, the operands' copies in and
out included, the same for every candidate); it has not been run on a GPU
yet.

Results are kept, keyed by the fusion's canonical fingerprint, the target,
the arch, the device and the compiler's identity, in this process' memory
and in the compile cache on disk (the kernels' cache; `put_autotune`), so a
second compile of the same fusion on the same device does not time again.
With a dump directory, `autotune_results.json` lists every fusion's result
in the shape of XLA's AutotuneResults (version, device, hlo, result with
run_time and the triton config), plus the candidates' times.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import backends, compile_cache
from .._paths import autotune_enabled
from ..analysis.fusion import choose_emitter, fusion_roots
from ..analysis.gemm import (GemmTiling, default_tiling, dot_dims, is_gemm_fusion_kind,
                             fusion_backend_kind, triton_gemm_tiling)
from ..errors import XlaGpuError
from ..hlo.fingerprint import fingerprint
from ..hlo.module import HloComputation, HloInstruction, HloModule
from ..hlo.numerics import compare, random_inputs, tolerance_type
from ..hlo.passes.gemm_fusion import gemm_backend_config

__all__ = ["autotune_enabled", "autotuner", "candidate_tilings", "autotune_gemm_fusions",
           "tune_fusion", "AutotuneResult", "clear_memory_results", "RESULTS_VERSION", "LIBRARY_KIND"]

# XLA's AutotuneResults version the dump follows.
RESULTS_VERSION = 3

# The fusion kind XLA gives a GEMM fusion whose best configuration is the
# library's (cuBLAS on the GPU): the program compiler opens it into a gemm
# thunk and kernels for the rest.
LIBRARY_KIND = "__cublas"


_memory: dict[str, "AutotuneResult"] = {}
_memory_lock = threading.Lock()


def clear_memory_results() -> None:
    """Forgets the results this process measured (the disk keeps its own)."""
    with _memory_lock:
        _memory.clear()


def _config_json(tiling: GemmTiling | None) -> dict:
    """A configuration as XLA's AutotuneResult names it: `triton` with the
    tile config, or `gemm` (the library: cuBLAS, host BLAS on cpu)."""
    if tiling is None:
        return {"gemm": {"algorithm": -1}}
    return {"triton": {k: int(v) for k, v in tiling.to_json().items()}}


def _backend_config(tiling: GemmTiling | None) -> str:
    """A GEMM fusion's backend_config for a configuration (None: the
    library's gemm)."""
    if tiling is None:
        return json.dumps({"fusion_backend_config": {"kind": LIBRARY_KIND}})
    return gemm_backend_config(tiling)


def _config_from_json(data: dict) -> GemmTiling | None:
    if "gemm" in data:
        return None
    return GemmTiling.from_json(data["triton"])


def _nanos(seconds: float | None) -> dict | None:
    return None if seconds is None else {"nanos": int(round(seconds * 1e9))}


@dataclass
class AutotuneResult:
    """One fusion's choice: the winning tiling (None: the library's gemm
    won), its time, how it was found ("measured", "cache", "heuristic")
    and each candidate's time (None: it failed to compile or computed
    another result, `rejected` says why)."""
    fusion: str
    key: str
    device: str
    tiling: GemmTiling | None
    seconds: float | None
    source: str
    candidates: list[tuple[GemmTiling | None, float | None]] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def library(self) -> bool:
        return self.tiling is None

    def backend_config(self) -> str:
        """The fusion's backend_config for this choice."""
        return _backend_config(self.tiling)

    def to_json(self) -> dict:
        result = _config_json(self.tiling)
        if self.seconds is not None:
            result["run_time"] = _nanos(self.seconds)
        return {"device": self.device, "hlo": self.key, "fusion": self.fusion,
                "source": self.source, "result": result,
                "candidates": [{**_config_json(t), "run_time": _nanos(s)}
                               for t, s in self.candidates],
                "rejected": dict(self.rejected)}

    @staticmethod
    def from_json(data: dict, fusion: str) -> "AutotuneResult":
        """What `to_json` wrote (KeyError, ValueError or TypeError when it
        is not that)."""
        result = data["result"]
        seconds = (result.get("run_time") or {}).get("nanos")
        candidates = [(_config_from_json(c),
                       None if c.get("run_time") is None else c["run_time"]["nanos"] / 1e9)
                      for c in data.get("candidates", ())]
        return AutotuneResult(fusion, str(data["hlo"]), str(data["device"]),
                              _config_from_json(result),
                              None if seconds is None else seconds / 1e9, "cache",
                              candidates, dict(data.get("rejected", {})))

    # The compile cache stores what has `save`.
    def save(self, directory) -> Path:
        from ..runtime import artifact
        self.artifact_digest = artifact.write_artifact(
            directory, {"autotune.json": json.dumps(self.to_json(), sort_keys=True).encode()})
        return Path(directory)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def candidate_tilings(dot: HloInstruction, limit: int = 8) -> list[GemmTiling]:
    """The configurations tried for `dot` (at most `limit`), the heuristic
    table's first: output tiles of 16 to 64 (128 for large outputs) per
    side, block_k 16 to 64, split_k 1, and 2 or 4 where the contracting
    dimension is one dimension long enough to split; each clamped to the
    dot's sizes (a tile larger than its dimension is that dimension's next
    power of two) and listed once."""
    dims = dot_dims(dot)
    first = default_tiling(dims)
    m, n, k = _pow2_at_least(dims.M), _pow2_at_least(dims.N), _pow2_at_least(dims.K)
    sides = [16, 32, 64] + ([128] if dims.M * dims.N >= 512 * 512 else [])
    splits = [1]
    contracting = dot.attrs.get("lhs_contracting_dims") or ()
    if len(contracting) == 1:
        splits += [s for s in (2, 4) if dims.K % s == 0 and dims.K // s >= 32]
    seen, out = set(), []

    def add(tiling: GemmTiling) -> None:
        clamped = GemmTiling(min(tiling.block_m, m), min(tiling.block_n, n),
                             min(tiling.block_k, k), tiling.split_k, 1, tiling.num_warps)
        if clamped.split_k > 1 and dims.K // clamped.split_k < clamped.block_k:
            return
        if clamped not in seen:
            seen.add(clamped)
            out.append(clamped)

    add(first)
    # Square tiles first, then the split-k variants of the heuristic tile,
    # then oblong tiles and other block_k: the likely winners come early
    # when `limit` cuts the list.
    for side in sides:
        add(GemmTiling(side, side, first.block_k, 1, 1, 4))
    for split in splits[1:]:
        add(GemmTiling(first.block_m, first.block_n, first.block_k, split, 1, 4))
    for bm in sides:
        for bn in sides:
            for bk in (16, 32, 64):
                add(GemmTiling(bm, bn, bk, 1, 1, 4))
    return out[:limit]


# ------------------------------------------------------------- measuring

class _Candidate:
    """One configuration of a fusion as the program compiler runs it: a
    one-fusion program with that backend config (split_k > 1: the
    partial-sum GEMM kernel and the reduction kernel; the library: a gemm
    thunk and kernels for the prologue and epilogue), compiled by the
    program compiler (its kernels through the kernel compiler and its
    cache) and timed as a whole, thunk overheads included."""

    def __init__(self, body: HloComputation, fusion_name: str, backend_config: str,
                 target: str, arch: str, cache: bool):
        from .driver import compile_program
        module = HloModule("autotune")
        comp = HloComputation("autotune_entry", is_entry=True)
        module.computations.append(comp)
        comp.module = module
        callee = body.clone(f"{body.name}.candidate", module=module)
        module.add_computation(callee, before=comp)
        params = [comp.add_instruction(HloInstruction.create_parameter(
            p.parameter_number, p.shape, f"p{p.parameter_number}"))
            for p in sorted(callee.parameters, key=lambda p: p.parameter_number)]
        fusion = comp.add_instruction(HloInstruction(
            fusion_name, "fusion", callee.root.shape, params,
            {"kind": "kCustom", "calls": callee, "backend_config": backend_config}))
        comp.set_root(fusion)
        module.link()
        self.exe = compile_program(module, target=target, arch=arch, cache=cache,
                                   optimize=False, command_buffers=True)

    def run(self, operands: list[np.ndarray]) -> np.ndarray:
        results = self.exe.run(*operands)
        return np.asarray(results[0] if isinstance(results, (tuple, list)) else results)

    def time(self, operands: list[np.ndarray], iterations: int, repeats: int = 3) -> float:
        """Seconds per run: the median of `repeats` measurements of
        `iterations` runs each (the host is shared: one measurement can
        catch another process' burst). Wall clock with operands in host
        memory (on cuda the copies in and out are the same for every
        candidate of a fusion)."""
        self.exe.time(*operands, iterations=1, warmup=2)   # loads, pools, caches
        return float(np.median([self.exe.time(*operands, iterations=iterations, warmup=0)
                                for _ in range(repeats)]))


def _device_name(target: str) -> str:
    device = backends.get(target).default_device
    return getattr(device, "name", None) or repr(device)


def _key(body: HloComputation, target: str, arch: str, device: str, limit: int) -> str:
    return compile_cache.make_key("autotune", fingerprint(body), target, arch, device,
                                  compile_cache.compiler_identity(target), str(limit),
                                  str(RESULTS_VERSION))


def tune_fusion(fusion: HloInstruction, target: str, arch: str = "sm_90", *,
                cache: bool = True, limit: int = 8, iterations: int = 10,
                disk=None) -> AutotuneResult:
    """The best configuration of GEMM fusion `fusion` on `target` (from the
    caches when they have it)."""
    body: HloComputation = fusion.attrs["calls"]
    device = _device_name(target)
    key = _key(body, target, arch, device, limit)
    if cache:
        with _memory_lock:
            known = _memory.get(key)
        if known is None and disk is not None:
            known = disk.get_autotune(
                key, lambda data: AutotuneResult.from_json(data, fusion.name))
        if known is not None:
            return AutotuneResult(fusion.name, key, known.device, known.tiling, known.seconds,
                                  "cache", known.candidates, known.rejected)
    dot = choose_emitter(fusion_roots(body)).heroes[0]
    operands = random_inputs(body, seed=len(body.instructions))
    # Tiles change the summation order: results are compared relative to
    # their scale, with the tolerance of the least precise type computed in.
    element_type = body.root.shape.leaves()[0].element_type   # results[0]
    tolerance_of = tolerance_type(body, element_type)
    candidates, rejected = [], {}
    reference = None
    # The library's gemm (the gemm thunk: cuBLASLt on cuda, BLAS on cpu)
    # beside the emitter's configurations.
    options: list[GemmTiling | None] = [*candidate_tilings(dot, limit), None]
    for tiling in options:
        label = json.dumps(_config_json(tiling), sort_keys=True)
        try:
            kernels = _Candidate(body, fusion.name, _backend_config(tiling), target, arch,
                                 cache)
            result = kernels.run(operands)
        except XlaGpuError as e:
            rejected[label] = f"{type(e).__name__}: {e}"
            candidates.append((tiling, None))
            continue
        if reference is None:
            reference = result    # the heuristic table's configuration
        elif compare(result, reference, element_type, tolerance_of=tolerance_of,
                     scale_relative=True) is not None:
            rejected[label] = "computed another result than the heuristic configuration"
            candidates.append((tiling, None))
            continue
        candidates.append((tiling, kernels.time(operands, iterations)))
    timed = [(s, i) for i, (_, s) in enumerate(candidates) if s is not None]
    if not timed:
        tiling = default_tiling(dot_dims(dot))
        result = AutotuneResult(fusion.name, key, device, tiling, None, "heuristic",
                                candidates, rejected)
    else:
        seconds, best = min(timed)
        tiling = candidates[best][0]
        result = AutotuneResult(fusion.name, key, device, tiling, seconds, "measured",
                                candidates, rejected)
    if cache and result.source == "measured":
        with _memory_lock:
            _memory[key] = result
        if disk is not None:
            disk.put_autotune(key, result)
    return result


def autotune_gemm_fusions(module: HloModule, target: str, arch: str = "sm_90", *,
                          enabled: bool | None = None, cache: bool = True,
                          dump_dir: str | os.PathLike | None = None,
                          limit: int = 8) -> list[AutotuneResult]:
    """Tunes every `__triton_gemm` fusion of `module` whose dot is not split
    yet (in place: the winner becomes its triton_gemm_config, or the fusion
    becomes a `__cublas` one that the program compiler opens into a gemm
    thunk and kernels when the library won). Disabled
    (XLA_GPU_AUTOTUNE unset or 0, or `enabled=False`): nothing changes and
    nothing is returned. With `dump_dir`: autotune_results.json."""
    if not (autotune_enabled() if enabled is None else enabled):
        return []
    disk = compile_cache.DiskCache() if cache else None
    results = []
    for comp in module.computations:
        for inst in list(comp.instructions):
            if inst.opcode != "fusion" or not is_gemm_fusion_kind(fusion_backend_kind(inst)):
                continue
            body = inst.attrs["calls"]
            current = triton_gemm_tiling(inst)
            if current is not None and current.split_k > 1:
                continue   # split already: its partial sums are another fusion's
            if choose_emitter(fusion_roots(body)).kind != "gemm":
                continue
            result = tune_fusion(inst, target, arch, cache=cache, limit=limit, disk=disk)
            inst.attrs["backend_config"] = result.backend_config()
            results.append(result)
    if dump_dir is not None:
        Path(dump_dir).mkdir(parents=True, exist_ok=True)
        Path(dump_dir, "autotune_results.json").write_text(json.dumps(
            {"version": RESULTS_VERSION, "results": [r.to_json() for r in results]},
            indent=1, sort_keys=True) + "\n")
    return results


def autotuner(target: str, arch: str = "sm_90", *, cache: bool = True,
              dump_dir: str | os.PathLike | None = None):
    """The `autotune` step `compile_program` takes: None when
    XLA_GPU_AUTOTUNE is off, else a function tuning a module's GEMM
    fusions and returning notes."""
    if not autotune_enabled():
        return None

    def tune(module: HloModule) -> list[str]:
        results = autotune_gemm_fusions(module, target, arch, enabled=True, cache=cache,
                                        dump_dir=dump_dir)
        return [f"autotuned {len(results)} GEMM fusion(s)"] if results else []
    return tune
