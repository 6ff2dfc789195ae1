"""Shared fixtures of the Python tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def ctx():
    from xla_gpu import ir
    context = ir.Context()
    with context:
        yield context
