"""Admission at a fleet's door: load shedding by a TTFT target.

Past saturation every request waits behind the backlog, and a fleet that takes every request
lets every one miss its target: goodput collapses. An admission rule, asked as each request
arrives (after the router has chosen its engine), may turn it away instead; a rejected request
never reaches an engine, and the fleet's schedule reports it (``rejected``), so nothing is lost
from the accounts. Its TTFT, latency and gaps are NaN and count in no percentile; it meets no
target, so goodput counts it as not served.

:class:`TTFTAdmission` admits a request when the TTFT it can still expect is within its target:
the prompt tokens already waiting on the chosen engine, and its own, at the engine's prefill
speed (``Loads.rates``), against ``margin`` times ``ttft_base + ttft_per_token * prompt``.
An admission rule sees the request's prompt, the time and the engines' loads, nothing that has
not arrived: it is non-anticipative as routers are.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llmsched.core.checks import real
from llmsched.fleet.routers.base import Loads

__all__ = ["Admission", "TTFTAdmission"]


@runtime_checkable
class Admission(Protocol):
    """Whether a fleet takes a request: ``admit(prompt, engine, loads, now)`` is asked once per
    request, at its arrival, with the engine the router chose for it; False turns it away."""

    name: str

    def admit(self, prompt: int, engine: int, loads: Loads, now: float) -> bool: ...


class TTFTAdmission:
    """Admit a request when its expected TTFT is within its target.

    The expected TTFT of a request of ``p`` prompt tokens is ``(pending + p) * rate``:
    ``pending`` the prompt tokens on the chosen engine whose prefill has not ended
    (``Loads.pending_prompt_tokens``, or its held prompt tokens where the fleet does not count
    those apart), ``rate`` the engine's seconds per prompt token when busy
    (``Loads.rates[engine, 0]``). It is an estimate for engines whose prefill is what a request
    waits for (vLLM's 128 or more slots, long prompts): on an engine whose clients are all
    taken a request waits for one to free as well, which it does not see, and most of what it
    admits there may miss the target whatever the margin.

    Parameters
    ----------
    ttft_base, ttft_per_token
        The TTFT target of a request of ``p`` prompt tokens, ``ttft_base + ttft_per_token * p``
        seconds (both >= 0, not both 0).
    margin
        The share of the target the expected TTFT may take (> 0). The estimate leaves out each
        prefill stage's fixed time, the decoding between stages and a wait for a free client,
        so it runs short when the engine is busy; the default, half, keeps room for them.
    """

    name = "ttft"

    def __init__(self, ttft_base: float = 1.0, ttft_per_token: float = 0.0, margin: float = 0.5):
        self.ttft_base = real("ttft_base", ttft_base, low=0.0)
        self.ttft_per_token = real("ttft_per_token", ttft_per_token, low=0.0)
        if self.ttft_base == 0 and self.ttft_per_token == 0:
            raise ValueError("ttft_base and ttft_per_token are both 0: no request could meet its target")
        self.margin = real("margin", margin, low=0.0, low_open=True)

    def target(self, prompt: int) -> float:
        """The TTFT target of a request of ``prompt`` tokens, in seconds."""
        return self.ttft_base + self.ttft_per_token * prompt

    def admit(self, prompt: int, engine: int, loads: Loads, now: float) -> bool:
        pending = (
            loads.pending_prompt_tokens if loads.pending_prompt_tokens is not None else loads.prompt_tokens
        )
        expected = (float(pending[engine]) + prompt) * float(loads.rates[engine, 0])
        return expected <= self.margin * self.target(prompt)
