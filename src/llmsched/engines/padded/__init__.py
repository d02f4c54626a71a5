"""Padded insertion: new prompts join the running batch in one iteration, padded against it."""
