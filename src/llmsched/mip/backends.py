"""Which MIP solvers are installed, which one ``backend="auto"`` picks, and the error for a
missing one.

Three backends solve the MIPs (:func:`~llmsched.mip.solve_full`, and the paper's model in
:func:`~llmsched.mip.solve_pcmax`):

``highs``
    HiGHS through ``scipy.optimize.milp``. scipy is a core dependency: this backend is
    always there.
``scip``
    SCIP through PySCIPOpt, from the ``solvers`` extra (``pip install 'llmsched[solvers]'``).
``cpsat``
    OR-Tools CP-SAT, from the same extra.

``backend="auto"`` (the default of :func:`~llmsched.mip.solve_full`) is ``scip`` when
PySCIPOpt is installed, else ``highs``: with the extra, results are those of SCIP (as in the
figures of the documentation); without it, the MIPs still solve.

Asking for a backend whose package is missing raises :class:`MissingSolverError`, a
``ModuleNotFoundError`` (so ``except ImportError`` catches it too) whose message names the
extra to install, before any work starts.
"""

from __future__ import annotations

import importlib
import importlib.util

__all__ = [
    "AUTO",
    "EXTRA",
    "SOLVER_MODULES",
    "MissingSolverError",
    "auto_backend",
    "installed",
    "installed_backends",
    "load",
    "require",
]

AUTO = "auto"
# The pip extra that holds the optional solvers.
EXTRA = "solvers"
# Backend -> the top-level module it needs.
SOLVER_MODULES: dict[str, str] = {"highs": "scipy", "scip": "pyscipopt", "cpsat": "ortools"}
# Backend -> the module whose import is the slow part of loading it.
_LOADS: dict[str, str] = {
    "highs": "llmsched.mip.milp",  # scipy.optimize: about a second
    "scip": "pyscipopt",
    "cpsat": "ortools.sat.python.cp_model",
}


class MissingSolverError(ModuleNotFoundError):
    """A MIP backend was asked for whose solver package is not installed.

    Attributes
    ----------
    backend
        The backend asked for (``scip`` or ``cpsat``).
    name
        The missing module (``pyscipopt`` or ``ortools``), as ``ModuleNotFoundError`` has it.
    """

    def __init__(self, backend: str, module: str):
        super().__init__(
            f"backend {backend!r} needs {module}, which is not installed: "
            f"pip install 'llmsched[{EXTRA}]' (or use backend='highs', which needs no extra)",
            name=module,
        )
        self.backend = backend


def installed(backend: str) -> bool:
    """Whether ``backend``'s solver package can be imported (without importing it)."""
    module = SOLVER_MODULES[backend]
    try:
        # find_spec is None for a module that is absent, or blocked (None in sys.modules).
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_backends() -> tuple[str, ...]:
    """The backends whose packages are installed (``highs`` always is)."""
    return tuple(name for name in SOLVER_MODULES if installed(name))


def auto_backend() -> str:
    """What ``backend="auto"`` means here: ``scip`` when PySCIPOpt is installed, else ``highs``."""
    return "scip" if installed("scip") else "highs"


def require(backend: str) -> None:
    """Raise :class:`MissingSolverError` unless ``backend``'s package is installed."""
    if not installed(backend):
        raise MissingSolverError(backend, SOLVER_MODULES[backend])


def load(backend: str) -> None:
    """Import ``backend``'s solver now (a solver's clock should not pay for the import);
    :class:`MissingSolverError` when it is not installed."""
    require(backend)
    importlib.import_module(_LOADS[backend])
