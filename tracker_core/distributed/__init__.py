"""Distributed: state reduced over ranks, ranks that diverge, and mapping a checkpoint onto another world size."""
