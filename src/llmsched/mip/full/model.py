"""The full deterministic MIP of PD-competition inference (Pang et al., Eqs. 1-25).

Two formulations of one problem, over one small backend interface so that SCIP and CP-SAT
build the same constraints:

``literal``
    The paper's variables, per request ``i``, client ``j`` and bin ``k``: ``x[i,j]``,
    ``p[i,j,k]`` (prefill), ``d[i,j,k]`` (decode), the decode share ``w[i,j,k]`` kept as
    whole tokens ``u[i,j,k] = N^d_i w[i,j,k]``, the levels ``y[k,l]``, stage starts and
    lengths and ``t_max``, with the big-M rules (10)-(11) at the paper's loose ``M``.
``strong``
    The same schedules without client indices. Clients are interchangeable and a request
    holds one from its prefill bin to its finishing bin, so a plan whose every bin has at
    most ``J`` requests active can always be given clients (intervals of bins colour with as
    many colours as their largest overlap). Per request and bin: ``p[i,k]`` (prefilled in
    bin k), ``f[i,k]`` (finishes in bin k), tokens ``u[i,k]``; per bin the level ``y[k,l]``
    and the decode iterations ``D[k]``. Used bins come first, identical requests are
    prefilled in index order, every big-M is the tightest valid one, and the makespan
    lower bound and the least number of decode iterations are cuts.

Deviations from the paper's text, each where its text is ambiguous or wrong (see the
documentation's page on the full MIP):

* (8) is read per client: a decode stage lasts at least ``T^d`` times the tokens any one
  client decodes in it. The decode share is in whole tokens (an iteration makes one).
* (9)-(11) say that decoding follows the prefill and runs in consecutive decode stages.
  The paper's model lets a request decode fewer tokens in a stage than the stage lasts and
  carry on in the next one, which the system model forbids (only a prefill pauses a
  decode); we add that a request that decodes in stage k and k+1 decodes through all of
  stage k, that a decode stage assigned to a request holds at least one of its tokens, and
  that tokens are decoded only in stages assigned to the request (``w <= d``).
* (11) is read as "no decode stage before the prefill stage": ``d[i,j,k2] <= M (1 -
  p[i,j,k1])`` for ``k2 < k1``.
* (13) is read as ``sum_k d[i,j,k] <= K x[i,j]`` (decoding only on the assigned client); its
  printed form bounds a sum over k by K for every (i, j), which says nothing.
* (17) is read as ``sum_k p[i,j,k] = x[i,j]`` for every (i, j): prefilled once, on the
  assigned client. The printed index ("for j, k") would let a request be prefilled in no
  stage at all.
* (20) declares ``y[k,l]`` binary "for k and j"; it is ``for k and l``.
* A prefill stage may hold no request (its bin is unused) and then costs nothing: (5) only
  charges the level chosen, and (6)-(7) allow none.

Like the paper's, the model is of an offline batch: every request is there at time 0
(:func:`~llmsched.mip.solve_full` refuses arrivals).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llmsched.core.cost import LevelCostModel
from llmsched.core.workload import Workload

if TYPE_CHECKING:
    from llmsched.core.result import Tracer

__all__ = [
    "FORMULATIONS",
    "Backend",
    "BuildStopped",
    "Deadline",
    "FullData",
    "LiteralModel",
    "Plan",
    "SolveJob",
    "StrongModel",
    "build_model",
    "floor_units",
    "time_scale",
]

FORMULATIONS = ("strong", "literal")


@dataclass(frozen=True)
class FullData:
    """One instance of the full MIP: requests, clients, bins, levels, decode time."""

    workload: Workload
    cost: LevelCostModel
    clients: int
    bins: int
    upper_bound: float  # makespan of a known schedule (for horizons and bin counts)
    lower_bound: float  # a valid makespan lower bound
    min_decode_iterations: int  # decode iterations every schedule needs

    @property
    def n(self) -> int:
        return len(self.workload)

    @property
    def caps(self) -> list[int]:
        return [lv.capacity for lv in self.cost.levels]

    @property
    def level_times(self) -> list[float]:
        return [lv.time for lv in self.cost.levels]


class Backend(Protocol):
    """What a formulation needs from a solver: variables, linear constraints, an objective.

    ``time`` turns seconds into the model's time unit (seconds for SCIP; whole units of a
    fixed scale for CP-SAT, rounded down so that every model time is a lower estimate).
    """

    def binary(self, name: str) -> Any:
        """A new 0-1 variable."""
        ...

    def integer(self, lb: int, ub: int, name: str) -> Any:
        """A new integer variable in ``[lb, ub]``."""
        ...

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        """A new variable of seconds in ``[lb, ub]`` (model units)."""
        ...

    def add(self, constraint: Any, name: str) -> None:
        """Add a linear constraint."""
        ...

    def minimize(self, expr: Any) -> None:
        """Set the objective."""
        ...

    def sum(self, terms: Iterable[Any]) -> Any:
        """The sum of linear terms."""
        ...

    def time(self, seconds: float) -> Any:
        """``seconds`` in the model's time unit."""
        ...


