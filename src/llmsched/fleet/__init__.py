"""Fleets of engines: what a fleet is, what it ran, and the rules a fleet's run keeps.

A fleet is several engines (:class:`Engine`), each with its own cost model, clients,
policies, price per hour and mode (competition or fusion). A router sends each arriving request to one engine;
with backoff (:class:`Backoff`) an engine that runs dry pulls waiting requests from the
most loaded one, and a pulled request reaches it ``delay`` seconds later. The event loop
that runs a fleet is :mod:`llmsched.fleet.simulate`; here are the data and the validator.

A :class:`FleetSchedule` keeps every engine's :class:`~llmsched.engines.competition.schedule.Schedule` or
:class:`~llmsched.engines.fusion.schedule.FusedSchedule` (whose
workload holds the requests that engine ran, each arriving when it *reached* the engine)
and, per request of the fleet's workload, its engine, its index there, when it reached
it, and the engine it was pulled from (-1 when none). Latencies count from the request's
arrival at the fleet, so a pulled request's transfer is in its TTFT.
"""
