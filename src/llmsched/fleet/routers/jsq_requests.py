"""Join the shortest queue counted in requests: Splitwise's rule for its token pool."""

from __future__ import annotations

from llmsched.fleet.routers.base import BaseRouter, Loads

__all__ = ["JsqRequestsRouter"]


class JsqRequestsRouter(BaseRouter):
    """Sends each request to the engine holding the fewest requests
    (:attr:`~llmsched.fleet.routers.base.Loads.requests`: on a disaggregated cluster's token
    machine, the requests decoding, waiting for a client or on their way); ties to the lowest
    index.

    Among engines of equal clients (a disaggregated cluster's token pool) it chooses as ``jsq``
    does, which counts requests per client, with one array operation less per request.
    """

    name = "jsq-requests"

    def route(self, request: int, loads: Loads) -> int:
        return int(loads.requests.argmin())
