"""Join the shortest queue: the engine holding the fewest requests per client."""

from __future__ import annotations

import numpy as np

from llmsched.fleet.routers.base import BaseRouter, Loads

__all__ = ["JsqRouter"]


class JsqRouter(BaseRouter):
    """Sends each request to the engine with the fewest requests held (waiting, in prefill or
    decoding) per client; ties to the lowest index."""

    name = "jsq"

    def route(self, request: int, loads: Loads) -> int:
        return int(np.argmin(loads.requests / loads.clients))