class BuildStopped(Exception):
    """A model build abandoned because its deadline passed (see :class:`Deadline`)."""


class Deadline:
    """A backend that stops the build once ``expired()`` is true.

    Building the literal formulation can take longer than any sensible time limit (its
    rule (10) has O(n J K^3) terms), so the clock is consulted before every variable and
    constraint; :class:`BuildStopped` then unwinds the build. The model is the same as
    without the wrapper whenever the build finishes.
    """

    def __init__(self, backend: Backend, expired: Callable[[], bool]):
        self.backend = backend
        self.expired = expired

    def _check(self, name: str) -> None:
        if self.expired():
            raise BuildStopped(f"the time limit passed while building the model (at {name})")

    def binary(self, name: str) -> Any:
        self._check(name)
        return self.backend.binary(name)

    def integer(self, lb: int, ub: int, name: str) -> Any:
        self._check(name)
        return self.backend.integer(lb, ub, name)

    def continuous(self, lb: float, ub: float, name: str) -> Any:
        self._check(name)
        return self.backend.continuous(lb, ub, name)

    def add(self, constraint: Any, name: str) -> None:
        self._check(name)
        self.backend.add(constraint, name)

    def minimize(self, expr: Any) -> None:
        self.backend.minimize(expr)

    def sum(self, terms: Iterable[Any]) -> Any:
        return self.backend.sum(terms)

    def time(self, seconds: float) -> Any:
        return self.backend.time(seconds)


@dataclass
class _Model:
    data: FullData
    backend: Backend
    vars: dict[str, dict[Any, Any]] = field(default_factory=dict)

    def family(self, name: str) -> dict[Any, Any]:
        return self.vars.setdefault(name, {})

    def build(self) -> None:
        raise NotImplementedError

    def plan_from(self, value: Callable[[Any], float]) -> Plan:
        raise NotImplementedError

    def values_from_plan(self, plan: Plan, client: np.ndarray | None = None) -> list[tuple[Any, float]]:
        raise NotImplementedError


