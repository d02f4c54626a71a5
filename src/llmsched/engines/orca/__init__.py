"""Orca's batching: mixed iterations of whole prompts and decoding requests."""
