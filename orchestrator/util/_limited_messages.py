"""``MessageList``: a conversation that refuses to grow past the innermost message limit.

Agent and task states keep their messages in one, so a message limit holds whatever appends to
the conversation — react, ``generate``, or a hand-written agent loop — as in Inspect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, SupportsIndex

from ._limits import check_message_limit


class MessageList(list):  # type: ignore[type-arg]  # list's own subclass, items untyped as Inspect's
    """A ``list`` of chat messages that checks the active message limit before it grows."""

    def __init__(self, iterable: Iterable[Any] = ()) -> None:
        items = list(iterable)
        check_message_limit(len(items))
        super().__init__(items)

    def _grow(self, by: int) -> None:
        if by > 0:
            check_message_limit(len(self) + by)

    def append(self, item: Any) -> None:
        self._grow(1)
        super().append(item)

    def extend(self, items: Iterable[Any]) -> None:
        items = list(items)
        self._grow(len(items))
        super().extend(items)

    def insert(self, index: SupportsIndex, item: Any) -> None:
        self._grow(1)
        super().insert(index, item)

    def __iadd__(self, items: Iterable[Any]) -> MessageList:  # type: ignore[misc]  # += takes any iterable, as list's
        self.extend(items)
        return self

    def __setitem__(self, index: Any, item: Any) -> None:
        if isinstance(index, slice):
            item = list(item)
            self._grow(len(item) - len(self[index]))
        super().__setitem__(index, item)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # Copies and pickles are plain lists: a copy is data, not a live conversation.
        return (list, (list(self),))
