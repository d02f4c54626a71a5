"""engines/fusion."""
