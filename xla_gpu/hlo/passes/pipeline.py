"""The pass infrastructure: named passes, pipelines, fixed points, the
verifier after each pass in debug mode, and dumps by regex (the analog of
XLA's --xla_dump_to / --xla_dump_hlo_pass_re).

    pipeline = HloPassPipeline("simplification",
                               [HloPassFix(AlgebraicSimplifier()), HloDCE()])
    context = PassContext(dump=DumpOptions("/tmp/dump", ".*"), verify=True)
    changed = pipeline.run(module, context)   # context.seconds: time per pass

A dump directory receives `before_optimizations.txt`, `NN.<pass>.txt` after
each pass whose name matches the regex and that changed the module, and
`after_optimizations.txt`: HLO text that `xla_gpu.hlo.parse_module` reads
back.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from ..._trace import complete, span
from ..module import HloComputation, HloError, HloInstruction, HloModule
from ..printer import module_to_text
from .util import program_computations
from .verifier import verify_module

__all__ = ["HloPass", "ComputationPass", "InstructionPass", "HloPassPipeline", "HloPassFix", "DumpOptions",
           "PassContext", "failed_pass"]


@dataclass
class DumpOptions:
    """Where and which passes to dump (None: no dumps)."""
    directory: str | None = None
    regex: str = ".*"
    counter: int = 0
    written: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        try:
            self._pattern = re.compile(self.regex)
        except re.error as e:
            raise HloError(f"bad dump_regex {self.regex!r}: {e}") from None
        if self.directory is not None:
            os.makedirs(self.directory, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def matches(self, pass_name: str) -> bool:
        return self._pattern.search(pass_name) is not None

    def write(self, filename: str, module: HloModule) -> str | None:
        if self.directory is None:
            return None
        path = os.path.join(self.directory, filename)
        with open(path, "w", encoding="utf-8") as f:
            f.write(module_to_text(module))
        self.written.append(path)
        return path

    def after_pass(self, pass_name: str, module: HloModule) -> None:
        if self.directory is None or not self.matches(pass_name):
            return
        self.counter += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", pass_name)
        self.write(f"{self.counter:02d}.{safe}.txt", module)


@dataclass
class PassContext:
    """What a pipeline hands its passes: dumps, verification, statistics
    (pass name -> number of runs that changed the module, and seconds spent
    in it)."""
    dump: DumpOptions = field(default_factory=DumpOptions)
    verify: bool = False
    changes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def failed_pass(error: BaseException) -> str | None:
    """The name of the pass whose `run` raised `error` (None when no pass
    did)."""
    return getattr(error, "hlo_pass", None)


class HloPass:
    """A pass: `run(module) -> changed`. Subclasses set `name`."""
    name = "pass"

    def run(self, module: HloModule) -> bool:
        raise NotImplementedError

    def run_in(self, module: HloModule, context: PassContext) -> bool:
        """Runs the pass, then (when it changed the module) the verifier in
        debug mode and the dump."""
        start = time.perf_counter()
        try:
            changed = bool(self.run(module))
        except Exception as e:
            # The innermost pass that failed is the one a caller names
            # (`failed_pass`); pipelines and fixed points pass it up.
            if failed_pass(e) is None:
                try:
                    e.hlo_pass = self.name
                except AttributeError:   # an exception that takes no attributes
                    pass
            raise
        end = time.perf_counter()
        context.seconds[self.name] = context.seconds.get(self.name, 0.0) + end - start
        complete(self.name, "hlo-pass", start, end, changed=changed)
        if changed:
            context.changes[self.name] = context.changes.get(self.name, 0) + 1
            if context.verify:
                try:
                    verify_module(module)
                except HloError as e:
                    raise HloError(f"the module is invalid after pass '{self.name}': {e}") from e
            context.dump.after_pass(self.name, module)
        return changed

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ComputationPass(HloPass):
    """A pass that rewrites each program computation (the ENTRY and what
    its control flow runs, callees first) on its own: subclasses implement
    `run_on(comp) -> changed`. With `prunes_computations`, computations a
    change left uncalled (fusion bodies merged into others) are dropped."""
    prunes_computations = False

    def run(self, module: HloModule) -> bool:
        module.link()
        changed = False
        for comp in program_computations(module):
            changed |= bool(self.run_on(comp))
        if changed and self.prunes_computations:
            module.remove_unreachable_computations()
        return changed

    def run_on(self, comp: HloComputation) -> bool:
        raise NotImplementedError


class InstructionPass(ComputationPass):
    """A pass that rewrites one instruction at a time: subclasses implement
    `visit(comp, inst) -> changed`, called for every instruction of each
    program computation as the computation was when its turn came (those an
    earlier rewrite removed are skipped, those it added are not visited)."""

    def run_on(self, comp: HloComputation) -> bool:
        changed = False
        for inst in list(comp.instructions):
            if inst.parent is comp:
                changed |= bool(self.visit(comp, inst))
        return changed

    def visit(self, comp: HloComputation, inst: HloInstruction) -> bool:
        raise NotImplementedError


class HloPassPipeline(HloPass):
    """Named passes run in order; changed when any of them changed the
    module."""

    def __init__(self, name: str, passes: list[HloPass] | None = None):
        self.name = name
        self.passes: list[HloPass] = list(passes or [])

    def add(self, hlo_pass: HloPass) -> HloPass:
        self.passes.append(hlo_pass)
        return hlo_pass

    def run(self, module: HloModule, context: PassContext | None = None) -> bool:
        context = context or PassContext()
        changed = False
        with span(self.name, "hlo-pipeline"):
            for hlo_pass in self.passes:
                changed |= hlo_pass.run_in(module, context)
        return changed

    def run_in(self, module: HloModule, context: PassContext) -> bool:
        return self.run(module, context)

    def pass_names(self) -> list[str]:
        out = []
        for p in self.passes:
            if isinstance(p, (HloPassPipeline, HloPassFix)):
                out.extend(p.pass_names())
            else:
                out.append(p.name)
        return out


class HloPassFix(HloPass):
    """Runs a pass (or pipeline) until it no longer changes the module, at
    most `max_iterations` times (XLA's HloPassFix bound is 25)."""

    def __init__(self, inner: HloPass, max_iterations: int = 25):
        self.inner = inner
        self.name = inner.name
        self.max_iterations = max_iterations
        self.iterations = 0

    def run(self, module: HloModule, context: PassContext | None = None) -> bool:
        context = context or PassContext()
        changed = False
        self.iterations = 0
        while self.iterations < self.max_iterations:
            self.iterations += 1
            if not self.inner.run_in(module, context):
                break
            changed = True
        return changed

    def run_in(self, module: HloModule, context: PassContext) -> bool:
        return self.run(module, context)

    def pass_names(self) -> list[str]:
        if isinstance(self.inner, (HloPassPipeline, HloPassFix)):
            return self.inner.pass_names()
        return [self.inner.name]
