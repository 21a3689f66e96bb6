"""Counting and views: the phased counters, the four stages, runs, and the read-only views consumers get."""
