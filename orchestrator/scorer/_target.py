"""``Target``: the ideal answer(s) a scorer compares against (mirrors ``inspect_ai.scorer.Target``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class Target(Sequence[str]):
    """One or more target strings; ``text`` joins them."""

    def __init__(self, target: str | Sequence[str]) -> None:
        self.target: list[str] = [target] if isinstance(target, str) else list(target)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]  # Inspect's Target: int indexes only
        return self.target[index]

    def __len__(self) -> int:
        return len(self.target)

    def __iter__(self) -> Iterator[str]:
        return iter(self.target)

    @property
    def text(self) -> str:
        return "".join(self.target)

    def __repr__(self) -> str:
        return f"Target({self.target!r})"