# ---------------------------------------------------------------------------- strong
class StrongModel(_Model):
    """Client-free formulation with tight constants (see the module docstring)."""

    def build(self) -> None:
        d, b = self.data, self.backend
        n, K, L = d.n, d.bins, len(d.caps)
        out = d.workload.output_tokens.tolist()
        dmax = max(out)
        p, f, u = self.family("p"), self.family("f"), self.family("u")
        y, D = self.family("y"), self.family("D")
        for i in range(n):
            for k in range(K):
                p[i, k] = b.binary(f"p[{i},{k}]")
                f[i, k] = b.binary(f"f[{i},{k}]")
                u[i, k] = b.integer(0, out[i], f"u[{i},{k}]")
        for k in range(K):
            for lv in range(L):
                y[k, lv] = b.binary(f"y[{k},{lv}]")
            D[k] = b.integer(0, dmax, f"D[{k}]")
        # a[i,k] = 1 while request i holds a client in bin k: a[i,k] = a[i,k-1] + p[i,k] - f[i,k-1]
        # (kept as variables so that each constraint stays short).
        a = self.family("a")
        for i in range(n):
            for k in range(K):
                a[i, k] = b.binary(f"a[{i},{k}]")
                before = a[i, k - 1] - f[i, k - 1] if k else 0
                b.add(a[i, k] == before + p[i, k], f"active({i},{k})")
        # R[k]: decode iterations from bin k to the end (for the tail cuts).
        R = self.family("R")
        for k in reversed(range(K)):
            R[k] = b.integer(0, dmax * (K - k), f"R[{k}]")
            b.add(R[k] == D[k] + (R[k + 1] if k + 1 < K else 0), f"remaining({k})")
        self.objective_expr = b.sum(
            b.time(t) * y[k, lv] for k in range(K) for lv, t in enumerate(d.level_times)
        )
        self.objective_expr = self.objective_expr + b.sum(
            b.time(d.cost.decode_token_time) * D[k] for k in range(K)
        )
        self.eq1_objective()
        self.eq5_7_levels()
        self.eq8_decode_length()
        self.eq9_11_continuity()
        self.eq12_16_clients()
        self.eq14_15_tokens()
        self.eq17_18_prefill_once()
        self.symmetry()
        self.cuts()

    def active(self, i: int, k: int) -> Any:
        """1 when request i holds a client in bin k (prefilled in or before k, not finished before k)."""
        return self.vars["a"][i, k]

    def eq1_objective(self) -> None:
        """(1)-(5): t_max is the sum of the bins' prefill and decode stages (stages run back to back)."""
        self.backend.minimize(self.objective_expr)

    def eq5_7_levels(self) -> None:
        """(5)-(7): a bin's prefill stage runs at one level or none, holding its prompt tokens."""
        d, b = self.data, self.backend
        p, y = self.vars["p"], self.vars["y"]
        prompt = d.workload.prompt_tokens.tolist()
        L = len(d.caps)
        for k in range(d.bins):
            b.add(b.sum(y[k, lv] for lv in range(L)) <= 1, f"eq7_one_level({k})")
            b.add(
                b.sum(prompt[i] * p[i, k] for i in range(d.n))
                <= b.sum(d.caps[lv] * y[k, lv] for lv in range(L)),
                f"eq6_capacity({k})",
            )
            # A level is paid only by a bin that prefills something.
            b.add(b.sum(p[i, k] for i in range(d.n)) >= b.sum(y[k, lv] for lv in range(L)), f"used({k})")

    def eq8_decode_length(self) -> None:
        """(8): a decode stage lasts as many iterations as any request decodes in it."""
        d, b = self.data, self.backend
        u, D = self.vars["u"], self.vars["D"]
        for i in range(d.n):
            for k in range(d.bins):
                b.add(u[i, k] <= D[k], f"eq8_length({i},{k})")

    def eq9_11_continuity(self) -> None:
        """(9)-(11): decoding starts in the prefill bin and runs through every iteration until done.

        Finishing comes after prefilling; an active request decodes at least one token, and
        one that does not finish in bin k decodes all D[k] iterations of it (big-M: the
        longest output, the most iterations a stage can need).
        """
        d, b = self.data, self.backend
        f, u, D = self.vars["f"], self.vars["u"], self.vars["D"]
        out = d.workload.output_tokens.tolist()
        dmax = max(out)
        for i in range(d.n):
            for k in range(d.bins):
                a = self.active(i, k)
                b.add(f[i, k] <= a, f"eq9_finish_while_active({i},{k})")
                b.add(u[i, k] <= out[i] * a, f"eq10_only_active({i},{k})")
                b.add(u[i, k] >= a, f"eq10_first_token({i},{k})")
                b.add(u[i, k] >= D[k] - dmax * (1 - a + f[i, k]), f"eq11_full_stage({i},{k})")

    def eq12_16_clients(self) -> None:
        """(12), (16): at most J requests hold a client in any bin."""
        d, b = self.data, self.backend
        for k in range(d.bins):
            b.add(b.sum(self.active(i, k) for i in range(d.n)) <= d.clients, f"eq12_clients({k})")

    def eq14_15_tokens(self) -> None:
        """(14)-(15): every request decodes all its output tokens."""
        d, b = self.data, self.backend
        u = self.vars["u"]
        out = d.workload.output_tokens.tolist()
        for i in range(d.n):
            b.add(b.sum(u[i, k] for k in range(d.bins)) == out[i], f"eq15_tokens({i})")

    def eq17_18_prefill_once(self) -> None:
        """(17)-(18): every request is prefilled in one bin and finishes in one bin."""
        d, b = self.data, self.backend
        p, f = self.vars["p"], self.vars["f"]
        for i in range(d.n):
            b.add(b.sum(p[i, k] for k in range(d.bins)) == 1, f"eq17_prefill_once({i})")
            b.add(b.sum(f[i, k] for k in range(d.bins)) == 1, f"finish_once({i})")

    def symmetry(self) -> None:
        """Used bins first, unused bins decode nothing, identical requests in index order."""
        d, b = self.data, self.backend
        p, y, D = self.vars["p"], self.vars["y"], self.vars["D"]
        L = len(d.caps)
        dmax = int(d.workload.output_tokens.max())
        for k in range(d.bins):
            used = b.sum(y[k, lv] for lv in range(L))
            b.add(D[k] <= dmax * used, f"unused_decodes_nothing({k})")
            if k + 1 < d.bins:
                b.add(used >= b.sum(y[k + 1, lv] for lv in range(L)), f"used_first({k})")
        wl = d.workload
        key = np.stack([wl.prompt_tokens, wl.output_tokens], axis=1)
        for i in range(d.n - 1):
            for j in range(i + 1, d.n):
                if np.array_equal(key[i], key[j]):
                    b.add(
                        b.sum(k * p[i, k] for k in range(d.bins))
                        <= b.sum(k * p[j, k] for k in range(d.bins)),
                        f"identical({i},{j})",
                    )
                    break

    def cuts(self) -> None:
        """Valid inequalities that tighten the LP relaxation.

        The makespan lower bound and the least number of decode iterations; per bin, at most
        J requests decode at most D[k] tokens each and at most J requests are prefilled; a
        request prefilled in bin k needs N^d_i iterations from bin k on.
        """
        d, b = self.data, self.backend
        p, u, y, D = self.vars["p"], self.vars["u"], self.vars["y"], self.vars["D"]
        out = d.workload.output_tokens.tolist()
        L = len(d.caps)
        b.add(b.sum(D[k] for k in range(d.bins)) >= d.min_decode_iterations, "cut_iterations")
        b.add(self.objective_expr >= b.time(d.lower_bound), "cut_lower_bound")
        for k in range(d.bins):
            b.add(b.sum(u[i, k] for i in range(d.n)) <= d.clients * D[k], f"cut_bin_tokens({k})")
            b.add(
                b.sum(p[i, k] for i in range(d.n)) <= d.clients * b.sum(y[k, lv] for lv in range(L)),
                f"cut_bin_prefills({k})",
            )
            for i in range(d.n):
                b.add(self.vars["R"][k] >= out[i] * p[i, k], f"cut_tail({i},{k})")

    # ------------------------------------------------------------------ warm start
    def values_from_plan(self, plan: Plan, client: np.ndarray | None = None) -> list[tuple[Any, float]]:
        """Variable values of a plan (for a warm start; this formulation has no clients).

        Identical requests are interchangeable: their rows are reordered so that they are
        prefilled in index order, as the symmetry constraints ask.
        """
        d = self.data
        plan = _identical_in_order(plan, d.workload)
        vals = _Values()
        p, f, u, y, D = (self.vars[name] for name in ("p", "f", "u", "y", "D"))
        for i in range(d.n):
            for k in range(d.bins):
                vals[p[i, k]] = int(plan.prefill_bin[i] == k)
                vals[f[i, k]] = int(plan.finish_bin[i] == k)
                vals[u[i, k]] = int(plan.tokens[i, k]) if k < plan.bins else 0
        a, R = self.vars["a"], self.vars["R"]
        for i in range(d.n):
            for k in range(d.bins):
                vals[a[i, k]] = int(plan.prefill_bin[i] <= k <= plan.finish_bin[i])
        iterations = [int(plan.iterations[k]) if k < plan.bins else 0 for k in range(d.bins)]
        for k in range(d.bins):
            level = plan.level[k] if k < plan.bins else -1
            for lv in range(len(d.caps)):
                vals[y[k, lv]] = int(level == lv)
            vals[D[k]] = iterations[k]
            vals[R[k]] = sum(iterations[k:])
        return vals.pairs

    def plan_from(self, value: Callable[[Any], float]) -> Plan:
        """The plan a solution describes (``value(var)`` reads a variable)."""
        d = self.data
        p, u, D, y = self.vars["p"], self.vars["u"], self.vars["D"], self.vars["y"]
        prefill_bin = np.array([int(np.argmax([value(p[i, k]) for k in range(d.bins)])) for i in range(d.n)])
        tokens = np.array(
            [[round(value(u[i, k])) for k in range(d.bins)] for i in range(d.n)], dtype=np.int64
        )
        iterations = np.array([round(value(D[k])) for k in range(d.bins)], dtype=np.int64)
        level = np.array(
            [next((lv for lv in range(len(d.caps)) if value(y[k, lv]) > 0.5), -1) for k in range(d.bins)]
        )
        return Plan.make(prefill_bin, tokens, iterations, level)


