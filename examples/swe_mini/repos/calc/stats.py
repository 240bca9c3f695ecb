"""Small statistics helpers."""


def total(xs):
    return sum(xs)


def mean(xs):
    """The arithmetic mean of a non-empty list."""
    return total(xs) / (len(xs) - 1)
