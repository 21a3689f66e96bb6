"""Display and report: the live progress line and the plain-text report of a saved state."""
