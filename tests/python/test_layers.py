"""The package's layers point down: every import of an xla_gpu module, at
module level or inside a function, goes to the same layer or a lower one,
except the few listed below with the reason each is allowed.

Layers, lowest first:
  0 errors, input reading, lazy-export helpers
  1 hlo (the IR, parser, printer, verifier, interpreter)
  2 runtime, ffi (run saved executables: numpy and cuda-python only)
  3 hlo.passes, analysis, service (HLO rewrites and analyses)
  4 ir, dialects, emitters, pipeline, backends, codegen (MLIR)
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
    "xla_gpu.errors": 0, "xla_gpu._input": 0, "xla_gpu._lazy": 0,
    "xla_gpu.hlo": 1,
    "xla_gpu.runtime": 2, "xla_gpu.ffi": 2,
    "xla_gpu.hlo.passes": 3, "xla_gpu.analysis": 3, "xla_gpu.service": 3,
    "xla_gpu.ir": 4, "xla_gpu.dialects": 4, "xla_gpu.emitters": 4, "xla_gpu.pipeline": 4,
    "xla_gpu.backends": 4, "xla_gpu.codegen": 4, "xla_gpu._native": 4,
    "xla_gpu._pass_runner": 4, "xla_gpu._malloc_tuning": 4,
    "xla_gpu.kernel_compiler": 5, "xla_gpu.op_kernels": 5, "xla_gpu.compile_cache": 5,
    "xla_gpu.program": 6, "xla_gpu.program_compiler": 6,
    "xla_gpu.compiler": 7, "xla_gpu._cli": 7, "xla_gpu.pjrt": 7, "xla_gpu": 7,
    # `python -m xla_gpu.hlo.passes` is a command-line tool.
    "xla_gpu.hlo.passes.__main__": 7,
    # Indexing maps are MLIR affine maps.
    "xla_gpu.analysis.indexing": 4,
}
# What other modules import from the package root itself is its bottom
# layer: the version and the paths of the native part (library_path,
# native_dir, ...); `compile` and `Executable` load only when first used.
ROOT_AS_IMPORTED = 0

# (importer, imported) pairs that point up on purpose.
ALLOWED_UPWARD = {
    # The interpreter evaluates custom calls through the handlers that
    # xla_gpu.ffi owns (one registry); imported only when a custom call is
    # evaluated, and ffi's registry imports nothing of the compiler.
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi"),
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi.registry"),
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi.attributes"),
    ("xla_gpu.hlo.interpreter.custom_calls", "xla_gpu.ffi.jaxlib_targets"),
    # A custom call's operands are laid out as its constraints say, by the
    # same rule the custom_call_layouts pass applies (the interpreter's and
    # the runtime's bridge to a handler).
    ("xla_gpu.ffi.calls", "xla_gpu.hlo.passes.custom_call_layouts"),
    # libXlaGpuFfi.so built from source (no installed copy) is kept in the
    # compile cache's directory, found the same way.
    ("xla_gpu.ffi._native", "xla_gpu.compile_cache"),
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


def imports_of(path: Path) -> set[str]:
    """Every xla_gpu module `path` imports, anywhere in it (`from . import
    x` counts as importing the package's module x when there is one)."""
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
            found.add(target)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists() or \
                        (PACKAGE.parent / candidate.replace(".", "/")).is_dir():
                    found.add(candidate)
    return found


def upward_imports(pairs) -> list[tuple[str, str, int, int]]:
    bad = []
    for importer, imported in pairs:
        low = layer_of(importer)
        high = ROOT_AS_IMPORTED if imported == "xla_gpu" else layer_of(imported)
        if low is None or high is None:
            continue
        if high > low and (importer, imported) not in ALLOWED_UPWARD:
            bad.append((importer, imported, low, high))
    return sorted(bad)


def all_imports() -> list[tuple[str, str]]:
    return [(module_name(path), imported)
            for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts
            for imported in imports_of(path)]


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