# --------------------------------------------------------------------------- literal
class LiteralModel(_Model):
    """The paper's formulation with per-client variables and its big-M constants."""

    def build(self) -> None:
        d, b = self.data, self.backend
        n, J, K, L = d.n, d.clients, d.bins, len(d.caps)
        out = d.workload.output_tokens.tolist()
        horizon = d.upper_bound
        self.big_m = K  # the paper's M: any constant large enough; K suffices for (10)-(11)
        x, p, dd, u = self.family("x"), self.family("p"), self.family("d"), self.family("u")
        y = self.family("y")
        tsp, tsd, npk, ndk = self.family("tsp"), self.family("tsd"), self.family("np"), self.family("nd")
        for i in range(n):
            for j in range(J):
                x[i, j] = b.binary(f"x[{i},{j}]")
                for k in range(K):
                    p[i, j, k] = b.binary(f"p[{i},{j},{k}]")
                    dd[i, j, k] = b.binary(f"d[{i},{j},{k}]")
                    u[i, j, k] = b.integer(0, out[i], f"u[{i},{j},{k}]")
        for k in range(K):
            for lv in range(L):
                y[k, lv] = b.binary(f"y[{k},{lv}]")
            tsp[k] = b.continuous(0.0, horizon, f"ts_p[{k}]")
            tsd[k] = b.continuous(0.0, horizon, f"ts_d[{k}]")
            npk[k] = b.continuous(0.0, horizon, f"n_p[{k}]")
            ndk[k] = b.continuous(0.0, horizon, f"n_d[{k}]")
        self.tmax = b.continuous(0.0, horizon, "t_max")

        self.eq1_objective()
        self.eq2_4_stage_times()
        self.eq5_7_levels()
        self.eq8_decode_length()
        self.eq9_11_continuity()
        self.eq12_18_assignment()

    def eq1_objective(self) -> None:
        """(1): minimise t_max."""
        self.backend.minimize(self.tmax)

    def eq2_4_stage_times(self) -> None:
        """(2)-(4): t_max after every decode stage, a prefill after the decode before it, a decode
        after its prefill."""
        d, b = self.data, self.backend
        tsp, tsd, npk, ndk = (self.vars[name] for name in ("tsp", "tsd", "np", "nd"))
        for k in range(d.bins):
            b.add(self.tmax >= tsd[k] + ndk[k], f"eq2({k})")
            if k:
                b.add(tsp[k] >= tsd[k - 1] + ndk[k - 1], f"eq3({k})")
            b.add(tsd[k] >= tsp[k] + npk[k], f"eq4({k})")

    def eq5_7_levels(self) -> None:
        """(5)-(7): a prefill stage lasts its level's time and holds at most its capacity."""
        d, b = self.data, self.backend
        p, y, npk = self.vars["p"], self.vars["y"], self.vars["np"]
        prompt = d.workload.prompt_tokens.tolist()
        L = len(d.caps)
        for k in range(d.bins):
            b.add(npk[k] >= b.sum(b.time(t) * y[k, lv] for lv, t in enumerate(d.level_times)), f"eq5({k})")
            b.add(
                b.sum(prompt[i] * p[i, j, k] for i in range(d.n) for j in range(d.clients))
                <= b.sum(d.caps[lv] * y[k, lv] for lv in range(L)),
                f"eq6({k})",
            )
            b.add(b.sum(y[k, lv] for lv in range(L)) <= 1, f"eq7({k})")

    def eq8_decode_length(self) -> None:
        """(8): a decode stage lasts T^d times the tokens any one client decodes in it."""
        d, b = self.data, self.backend
        u, ndk = self.vars["u"], self.vars["nd"]
        td = b.time(d.cost.decode_token_time)
        for j in range(d.clients):
            for k in range(d.bins):
                b.add(ndk[k] >= td * b.sum(u[i, j, k] for i in range(d.n)), f"eq8({j},{k})")

    def eq9_11_continuity(self) -> None:
        """(9)-(11) and the full-stage rule: decoding follows the prefill, in consecutive stages,
        through every iteration of a stage the request outlasts."""
        d, b = self.data, self.backend
        p, dd, u, ndk = self.vars["p"], self.vars["d"], self.vars["u"], self.vars["nd"]
        out = d.workload.output_tokens.tolist()
        td = b.time(d.cost.decode_token_time)
        M = self.big_m
        horizon = b.time(d.upper_bound)
        K = d.bins
        for i in range(d.n):
            for j in range(d.clients):
                for k in range(K):
                    b.add(dd[i, j, k] >= p[i, j, k], f"eq9({i},{j},{k})")
                    b.add(u[i, j, k] <= out[i] * dd[i, j, k], f"w_le_d({i},{j},{k})")
                    b.add(u[i, j, k] >= dd[i, j, k], f"token_per_stage({i},{j},{k})")
                    if k + 1 < K:
                        b.add(
                            td * u[i, j, k] >= ndk[k] - horizon * (2 - dd[i, j, k] - dd[i, j, k + 1]),
                            f"full_stage({i},{j},{k})",
                        )
                for k1 in range(K):
                    for k2 in range(k1 + 2, K):
                        b.add(
                            M * (2 - dd[i, j, k1] - dd[i, j, k2])
                            + b.sum(dd[i, j, k] for k in range(k1, k2 + 1))
                            >= k2 - k1 + 1,
                            f"eq10({i},{j},{k1},{k2})",
                        )
                    for k2 in range(k1):
                        b.add(dd[i, j, k2] <= M * (1 - p[i, j, k1]), f"eq11({i},{j},{k1},{k2})")

    def eq12_18_assignment(self) -> None:
        """(12)-(18): one request per client and stage; prefilled once, decoded only, on its client."""
        d, b = self.data, self.backend
        x, p, dd, u = self.vars["x"], self.vars["p"], self.vars["d"], self.vars["u"]
        out = d.workload.output_tokens.tolist()
        n, J, K = d.n, d.clients, d.bins
        for j in range(J):
            for k in range(K):
                b.add(b.sum(dd[i, j, k] for i in range(n)) <= 1, f"eq12({j},{k})")
                b.add(b.sum(p[i, j, k] for i in range(n)) <= 1, f"eq16({j},{k})")
        for i in range(n):
            for j in range(J):
                b.add(b.sum(dd[i, j, k] for k in range(K)) <= K * x[i, j], f"eq13({i},{j})")
                b.add(b.sum(u[i, j, k] for k in range(K)) == out[i] * x[i, j], f"eq14({i},{j})")
                b.add(b.sum(p[i, j, k] for k in range(K)) == x[i, j], f"eq17({i},{j})")
            b.add(b.sum(u[i, j, k] for j in range(J) for k in range(K)) == out[i], f"eq15({i})")
            b.add(b.sum(x[i, j] for j in range(J)) == 1, f"eq18({i})")

    # ------------------------------------------------------------------ warm start
    def values_from_plan(self, plan: Plan, client: np.ndarray | None = None) -> list[tuple[Any, float]]:
        """Variable values of a plan with each request's client (for a warm start; times in
        model units)."""
        if client is None:
            raise ValueError("the literal formulation's warm start needs each request's client")
        d = self.data
        vals = _Values()
        x, p, dd, u, y = (self.vars[name] for name in ("x", "p", "d", "u", "y"))
        for i in range(d.n):
            for j in range(d.clients):
                mine = int(client[i]) == j
                vals[x[i, j]] = int(mine)
                for k in range(d.bins):
                    tok = int(plan.tokens[i, k]) if mine and k < plan.bins else 0
                    vals[p[i, j, k]] = int(mine and plan.prefill_bin[i] == k)
                    vals[dd[i, j, k]] = int(tok > 0)
                    vals[u[i, j, k]] = tok
        t = 0.0
        times = d.level_times
        for k in range(d.bins):
            level = plan.level[k] if k < plan.bins else -1
            for lv in range(len(d.caps)):
                vals[y[k, lv]] = int(level == lv)
            prefill = times[level] if level >= 0 else 0.0
            decode = d.cost.decode_token_time * (int(plan.iterations[k]) if k < plan.bins else 0)
            unit = self.backend.time
            vals[self.vars["tsp"][k]] = unit(t)
            vals[self.vars["np"][k]] = unit(prefill)
            vals[self.vars["tsd"][k]] = unit(t + prefill)
            vals[self.vars["nd"][k]] = unit(decode)
            t += prefill + decode
        vals[self.tmax] = self.backend.time(t)
        return vals.pairs

    def plan_from(self, value: Callable[[Any], float]) -> Plan:
        """The plan a solution describes (``value(var)`` reads a variable)."""
        d = self.data
        p, u, y = self.vars["p"], self.vars["u"], self.vars["y"]
        J, K = d.clients, d.bins
        prefill_bin = np.array(
            [int(np.argmax([sum(value(p[i, j, k]) for j in range(J)) for k in range(K)])) for i in range(d.n)]
        )
        tokens = np.array(
            [[sum(round(value(u[i, j, k])) for j in range(J)) for k in range(K)] for i in range(d.n)],
            dtype=np.int64,
        )
        iterations = tokens.max(axis=0) if d.n else np.zeros(K, dtype=np.int64)
        level = np.array(
            [next((lv for lv in range(len(d.caps)) if value(y[k, lv]) > 0.5), -1) for k in range(K)]
        )
        return Plan.make(prefill_bin, tokens, iterations, level)


