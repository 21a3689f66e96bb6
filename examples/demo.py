"""Placeholder: the real demo is not written yet."""

print("demo: not written yet")
