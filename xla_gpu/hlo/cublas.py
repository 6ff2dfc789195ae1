"""What XLA:GPU's cuBLAS custom calls (`__cublas$gemm`, `__cublas$lt$matmul`)
say, read and checked once for the reference interpreter and the program
compiler: the gemm_backend_config's dot dimension numbers, alpha, beta,
epilogue and precision; and the epilogues' activations as cuBLASLt computes
them (numpy), shared with the runtime's numpy gemm.

    D = act(alpha * dot(A, B) + beta * C + bias)

Operands: A, B, then C when beta is nonzero, then the bias vector for the
BIAS epilogues. The result is D, or a tuple (D, [the pre-activation for the
*_AUX epilogues,] the workspace).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .module import HloInstruction

__all__ = ["Epilogue", "EPILOGUES", "CublasGemm", "cublas_gemm", "activation"]


@dataclass(frozen=True)
class Epilogue:
    """What an epilogue adds to the product: a bias vector, an activation,
    and a second output with the pre-activation value (aux)."""
    bias: bool = False
    activation: str | None = None
    aux: bool = False


# XLA's GemmBackendConfig epilogues.
EPILOGUES: dict[str, Epilogue] = {
    "DEFAULT": Epilogue(), "BIAS": Epilogue(bias=True),
    "RELU": Epilogue(activation="relu"), "BIAS_RELU": Epilogue(True, "relu"),
    "GELU": Epilogue(activation="gelu"), "GELU_AUX": Epilogue(False, "gelu", True),
    "BIAS_GELU": Epilogue(True, "gelu"), "BIAS_GELU_AUX": Epilogue(True, "gelu", True),
    "SILU": Epilogue(activation="silu"), "BIAS_SILU": Epilogue(True, "silu"),
}


@dataclass(frozen=True)
class CublasGemm:
    """A cuBLAS custom call's gemm: dot dimension numbers, alpha, beta,
    epilogue, and whether the dot asks for the highest precision."""
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    alpha: complex = 1
    beta: float = 0.0
    epilogue: str = "DEFAULT"
    highest_precision: bool = False

    @property
    def epilogue_kind(self) -> Epilogue:
        return EPILOGUES[self.epilogue]

    @property
    def operand_count(self) -> int:
        """A, B, C when beta is nonzero, the bias for the BIAS epilogues."""
        return 2 + (self.beta != 0) + self.epilogue_kind.bias


def cublas_gemm(inst: HloInstruction) -> CublasGemm:
    """The gemm a cuBLAS custom call computes, from its backend_config
    (gemm_backend_config, or the config itself when it is not nested);
    HloError naming `inst` when it is missing or malformed, UnsupportedError
    for an unknown epilogue."""
    config = inst.backend_config()
    gemm = config.get("gemm_backend_config", config)
    if not isinstance(gemm, dict) or not isinstance(gemm.get("dot_dimension_numbers"), dict):
        raise inst.error("backend_config has no gemm_backend_config with "
                         "dot_dimension_numbers")
    dnums = gemm["dot_dimension_numbers"]

    def dims(key: str) -> tuple[int, ...]:
        try:
            return tuple(int(v) for v in dnums.get(key, ()))
        except (TypeError, ValueError):
            raise inst.error(f"bad {key} {dnums.get(key)!r}") from None

    def number(key: str, default: float) -> float:
        try:
            return float(gemm.get(key, default) or 0)
        except (TypeError, ValueError):
            raise inst.error(f"bad {key} {gemm.get(key)!r}") from None

    epilogue = str(gemm.get("epilogue", "DEFAULT"))
    if epilogue not in EPILOGUES:
        raise inst.unsupported(f"unsupported epilogue '{epilogue}' "
                               f"(supported: {', '.join(EPILOGUES)})")
    precision = json.dumps(gemm.get("precision_config", {})).lower()
    return CublasGemm(dims("lhs_batch_dimensions"), dims("rhs_batch_dimensions"),
                      dims("lhs_contracting_dimensions"), dims("rhs_contracting_dimensions"),
                      complex(number("alpha_real", 1), number("alpha_imag", 0)),
                      number("beta", 0), epilogue, "highest" in precision)


def activation(x: np.ndarray, name: str | None) -> np.ndarray:
    """An epilogue's activation as cuBLASLt computes it, in x's type (GELU:
    the tanh approximation); `x` itself for None."""
    if name not in ("relu", "gelu", "silu"):
        return x
    result = np.array(x, copy=True)
    apply_activation(result, name)
    return result


def apply_activation(x: np.ndarray, name: str | None,
                     scratch: np.ndarray | None = None) -> None:
    """`activation` in place on x, in x's type (constants too: cuBLASLt's
    f32 epilogue stays in f32), with at most one temporary (`scratch`, of
    x's shape and type, when given). A GEMM's epilogue applies it to each
    block of the product while that block is in cache."""
    dtype = x.dtype.type
    if name == "relu":
        np.maximum(x, dtype(0), out=x)
    elif name == "gelu":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x^3 as the
        # products jax's GELU lowers to (a float power is another rounding).
        t = np.multiply(x, x, out=scratch)
        t *= x
        t *= dtype(0.044715)
        t += x
        t *= dtype(np.sqrt(2 / np.pi))
        np.tanh(t, out=t)
        t += dtype(1)
        x *= dtype(0.5)
        x *= t
    elif name == "silu":
        t = np.negative(x, out=scratch)
        np.exp(t, out=t)
        t += dtype(1)
        x /= t
