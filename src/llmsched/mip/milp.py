"""A small linear-modelling layer over ``scipy.optimize.milp`` (HiGHS): the MIP solver that
needs no extra.

scipy is a core dependency, and its ``milp`` is the HiGHS branch and bound. This module lets a
formulation be written with operators (``2 * x + y <= 3``), as in PySCIPOpt or CP-SAT, collects
the rows into one sparse matrix, and reads HiGHS's answer: its model status (parsed from
scipy's message, which carries HiGHS's own status number, so that a node limit is not
confused with the clock), the best solution, its objective and the proven dual bound.

What scipy's ``milp`` offers, and so what a HiGHS backend here can honour (scipy >= 1.11):

* ``time_limit`` (wall-clock seconds), ``node_limit`` (branch-and-bound nodes,
  HiGHS's ``mip_max_nodes``: a deterministic limit), ``mip_rel_gap`` (set to 0 here, so
  that HiGHS stops only on a proof), ``presolve`` and ``disp``. Other HiGHS options pass
  through verbatim (scipy warns about them; ``mip_abs_gap`` is set to 0 this way).
* No MIP start: a warm start cannot be handed to HiGHS through scipy. The callers use it
  as their incumbent and fallback instead (see :func:`llmsched.mip.solve_full`).
* No callback: the trace holds HiGHS's final incumbent and bound only, not their course.
* The dual bound and node count come back only with a solution; stopped without one, the
  bound of a solve is unknown (scipy drops it).

HiGHS's branch and bound is deterministic: the same model gives the same search, node for
node, on any machine; so a ``node_limit`` gives the same answer under any load, and only
the wall-clock limit depends on the machine.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

# Imported here, not on first solve: this module is loaded only by a backend that solves, and
# scipy.optimize takes about a second to import, which the callers keep off their clock.
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

__all__ = [
    "HIGHS_MODEL_STATUS",
    "LinExpr",
    "MilpModel",
    "MilpOutcome",
    "Row",
    "highs_model_status",
    "linear_sum",
    "solve_milp",
]

# HiGHS's HighsModelStatus numbers (stable across HiGHS 1.x) -> names, for messages and
# for the backends' status maps.
HIGHS_MODEL_STATUS: dict[int, str] = {
    0: "notset",
    1: "load_error",
    2: "model_error",
    3: "presolve_error",
    4: "solve_error",
    5: "postsolve_error",
    6: "model_empty",
    7: "optimal",
    8: "infeasible",
    9: "unbounded_or_infeasible",
    10: "unbounded",
    11: "objective_bound",
    12: "objective_target",
    13: "time_limit",
    14: "iteration_limit",
    15: "unknown",
    16: "solution_limit",  # also what HiGHS reports when mip_max_nodes (node_limit) stops it
    17: "interrupt",
    18: "memory_limit",
    19: "highs_interrupt",
}

# scipy's own status (0 optimal, 1 time or iteration limit, 2 infeasible, 3 unbounded,
# 4 other) -> a HiGHS name, for a message that does not carry HiGHS's number.
_SCIPY_STATUS = {0: "optimal", 1: "time_limit", 2: "infeasible", 3: "unbounded", 4: "unknown"}
_STATUS_NUMBER = re.compile(r"HiGHS Status (\d+)")


def highs_model_status(scipy_status: int, message: str) -> str:
    """HiGHS's model status, by name, of a ``milp`` result.

    scipy folds HiGHS's statuses into five (a node limit and "unbounded or infeasible" both
    become 4, "other"); its message keeps HiGHS's number ("... (HiGHS Status 16: ...)"),
    which is read here. Without it, scipy's status is mapped as best it can be.
    """
    found = _STATUS_NUMBER.search(message or "")
    if found is not None:
        number = int(found.group(1))
        return HIGHS_MODEL_STATUS.get(number, f"status {number}")
    return _SCIPY_STATUS.get(int(scipy_status), f"scipy status {scipy_status}")


class LinExpr:
    """A linear expression: ``constant + sum(coefficient * column)``.

    Variables are expressions of one column. ``+``, ``-``, ``*`` by a number, and the
    comparisons ``<=``, ``>=``, ``==`` (which make a :class:`Row`) work as in a solver's
    modelling API; expressions are not hashable (``==`` builds a constraint).
    """

    __slots__ = ("constant", "terms")
    __array_ufunc__ = None  # numpy scalars defer to our reflected operators
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, terms: dict[int, float] | None = None, constant: float = 0.0):
        self.terms: dict[int, float] = terms if terms is not None else {}
        self.constant = float(constant)

    @staticmethod
    def of(value: Any) -> LinExpr:
        """``value`` (an expression or a number) as an expression."""
        if isinstance(value, LinExpr):
            return value
        return LinExpr(constant=_number(value))

    def copy(self) -> LinExpr:
        return LinExpr(dict(self.terms), self.constant)

    def add_in_place(self, other: Any, factor: float = 1.0) -> LinExpr:
        """Add ``factor * other`` to this expression (no copy); returns it."""
        if isinstance(other, LinExpr):
            terms = self.terms
            for column, coefficient in other.terms.items():
                terms[column] = terms.get(column, 0.0) + factor * coefficient
            self.constant += factor * other.constant
        else:
            self.constant += factor * _number(other)
        return self

    def __add__(self, other: Any) -> LinExpr:
        return self.copy().add_in_place(other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> LinExpr:
        return self.copy().add_in_place(other, -1.0)

    def __rsub__(self, other: Any) -> LinExpr:
        return LinExpr.of(other).copy().add_in_place(self, -1.0)

    def __neg__(self) -> LinExpr:
        return LinExpr({c: -v for c, v in self.terms.items()}, -self.constant)

    def __mul__(self, other: Any) -> LinExpr:
        if isinstance(other, LinExpr):
            raise TypeError("a product of two expressions is not linear")
        factor = _number(other)
        return LinExpr({c: factor * v for c, v in self.terms.items()}, factor * self.constant)

    __rmul__ = __mul__

    def __le__(self, other: Any) -> Row:
        diff = self - other
        return Row(diff.terms, -math.inf, -diff.constant)

    def __ge__(self, other: Any) -> Row:
        diff = self - other
        return Row(diff.terms, -diff.constant, math.inf)

    def __eq__(self, other: Any) -> Row:  # type: ignore[override]
        diff = self - other
        return Row(diff.terms, -diff.constant, -diff.constant)

    def value(self, x: np.ndarray) -> float:
        """The expression's value at the column values ``x``."""
        return self.constant + sum(v * float(x[c]) for c, v in self.terms.items())

    def __repr__(self) -> str:
        body = " + ".join(f"{v:g}*x{c}" for c, v in self.terms.items()) or "0"
        return f"LinExpr({body} + {self.constant:g})"


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"a linear expression takes numbers and expressions, got {type(value).__name__}")
    return float(value)


