"""JSON a person can read (one top-level entry per line), written without
leaving cyclic garbage.

`json.dumps(..., indent=n)` runs the pure-Python encoder, whose nested
closures refer to each other: every call leaves a reference cycle for the
collector. The compile cache writes such files on every compile (a kernel's
spec, a program's manifest), and jax's own tests count the garbage a jit
call leaves. The C encoder, which `json.dumps` uses without `indent`,
writes each top-level value on one line here."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["readable_json"]


def readable_json(data: dict[str, Any]) -> str:
    """`data` as a JSON object, one top-level entry per line."""
    if not data:
        return "{}"
    return "{\n" + ",\n".join(f" {json.dumps(str(key))}: {json.dumps(value)}"
                              for key, value in data.items()) + "\n}"
