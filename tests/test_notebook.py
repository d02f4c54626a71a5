"""The notebooks: stored with their outputs, each figure shown once, and re-executed on a small setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

FOLDER = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ["optimality_gaps.ipynb", "serving_under_arrivals.ipynb"]

# An absolute path of some machine: a POSIX path under a usual root, a Windows drive, an
# installed package's folder. A notebook names files relative to its own folder.
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:work|home|tmp|root|usr|opt|mnt|srv|var|Users|private)/|\b[A-Za-z]:\\\\|site-packages"
)


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def _figures(cell) -> list[str]:
    """The images a cell's outputs show, as their encoded data."""
    return [
        o.data[kind]
        for o in cell.get("outputs", [])
        for kind in ("image/png", "image/svg+xml")
        if kind in o.get("data", {})
    ]


def _assert_each_figure_once(nb) -> None:
    """At most one figure per code cell. A figure shown twice (as the cell's value and again by
    pyplot) renders to different bytes, so the notebooks keep to one figure a cell and any
    second image in a cell is taken for a repeat."""
    for index, cell in enumerate(_code_cells(nb)):
        assert len(_figures(cell)) <= 1, f"code cell {index} shows {len(_figures(cell))} figures"


def _run(name: str, settings: list[str]):
    """The notebook executed from its own folder, its parameters cell replaced by ``settings``."""
    nb = nbformat.read(FOLDER / name, as_version=4)
    parameters = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    parameters.source = "\n".join(settings)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(FOLDER))
    outputs = [o for c in _code_cells(nb) for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    _assert_each_figure_once(nb)
    return nb, outputs


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_notebook_has_its_outputs_and_shows_each_figure_once(name) -> None:
    """The stored notebook was executed top to bottom (every code cell, in order, with no error
    or warning) and shows figures, one at most per cell (a figure returned as a cell's value
    and also shown by pyplot was shown twice)."""
    nb = nbformat.read(FOLDER / name, as_version=4)
    cells = _code_cells(nb)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    outputs = [o for c in cells for o in c.outputs]
    assert outputs, "stored without outputs"
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert any(_figures(c) for c in cells)
    _assert_each_figure_once(nb)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_names_no_machine_path_and_draws_with_the_library(name) -> None:
    """Neither the cells nor their stored outputs hold a path of the machine it ran on, and
    its figures are those llmsched's plot functions return (no pyplot state of its own)."""
    nb = nbformat.read(FOLDER / name, as_version=4)
    found = MACHINE_PATH.findall(nbformat.writes(nb))
    assert not found, f"machine paths in {name}: {found[:5]}"
    code = "\n".join(c.source for c in _code_cells(nb))
    assert "pyplot" not in code and "plt." not in code


def test_optimality_gaps_notebook_runs() -> None:
    """With three tiny instances the notebook executes, asserting its own invariants, and plots."""
    _, outputs = _run(
        "optimality_gaps.ipynb",
        ["INSTANCES = 3", "MAX_REQUESTS = 4", "MAX_CLIENTS = 2", "TIME_LIMIT = 20.0", "BACKEND = 'scip'"],
    )
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "3/3 instances proven optimal" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


SERVING_SETTINGS = [
    "MAX_REQUESTS = 600",
    "CLIENTS = 200",
    "SLO_TTFT = 10.0",
    "SLO_TBT = 0.5",
    "RATES = [0.5, 1.0]",
]
AZURE_CODE = "../../shared/data/azure-llm-2023/AzureLLMInferenceTrace_code.csv"


@pytest.mark.parametrize("workload", ["as found", "synthetic"])
def test_serving_under_arrivals_notebook_runs(workload) -> None:
    """On 600 requests and two loads the notebook executes: it says which workload it serves
    (the Azure trace where it sits beside the repository, else a Poisson stream), summarises
    the four policies and draws its four figures, each once."""
    present = (FOLDER / AZURE_CODE).is_file()
    if workload == "synthetic" and not present:
        pytest.skip("without the Azure trace the run 'as found' already serves the synthetic stream")
    trace = AZURE_CODE if workload == "as found" else "absent.csv"
    _, outputs = _run("serving_under_arrivals.ipynb", [f"AZURE_CODE = {trace!r}", *SERVING_SETTINGS])
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    if workload == "as found" and present:
        assert "The Azure code trace of 2023" in text and "600 requests" in text
    else:
        assert "a synthetic Poisson stream" in text and "600 requests" in text
    tables = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    for label in ("fcfs / prefill-first", "hybrid / lagrangian", "hybrid-oracle / lagrangian", "fcfs / slo"):
        assert label in tables
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 4
