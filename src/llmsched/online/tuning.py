"""A threshold rule tuned by simulating the planned lengths before the run starts."""

from __future__ import annotations

import copy
from collections.abc import Callable

from llmsched.core.cost import CostModel
from llmsched.core.workload import Workload
from llmsched.engines.loop import simulate_policies
from llmsched.online.iteration import Threshold, known_k
from llmsched.online.registry import make_request_policy
from llmsched.policies import KnownRequests, RequestPolicy

__all__ = ["TunedThreshold"]


class TunedThreshold(Threshold):
    """A threshold rule whose k is tuned by simulation on the planned (predicted) lengths.

    At its first decision it simulates the requests known by then, as a batch at their
    arrival times, with their predicted outputs in place of the true ones (the policy never
    sees the truth, so the workload must carry predictions), for each candidate k, and
    keeps the one with the shortest makespan. On the paper's closed batch every request is
    known at the first decision. It does not tune again.

    Parameters
    ----------
    request_policy
        The request policy of the run: a registered name, a zero-argument factory, or a
        policy object (started afresh for every trial). Tuning must use the same one.
    candidates
        The k values to try; by default a geometric grid around the closed-form k*.
    """

    name = "threshold-tuned"

    def __init__(
        self,
        request_policy: str | Callable[[], RequestPolicy] | RequestPolicy = "fcfs",
        candidates: list[int] | None = None,
    ):
        super().__init__(None)
        if candidates is not None and (not candidates or any(int(c) < 1 for c in candidates)):
            raise ValueError(f"candidates must be a non-empty list of positive integers, got {candidates!r}")
        self.request_policy = request_policy
        self.candidates = None if candidates is None else [int(c) for c in candidates]
        self.trials: dict[int, float] = {}

    def _request_policy(self) -> RequestPolicy:
        policy = self.request_policy
        if isinstance(policy, str):
            return make_request_policy(policy)
        # A class has the protocol's methods too: it is a factory, not a policy object.
        if callable(policy) and (isinstance(policy, type) or not isinstance(policy, RequestPolicy)):
            return make_request_policy(policy())
        # An object may be the very one the run is using: the trials run on copies.
        return copy.deepcopy(make_request_policy(policy))

    def start(self, known: KnownRequests, cost: CostModel, clients: int) -> None:
        super().start(known, cost, clients)
        known.planned_output("predicted")  # ValueError now: tuning on the truth is not allowed
        self._settled = False
        self._tuned = False
        self.trials = {}

    def _current_k(self) -> int:
        if not self._tuned:
            self.tune()
        return self.k if self.k is not None else 1

    def tune(self) -> None:
        """Tune k now, on the requests known so far (the first decision does it otherwise)."""
        known, cost, clients = self._known, self._cost, self._clients
        ids = sorted(known.arrived)
        predicted = known.planned_output("predicted")
        lengths = [predicted[i] for i in ids]
        # The predictions stay attached (as the true lengths of the trials too): a request
        # policy that plans with predictions needs them, as it does in the run.
        planned = Workload(
            [known.prompt_tokens[i] for i in ids],
            lengths,
            predicted_output=lengths,
            arrival=[known.arrival[i] for i in ids],
            name=known.name,
        )
        base = known_k(known, cost, clients)
        grid = self.candidates or sorted(
            {max(1, min(clients, round(base * f))) for f in (0.25, 0.5, 0.7, 1.0, 1.4, 2.0, 3.0)}
        )
        self.trials = {}
        for k in grid:
            schedule = simulate_policies(planned, cost, clients, self._request_policy(), Threshold(k))
            self.trials[k] = schedule.makespan
        self.k = min(self.trials, key=lambda k: (self.trials[k], k))
        self._tuned = True
