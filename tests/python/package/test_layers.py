"""The package's layers point down: every import of an xla_gpu module, at
module level or inside a function, goes to the same layer or a lower one,
except the few listed below with the reason each is allowed; and no two
modules import each other, directly or through others (no import cycle),
except the deliberate factories listed below.

Layers, lowest first:
  0 errors, input reading, lazy-export helpers, the version and paths
  1 hlo (the IR, parser, printer, verifier, interpreter)
  2 runtime, ffi (run saved executables: numpy and cuda-python only)
  3 hlo.passes, analysis, service (HLO rewrites and analyses)
  4 ir, dialects, emitters, pipeline, backends (MLIR; cuda's code generation
    is backends.cuda.codegen)
  5 the kernel compiler and the compile cache
  6 the program compiler
  7 the API (xla_gpu.compile, the package root), the CLIs, the PJRT plugin
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xla_gpu

PACKAGE = Path(xla_gpu.__file__).resolve().parent

# Module-name prefixes -> layer; the longest matching prefix wins.
LAYERS = {
    "xla_gpu.errors": 0, "xla_gpu._input": 0, "xla_gpu._lazy": 0, "xla_gpu._paths": 0,
    "xla_gpu._trace": 0, "xla_gpu._progress": 0, "xla_gpu._ctypes_arrays": 0,
    "xla_gpu._readable_json": 0, "xla_gpu._source_first": 0,
    "xla_gpu.hlo": 1,
    "xla_gpu.runtime": 2, "xla_gpu.ffi": 2,
    "xla_gpu.hlo.passes": 3, "xla_gpu.analysis": 3, "xla_gpu.service": 3,
    "xla_gpu.ir": 4, "xla_gpu.dialects": 4, "xla_gpu.emitters": 4, "xla_gpu.pipeline": 4,
    "xla_gpu.backends": 4, "xla_gpu._native": 4,
    "xla_gpu._pass_runner": 4, "xla_gpu._malloc_tuning": 4,
    "xla_gpu.kernel_compiler": 5, "xla_gpu.op_kernels": 5, "xla_gpu.compile_cache": 5,
    "xla_gpu.program": 6, "xla_gpu.program_compiler": 6,
    "xla_gpu.compiler": 7, "xla_gpu._cli": 7, "xla_gpu.pjrt": 7, "xla_gpu": 7,
    # `python -m xla_gpu.hlo.passes` is a command-line tool.
    "xla_gpu.hlo.passes.__main__": 7,
    # Indexing maps are MLIR affine maps.
    "xla_gpu.analysis.indexing": 4,
}
# (importer, imported) pairs that point up on purpose.
ALLOWED_UPWARD = {
    # The interpreter evaluates custom calls through the handlers that
    # xla_gpu.ffi owns (one registry); imported only when a custom call is
    # evaluated, and ffi's registry imports nothing of the compiler.
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi.registry"),
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi.attributes"),
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi.jaxlib_targets"),
    # A custom call's operands are laid out as its constraints say, by the
    # same rule the custom_call_layouts pass applies (the interpreter's and
    # the runtime's bridge to a handler).
    ("xla_gpu.ffi.calls", "xla_gpu.hlo.passes.custom_call_layouts"),
    # Inputs larger than the host's memory are refused before numpy
    # allocates them, by the runtime's one reading of the host's memory.
    ("xla_gpu.hlo.numerics", "xla_gpu.runtime.memory"),
}


def layer_of(module: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        if (module == prefix or module.startswith(prefix + ".")) and \
                (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or path.is_dir()


def imports_of(path: Path) -> set[str]:
    """Every xla_gpu module `path` imports, anywhere in it (`from . import
    x` counts as importing the package's module x when there is one, and
    then not as importing the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("xla_gpu"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("xla_gpu"):
                continue
            submodules = {f"{target}.{alias.name}" for alias in node.names}
            submodules = {m for m in submodules if is_module(m)}
            found.update(submodules)
            # `from package import submodule` runs only the submodule (the
            # package is its parent, imported either way); any other name
            # comes from the package's own __init__.
            if len(submodules) < len(node.names):
                found.add(target)
    return found


def upward_imports(pairs) -> list[tuple[str, str, int, int]]:
    bad = []
    for importer, imported in pairs:
        low = layer_of(importer)
        high = layer_of(imported)
        if low is None or high is None:
            continue
        if high > low and (importer, imported) not in ALLOWED_UPWARD:
            bad.append((importer, imported, low, high))
    return sorted(bad)


def all_imports() -> list[tuple[str, str]]:
    return [(module_name(path), imported)
            for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts
            for imported in imports_of(path)]


# Import cycles kept on purpose (the modules of each) -> why.
DELIBERATE_CYCLES = {
    frozenset({"xla_gpu.emitters.transpose", "xla_gpu.emitters.packed_transpose"}):
        "a factory: transpose.transpose_emitter picks the padded emitter or the packed "
        "one (a subclass of transpose's base), importing it only when a plan asks for it",
}


def import_cycles(pairs) -> list[frozenset[str]]:
    """The strongly connected components of more than one module in the
    graph of (importer, imported) pairs: the modules that import each
    other, directly or through others. An import of a package is an edge
    to its __init__ (the package's own name)."""
    graph: dict[str, set[str]] = {}
    for importer, imported in pairs:
        if importer != imported:
            graph.setdefault(importer, set()).add(imported)
            graph.setdefault(imported, set())
    # Tarjan's algorithm, iterative (no recursion limit to meet).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(frozenset(component))
    return cycles


def test_every_module_has_a_layer():
    missing = sorted({m for path in PACKAGE.rglob("*.py")
                      if layer_of(m := module_name(path)) is None})
    assert missing == []


def test_imports_only_point_down():
    bad = upward_imports(all_imports())
    assert bad == [], "upward imports (importer -> imported, layers):\n" + "\n".join(
        f"  {a} ({la}) -> {b} ({lb})" for a, b, la, lb in bad)


def test_the_allowed_upward_imports_still_exist():
    """An exception nobody needs any more is removed from the list."""
    present = set(all_imports())
    assert sorted(ALLOWED_UPWARD - present) == []


@pytest.mark.parametrize("importer, imported", [
    ("xla_gpu.hlo.parser", "xla_gpu.compiler"),
    ("xla_gpu.runtime.program", "xla_gpu.emitters.loop"),
    ("xla_gpu.emitters.sort", "xla_gpu.kernel_compiler"),
])
def test_an_upward_import_is_caught(importer, imported):
    assert upward_imports([(importer, imported)]) != []


def test_no_import_cycles():
    cycles = [c for c in import_cycles(all_imports()) if c not in DELIBERATE_CYCLES]
    pairs = set(all_imports())
    assert cycles == [], "import cycles (the imports within each):\n" + "\n".join(
        "  " + ", ".join(sorted(c)) + "\n" + "".join(
            f"    {a} -> {b}\n" for a, b in sorted(pairs) if a in c and b in c and a != b)
        for c in cycles)


def test_the_deliberate_cycles_still_exist():
    """A cycle that is gone leaves the list."""
    assert sorted(map(sorted, set(DELIBERATE_CYCLES) - set(import_cycles(all_imports())))) \
        == []


@pytest.mark.parametrize("pairs, expected", [
    # Two modules importing each other.
    ([("xla_gpu.runtime.thunks", "xla_gpu.runtime.gemm"),
      ("xla_gpu.runtime.gemm", "xla_gpu.runtime.thunks")],
     [{"xla_gpu.runtime.thunks", "xla_gpu.runtime.gemm"}]),
    # A package whose submodule imports a name from its __init__.
    ([("xla_gpu.ffi", "xla_gpu.ffi.calls"), ("xla_gpu.ffi.calls", "xla_gpu.ffi")],
     [{"xla_gpu.ffi", "xla_gpu.ffi.calls"}]),
    # A longer loop, next to a chain that is none.
    ([("xla_gpu.a", "xla_gpu.b"), ("xla_gpu.b", "xla_gpu.c"), ("xla_gpu.c", "xla_gpu.a"),
      ("xla_gpu.c", "xla_gpu.d"), ("xla_gpu.d", "xla_gpu.e"), ("xla_gpu.a", "xla_gpu.a")],
     [{"xla_gpu.a", "xla_gpu.b", "xla_gpu.c"}]),
    ([("xla_gpu.a", "xla_gpu.b"), ("xla_gpu.b", "xla_gpu.c"), ("xla_gpu.a", "xla_gpu.c")], []),
])
def test_an_import_cycle_is_caught(pairs, expected):
    assert sorted(map(sorted, import_cycles(pairs))) == sorted(map(sorted, expected))


def test_a_cycle_added_to_the_package_is_caught():
    pairs = all_imports() + [("xla_gpu.errors", "xla_gpu.runtime.thunks")]
    cycles = [c for c in import_cycles(pairs) if c not in DELIBERATE_CYCLES]
    assert len(cycles) == 1 and {"xla_gpu.errors", "xla_gpu.runtime.thunks"} <= cycles[0]


def test_what_counts_as_importing_a_package():
    """`from package import submodule` imports the submodule only; a name
    defined in the package's __init__ imports the package."""
    calls = imports_of(PACKAGE / "ffi" / "calls.py")       # from . import _native, registry
    assert {"xla_gpu.ffi._native", "xla_gpu.ffi.registry"} <= calls
    assert "xla_gpu.ffi" not in calls
    compiler = imports_of(PACKAGE / "kernel_compiler.py")  # from .runtime import CudaKernel
    assert "xla_gpu.runtime" in compiler
