"""Text helpers."""


def words(text):
    return text.split()


def slugify(title):
    """A URL slug: lowercase words joined by dashes."""
    return "-".join(words(title))
