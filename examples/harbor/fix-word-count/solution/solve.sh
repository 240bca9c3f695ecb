#!/bin/bash
cat > /home/sandbox/app/wordcount.py <<'PY'
def count_words(text):
    """How many words (runs of non-whitespace characters) ``text`` has."""
    return len(text.split())
PY
