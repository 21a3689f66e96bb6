"""Data position: where a train loader is within its epochs and the global RNGs, saved and restored exactly."""
