"""engines/competition."""