def linear_sum(terms: Iterable[Any]) -> LinExpr:
    """The sum of expressions and numbers, built in one pass (``sum`` would copy at every step)."""
    total = LinExpr()
    for term in terms:
        total.add_in_place(term)
    return total


class Row(NamedTuple):
    """A linear constraint ``lower <= sum(terms) <= upper``."""

    terms: dict[int, float]
    lower: float
    upper: float


@dataclass(frozen=True)
class MilpOutcome:
    """What HiGHS answered.

    ``status`` is HiGHS's model status by name (see :data:`HIGHS_MODEL_STATUS`); ``x`` the
    best solution's column values (None without one); ``objective`` its objective (``inf``
    without one); ``dual_bound`` HiGHS's proven lower bound (``-inf`` when scipy gives none,
    which it does whenever there is no solution); ``nodes`` the branch-and-bound nodes
    (0 when unknown).
    """

    status: str
    message: str
    x: np.ndarray | None
    objective: float
    dual_bound: float
    nodes: int

    def __post_init__(self) -> None:
        if self.x is not None:
            x = np.array(self.x, dtype=np.float64)
            x.setflags(write=False)
            object.__setattr__(self, "x", x)


class MilpModel:
    """Columns, rows and an objective, solved by ``scipy.optimize.milp``."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integral: list[bool] = []
        self.names: list[str] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []
        self.row_names: list[str] = []
        self._row_of: list[int] = []
        self._col_of: list[int] = []
        self._coefficients: list[float] = []
        self.objective = LinExpr()

    @property
    def columns(self) -> int:
        return len(self.lower)

    @property
    def rows(self) -> int:
        return len(self.row_lower)

    def variable(self, lower: float, upper: float, integral: bool, name: str) -> LinExpr:
        """A new column in ``[lower, upper]`` (integer when ``integral``)."""
        self.lower.append(float(lower))
        self.upper.append(float(upper))
        self.integral.append(bool(integral))
        self.names.append(name)
        return LinExpr({self.columns - 1: 1.0})

    def add(self, row: Row, name: str) -> None:
        """Add a constraint (a :class:`Row`, as ``expr <= value`` makes)."""
        if not isinstance(row, Row):
            raise TypeError(f"constraint {name!r} is a {type(row).__name__}, not a comparison of expressions")
        index = self.rows
        for column, coefficient in row.terms.items():
            if coefficient != 0.0:
                self._row_of.append(index)
                self._col_of.append(column)
                self._coefficients.append(coefficient)
        self.row_lower.append(row.lower)
        self.row_upper.append(row.upper)
        self.row_names.append(name)

    def minimize(self, expr: Any) -> None:
        self.objective = LinExpr.of(expr)

    def solve(self, time_limit: float, node_limit: int | None = None, display: bool = False) -> MilpOutcome:
        """Solve with HiGHS (see :func:`solve_milp`)."""
        c = np.zeros(self.columns)
        for column, coefficient in self.objective.terms.items():
            c[column] += coefficient
        matrix = csr_array(
            (self._coefficients, (self._row_of, self._col_of)),
            shape=(self.rows, self.columns),
            dtype=np.float64,
        )
        return solve_milp(
            c,
            np.asarray(self.integral, dtype=bool),
            np.asarray(self.lower),
            np.asarray(self.upper),
            matrix,
            np.asarray(self.row_lower),
            np.asarray(self.row_upper),
            time_limit,
            node_limit,
            display,
            constant=self.objective.constant,
        )


def solve_milp(
    c: np.ndarray,
    integral: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    matrix: Any,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    time_limit: float,
    node_limit: int | None = None,
    display: bool = False,
    *,
    constant: float = 0.0,
) -> MilpOutcome:
    """Minimise ``constant + c @ x`` subject to ``row_lower <= matrix @ x <= row_upper``,
    ``lower <= x <= upper`` and ``x`` whole where ``integral``, with HiGHS.

    Within ``time_limit`` seconds (``inf`` for none) and at most ``node_limit``
    branch-and-bound nodes (None for none). Both gaps are 0, so HiGHS stops on a proof (up to
    its feasibility tolerance, 1e-6) or a limit, never at a gap it was told to accept.
    """
    options: dict[str, Any] = {
        "disp": bool(display),
        "presolve": True,
        "mip_rel_gap": 0.0,
        # HiGHS's own absolute gap (1e-6 by default) would call a solution optimal with a
        # better one still possible: closed means closed.
        "mip_abs_gap": 0.0,
    }
    if math.isfinite(time_limit):
        options["time_limit"] = max(float(time_limit), 0.01)
    if node_limit is not None:
        options["node_limit"] = int(node_limit)
    constraints = [LinearConstraint(matrix, row_lower, row_upper)] if matrix.shape[0] else []
    with warnings.catch_warnings():
        # scipy warns that options it does not list (mip_abs_gap) go to HiGHS verbatim:
        # that is what is wanted here.
        warnings.filterwarnings("ignore", message="Unrecognized options", category=RuntimeWarning)
        res = milp(
            c,
            integrality=np.asarray(integral, dtype=np.int64),
            bounds=Bounds(lower, upper),
            constraints=constraints,
            options=options,
        )
    status = highs_model_status(res.status, str(res.message))
    x = None if res.x is None else np.asarray(res.x, dtype=np.float64)
    objective = math.inf if x is None or res.fun is None else float(res.fun) + constant
    dual = getattr(res, "mip_dual_bound", None)
    dual_bound = -math.inf if dual is None or not math.isfinite(dual) else float(dual) + constant
    nodes = getattr(res, "mip_node_count", None)
    return MilpOutcome(status, str(res.message), x, objective, dual_bound, int(nodes or 0))
