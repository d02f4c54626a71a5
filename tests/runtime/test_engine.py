"""The engine: its slot cache refuses misuse."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from llmsched import Workload  # noqa: E402
from llmsched.runtime import Engine, run_alone, run_insertion  # noqa: E402
from tests.runtime.conftest import WORKLOAD  # noqa: E402


def test_engine_rejects_misuse(model, prompts) -> None:
    """Busy slots, empty slots, overflowing slots, unknown tokens and missing devices are refused."""
    eng = Engine(model, 2, 16)
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.255"):
        eng.prefill([[1, 256]], [1])
    static = Workload([28, 2], [2, 28])
    with pytest.raises(ValueError, match="static batching needs 56 cache positions"):
        run_insertion(Engine(model, 2, 31), static, "static")
    eng.prefill([[1, 2, 3]], [0])
    with pytest.raises(ValueError, match="busy"):
        eng.prefill([[4]], [0])
    with pytest.raises(ValueError, match="no prefilled request"):
        eng.decode([1])
    with pytest.raises(ValueError, match="more than max_len"):
        eng.prefill([list(range(20))], [1])
    with pytest.raises(ValueError, match="out of range"):
        eng.decode([5])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            Engine(model, 1, 16, device="cuda")
    with pytest.raises(ValueError, match="max_len"):
        run_alone(Engine(model, 1, 8), WORKLOAD, prompts)
