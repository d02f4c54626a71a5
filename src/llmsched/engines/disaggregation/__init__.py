"""PD disaggregation (Splitwise): prompt machines, a KV transfer, token machines; the
cluster, its schedule, its validator and its lower bound.

A request is prefilled on a *prompt machine* (prefill stages only, up to that machine's
prefill capacity, in the order its request policy takes them: first come first served by
default), and its keys and values are then sent to a
*token machine*, which decodes it with continuous batching (every decoding request in every
iteration, up to the machine's clients). The transfer moves ``kv_bytes_per_token`` bytes per
prompt token over a link of ``kv_bandwidth`` GB/s: ``x = bytes / bandwidth`` seconds.
Without overlap it starts when the prefill stage ends. With Splitwise's per-layer overlap,
layer ``l``'s keys and values leave as soon as the stage has computed that layer (the stage's
time spread evenly over ``layers``), so what remains after the stage ends is
``max(x / layers, x - S (layers - 1) / layers)`` for a stage of ``S`` seconds
(:func:`transfer_seconds`). Links are not shared: each request's transfer has the bandwidth
to itself.

A request's first token comes at the end of its prefill stage, as under competition; its
next ``output_tokens`` come from the token machine's iterations, the first of them after the
transfer (so the transfer and any wait for a slot fall in its first gap between tokens).

With ``mixed=True`` the cluster lends idle machines of one pool to the other under load
(Splitwise's mixed pool). A token machine with nothing to decode, nothing waiting and nothing
on its way takes a prefill stage from the most loaded prompt queue when it holds more than one
stage's worth of tokens, and then decodes those requests itself, with no transfer. When every
token machine is full (as many requests decoding, waiting or on their way as it has clients),
a request leaving a prompt machine goes to an idle prompt machine instead (no stage, no queue),
which decodes it with the prompt pool's cost model and takes no stage of its own until its
decoding is done. A lent machine runs one phase at a time, as under competition.

:func:`llmsched.simulate_disaggregated` runs a workload on a cluster; :func:`validate_disaggregated`
checks the result's rules independently; :func:`disaggregated_lower_bounds` bounds any
schedule's makespan from below.
"""
