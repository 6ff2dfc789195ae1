"""The exceptions xla_gpu raises to its users, in one hierarchy.

Every error a caller can provoke with its input derives from `XlaGpuError`,
so `except xla_gpu.XlaGpuError` catches all of them; each also derives from
the builtin a Python user would expect (ValueError for bad input,
RuntimeError for a failure of the toolchain or the device).

    XlaGpuError
    ├── HloError (ValueError)            a module the compiler cannot handle;
    │   │                                names the instruction and its line
    │   ├── HloParseError                malformed HLO text (file:line:column)
    │   └── UnsupportedError             a valid op or type not implemented yet
    ├── ArgumentError (ValueError)       run-time arguments: count, shape, dtype
    ├── ArtifactError (ValueError)       a saved kernel or cache entry that is
    │                                    incomplete, tampered with or unsafe
    ├── CompileError (RuntimeError)      the pipeline or code generation failed
    ├── ResourceError (RuntimeError)     a program or kernel larger than the
    │                                    memory, grid or shared memory it gets
    ├── DeadlineExceededError            a run stopped at its `timeout=`
    │   (TimeoutError)
    ├── CudaError (RuntimeError)         a CUDA driver call failed
    │   └── CudaUnavailableError         no driver or no GPU
    ├── FfiError (RuntimeError)          a custom-call handler returned an
    │                                    error (xla_gpu.ffi; code, message,
    │                                    target, instruction)
    └── FfiRegistrationError (ValueError) a handler registration XLA would
                                         refuse (xla_gpu.ffi)

No third-party imports: `xla_gpu.hlo` and `xla_gpu.runtime` use it where no
compiler is installed.
"""

from __future__ import annotations

__all__ = ["XlaGpuError", "HloError", "HloParseError", "UnsupportedError",
           "ArgumentError", "ArtifactError", "CompileError", "ResourceError",
           "DeadlineExceededError", "CudaError", "CudaUnavailableError", "Location"]

from dataclasses import dataclass


class XlaGpuError(Exception):
    """The base of every error xla_gpu raises on a user's input."""


@dataclass(frozen=True)
class Location:
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


class HloError(XlaGpuError, ValueError):
    """A well-formed module that the compiler cannot handle (wrong shapes,
    an op used wrongly...). The message names the instruction."""


class HloParseError(HloError):
    """Malformed HLO text: carries the source name, line, column and, when
    known, the instruction being parsed."""

    def __init__(self, message: str, line: int = 0, column: int = 0,
                 instruction: str | None = None, source: str = "<hlo>"):
        self.message, self.line, self.column = message, line, column
        self.instruction, self.source = instruction, source
        where = f"{source}:{line}:{column}"
        inst = f" (in instruction '{instruction}')" if instruction else ""
        super().__init__(f"{where}: {message}{inst}")


class UnsupportedError(HloError):
    """A valid HLO construct (op, element type, attribute) that xla_gpu does
    not implement yet."""


class ArgumentError(XlaGpuError, ValueError):
    """Arguments given at run time do not match the compiled program."""


class ArtifactError(XlaGpuError, ValueError):
    """A saved kernel directory or cache entry is incomplete, unreadable,
    does not match its recorded digests, or is not safe to load."""


class CompileError(XlaGpuError, RuntimeError):
    """The pipeline or code generation failed on emitted IR (a compiler bug
    or an unsupported construct); the message has the diagnostics."""


class ResourceError(XlaGpuError, RuntimeError):
    """A program or kernel needs more than the target has: memory, grid
    dimensions, shared memory, registers."""


class DeadlineExceededError(XlaGpuError, TimeoutError):
    """A run passed the `timeout=` it was given and was stopped (between
    iterations of a while loop, or between thunks); the executable stays
    usable, the outputs of the stopped run are lost."""

    def __init__(self, message: str = "the run passed its deadline (timeout=) and was "
                                      "stopped; the executable stays usable"):
        super().__init__(message)


class CudaError(XlaGpuError, RuntimeError):
    """A CUDA driver call failed."""


class CudaUnavailableError(CudaError):
    """No CUDA driver or no GPU on this machine."""
