"""vLLM's batching: prefill-first continuous batching, with or without chunked prefill."""