def _identical_in_order(plan: Plan, workload: Workload) -> Plan:
    """The plan with the rows of identical requests permuted so their prefill bins ascend."""
    order = np.arange(len(workload))
    key = np.stack([workload.prompt_tokens, workload.output_tokens], axis=1)
    _, group = np.unique(key, axis=0, return_inverse=True)
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        if members.size > 1:
            order[members] = members[np.argsort(plan.prefill_bin[members], kind="stable")]
    return Plan.make(plan.prefill_bin[order], plan.tokens[order], plan.iterations, plan.level)


class _Values:
    """(variable, value) pairs collected with item assignment (solver variables are not hashable)."""

    def __init__(self) -> None:
        self.pairs: list[tuple[Any, float]] = []

    def __setitem__(self, var: Any, value: float) -> None:
        self.pairs.append((var, float(value)))


# ------------------------------------------------------------------------------ plans
@dataclass(frozen=True)
class Plan:
    """A schedule in the MIP's terms: per request its prefill bin and tokens per bin; per bin
    its decode iterations and level (-1: none). Arrays are read-only."""

    prefill_bin: np.ndarray
    tokens: np.ndarray  # (n, bins)
    iterations: np.ndarray
    level: np.ndarray
    finish_bin: np.ndarray

    @property
    def bins(self) -> int:
        return int(self.iterations.size)

    @classmethod
    def make(cls, prefill_bin: Any, tokens: Any, iterations: Any, level: Any) -> Plan:
        """A plan from its arrays; ``finish_bin`` is each request's last bin with a token."""
        tok = np.array(tokens, dtype=np.int64)
        last = np.array([np.flatnonzero(row)[-1] if np.any(row) else -1 for row in tok], dtype=np.int64)
        arrays = (
            np.array(prefill_bin, dtype=np.int64),
            tok,
            np.array(iterations, dtype=np.int64),
            np.array(level, dtype=np.int64),
            last,
        )
        for arr in arrays:
            arr.setflags(write=False)
        return cls(*arrays)


