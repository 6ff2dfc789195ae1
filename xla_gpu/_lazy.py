"""Package attributes imported when first used (a module `__getattr__`,
PEP 562): a package can name what it exports without importing the
modules that define them, so that importing it stays cheap (the runtime
never loads the compiler, the interpreter never loads the FFI code)."""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, exports: dict[str, str],
                    namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: a name in `exports` is read from the
    module it maps to (as `importlib.import_module(module, package)` names
    it: ".parser", "xla_gpu.ffi.registry") and kept in `namespace` (the
    package's globals()); any other name is a submodule not imported yet
    (`xla_gpu.compiler.clear_memory_cache()` after `import xla_gpu`)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is not None:
            value = getattr(import_module(module, package), name)
            namespace[name] = value
            return value
        if not name.startswith("__"):
            try:
                return import_module(f".{name}", package)
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
