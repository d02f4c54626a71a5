"""notebooks/optimality_gaps.ipynb runs from top to bottom on a small setting."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "optimality_gaps.ipynb"


def test_optimality_gaps_notebook_runs() -> None:
    """With three tiny instances the notebook executes, asserting its own invariants, and plots."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    settings = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    settings.source = "\n".join(
        ["INSTANCES = 3", "MAX_REQUESTS = 4", "MAX_CLIENTS = 2", "TIME_LIMIT = 20.0", "BACKEND = 'scip'"]
    )
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(NOTEBOOK.parent))
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "3/3 instances proven optimal" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