def time_scale(values: Iterable[float]) -> tuple[int, bool]:
    """The smallest power of ten (up to 10^9) making every value a whole number of units, and
    whether it is exact; CP-SAT works in those units."""
    vals = [float(v) for v in values]
    for exponent in range(0, 10):
        scale = 10**exponent
        if all(abs(v * scale - round(v * scale)) <= 1e-6 for v in vals):
            return scale, True
    return 10**9, False


def floor_units(seconds: float, scale: int) -> int:
    """``seconds`` in units of ``1/scale`` s, rounded down (so model times never overestimate)."""
    return math.floor(seconds * scale + 1e-6)


MODELS: dict[str, type[StrongModel] | type[LiteralModel]] = {"strong": StrongModel, "literal": LiteralModel}


def build_model(data: FullData, formulation: str, backend: Backend) -> StrongModel | LiteralModel:
    """The ``formulation`` of ``data`` built on ``backend`` (:class:`BuildStopped` when a
    :class:`Deadline` backend runs out of time)."""
    model = MODELS[formulation](data, backend)
    model.build()
    return model


def build_before(
    data: FullData, formulation: str, backend: Backend, expired: Callable[[], bool]
) -> StrongModel | LiteralModel | None:
    """:func:`build_model` on ``backend`` under a :class:`Deadline` of ``expired``: the
    model, or None when the time limit passed during the build or right after it (each
    backend then reports ``time_limit``)."""
    try:
        model = build_model(data, formulation, Deadline(backend, expired))
    except BuildStopped:
        return None
    return None if expired() else model


@dataclass(frozen=True)
class SolveJob:
    """What :func:`~llmsched.mip.solve_full` hands a backend's ``solve``, which builds the
    formulation and returns the status and the plan of its best solution (None without one).

    Attributes
    ----------
    data
        The instance.
    formulation
        One of :data:`FORMULATIONS`.
    tracer
        The time limit, and where the incumbents and bounds go.
    start
        A warm start, a plan and each request's client; None: none.
    work_limit
        The deterministic limit in the backend's unit (branch-and-bound nodes, CP-SAT's
        deterministic time); None: none.
    workers
        Search workers (more than 1 only for CP-SAT).
    display
        Print the solver's log.
    """

    data: FullData
    formulation: str
    tracer: Tracer
    start: tuple[Plan, np.ndarray] | None = None
    work_limit: float | None = None
    workers: int = 1
    display: bool = False

    def build(self, backend: Backend) -> StrongModel | LiteralModel | None:
        """The formulation built on ``backend`` within the tracer's time: the model, or None
        when the time ran out (see :func:`build_before`)."""
        return build_before(self.data, self.formulation, backend, self.tracer.expired)
