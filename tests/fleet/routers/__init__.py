"""Tests of the fleet's routers, one module per router, and what they share: loads to show one."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmsched.fleet.routers.base import Loads


def loads(
    engines: int,
    held: npt.ArrayLike | None = None,
    clients: npt.ArrayLike | None = None,
    work: npt.ArrayLike | None = None,
    rates: npt.ArrayLike | None = None,
    prompt_tokens: npt.ArrayLike | None = None,
) -> Loads:
    """The loads of ``engines`` engines: idle, one client each, free of cost, but for what is given."""
    return Loads(
        np.zeros(engines) if held is None else np.asarray(held, dtype=float),
        np.ones(engines) if clients is None else np.asarray(clients, dtype=float),
        np.zeros(engines) if work is None else np.asarray(work, dtype=float),
        np.zeros(engines) if prompt_tokens is None else np.asarray(prompt_tokens, dtype=float),
        np.zeros((engines, 2)) if rates is None else np.asarray(rates, dtype=float),
    )
