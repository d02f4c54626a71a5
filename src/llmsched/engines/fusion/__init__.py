"""PD fusion (chunked prefill): the fused iteration's cost, its schedule, its validator and
its lower bound.

In a *fused* engine (Sarathi-Serve's chunked prefill, vLLM's default) there are no prefill
stages. Every iteration carries every decoding request (one token each) and chunks of
prompts, ``decoding + chunk tokens <= token_budget``. A prompt may span iterations; the
request's first token comes at the end of the iteration that holds its last chunk, and it
decodes in every iteration after that until its last token. A request holds its client
(its slot of KV cache) from its first chunk to its last token.

Cost of a fused iteration (:func:`fused_iteration_time`): an iteration with both a decode
batch and prompt chunks costs the decode iteration plus the prefill stage of its chunks,
less the fixed cost they share (one forward pass instead of two: the smaller of the two
fixed costs, ``min(prefill_time(0), decode_iteration_time(0))``, and no more than the decode
batch's time at no context). An iteration of chunks
alone is a prefill stage, and one of decoding alone a decode iteration, as under
competition. A context-aware model prices a chunk of ``c`` tokens starting at position
``s`` of its prompt by ``(s + c)^2 - s^2`` squared tokens: the chunks of a prompt add up
to its ``p^2``, what it costs prefilled whole.

:class:`FusedSchedule` stores runs of iterations (a run of pure decoding, over which
nothing but the context changes, is one entry however long) and the chunks; the metrics
work from them. :func:`validate_fused` checks every rule of the mode independently of the
simulator (:mod:`llmsched.engines.fusion.rule`), and :func:`fused_lower_bounds` bounds any fused
schedule's makespan from below.
"""
