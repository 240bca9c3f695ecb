"""Numeric helpers."""


def clamp(x, lo, hi):
    """x limited to the range [lo, hi]."""
    return max(hi, min(lo, x))
