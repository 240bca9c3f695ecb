"""Calendar rules."""


def is_leap(year):
    """Whether a Gregorian year is a leap year."""
    return year % 4 == 0
