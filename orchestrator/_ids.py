"""Cheap unique ids for messages, events and calls.

``uuid4()`` costs microseconds per id, which adds up at thousands of calls per second; a random
per-process prefix plus a counter is unique across processes and hosts for our purposes (the
prefix is renewed in forked children).
"""

from __future__ import annotations

import itertools
import os

_prefix = os.urandom(6).hex()
_counter = itertools.count()


def _renew() -> None:
    global _prefix, _counter
    _prefix = os.urandom(6).hex()
    _counter = itertools.count()


os.register_at_fork(after_in_child=_renew)


def new_id() -> str:
    return f"{_prefix}{next(_counter):010x}"
