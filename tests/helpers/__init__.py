"""Shared test helpers: training programs, drivers and multi-process launchers (not test files)."""
