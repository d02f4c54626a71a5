"""engines/disaggregation."""
