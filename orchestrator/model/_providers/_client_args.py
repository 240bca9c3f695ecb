"""``-M`` client arguments of the SDK-backed providers (openai, anthropic): which keys are valid, and
which of them toolfleet honours itself rather than handing them to the SDK.

``max_retries`` and ``timeout`` are toolfleet's to honour: the SDKs' own retries stay off (``Model``
retries, bounded in time and recorded in the log), so ``-M max_retries=3`` becomes the model's
``GenerateConfig.max_retries`` and ``-M timeout=30`` its per-request timeout. Every other argument of
the SDK client's constructor (``default_headers``, ``organization``, ...) goes to the client as given.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._generate_config import GenerateConfig

T = TypeVar("T")

#: Client arguments toolfleet turns into the model's ``GenerateConfig``.
CONFIG_CLIENT_ARGS = ("max_retries", "timeout")
_MAPPING_ARGS = ("default_headers", "default_query")  # the SDKs accept anything here and fail per request


def build_client(factory: Callable[..., T], **arguments: Any) -> T:
    """The SDK client, built once up front so a client argument it rejects is one line before any sample."""
    try:
        return factory(**arguments)
    except (TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"invalid client argument: {' '.join(str(exc).split())}") from None


def sdk_client_arg_names(client_cls: type, own: tuple[str, ...] = ("api_key", "base_url", "config")) -> frozenset[str]:
    """The public keyword arguments of ``client_cls`` (an SDK client), less those the provider takes itself."""
    params = inspect.signature(client_cls.__init__).parameters  # type: ignore[misc]  # reading, not calling, __init__
    return frozenset(n for n, p in params.items()
                     if n != "self" and not n.startswith("_") and n not in own
                     and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))


def split_client_args(client_args: dict[str, Any]) -> tuple[GenerateConfig, dict[str, Any]]:
    """``(settings toolfleet honours, arguments for the SDK client)``; a bad value is one clear line."""
    settings: dict[str, Any] = {}
    rest = dict(client_args)
    for name in CONFIG_CLIENT_ARGS:
        if name not in rest:
            continue
        value = rest.pop(name)
        if name == "timeout" and value is not None and not isinstance(value, (int, float, str)):
            rest[name] = value  # an httpx.Timeout object (Python API): the SDK understands it
            continue
        settings[name] = value
    for name in _MAPPING_ARGS:
        if name in rest and rest[name] is not None and not isinstance(rest[name], Mapping):
            raise ValueError(f"invalid client argument {name}={rest[name]!r}: it takes a mapping, "
                             f"e.g. -M '{name}={{x-team: evals}}'")
    try:
        return GenerateConfig(**settings), rest
    except ValueError:
        shown = ", ".join(f"{k}={v!r}" for k, v in settings.items())
        raise ValueError(f"invalid client argument ({shown}): max_retries takes a whole number, "
                         "timeout a number of seconds") from None
