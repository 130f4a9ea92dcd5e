from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _tiny_models(one_torch_thread):
    """Every layer test builds tiny models: run them on one torch thread (tests/conftest.py)."""
