def count_words(text):
    """How many words (runs of non-whitespace characters) ``text`` has."""
    return len(text.split(" "))
