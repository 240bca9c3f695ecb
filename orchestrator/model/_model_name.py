"""``ModelName``: match a model against a spec such as ``openai/gpt-4``, ``gpt-4`` or ``gpt`` (Inspect's rules)."""

from __future__ import annotations

from typing import Any


def _split(spec: str) -> tuple[str | None, str]:
    api, sep, name = spec.partition("/")
    return (api, name) if sep else (None, spec)


class ModelName:
    """A model's provider (``api``) and name; ``==`` a string matches by substring, as in Inspect.

    ``ModelName(m) == "gpt"`` is true for any model whose name contains ``gpt``; a spec with a
    provider (``openai/gpt``) also matches when the provider contains the spec's provider.
    """

    def __init__(self, model: Any) -> None:
        if isinstance(model, str):
            api, name = _split(model)
            if api is None:
                raise ValueError("API not specified for model name")
            self.api, self.name = api, name
        else:  # a Model: provider as registered with get_model, and the provider's model name
            self.api = model.api.provider
            self.name = model.name

    def __eq__(self, pattern: object) -> bool:
        if not isinstance(pattern, str):
            return False
        api, name = _split(pattern)
        if api and api in self.api and name in self.name:
            return True
        return name in self.name

    def __hash__(self) -> int:
        return hash((self.api, self.name))

    def __str__(self) -> str:
        return f"{self.api}/{self.name}"

    def __repr__(self) -> str:
        return f"ModelName({str(self)!r})"
