"""Named scripted-model policies, so ``--model scripted/<name>`` works from the CLI.

A task file (or an example) registers policies with ``@scripted_policy("oracle")``; a policy is the
scripted model's ``fn(messages, tools) -> ModelOutput | str`` (sync or async). It may look at the
running sample with ``orchestrator.solver.sample_state()`` (e.g. an oracle reading the sample's target).
``scripted`` alone (no name) replays the scripted model's default output.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from orchestrator.model._concurrency import ConnectionLimiter
from orchestrator.model._model import MODEL_ENV, Model, get_model
from orchestrator.model._pricing import PriceFileError, price_table

from ._errors import SetupError

_POLICIES: dict[str, Callable[..., Any]] = {}


class UnknownModelError(SetupError):
    """The model name does not resolve (a user mistake, shown as one line)."""


def scripted_policy(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        _POLICIES[name] = fn
        return fn

    return register


def scripted_policies() -> list[str]:
    return sorted(_POLICIES)


def resolve_model(model: str | Model | None, **model_args: Any) -> Model:
    """A ``Model`` from a name; ``scripted/<policy>`` looks the policy up in the registry."""
    if isinstance(model, Model):
        return model
    if not model:
        model = os.environ.get(MODEL_ENV)
    if not model:
        raise UnknownModelError(f"No model given (use --model, e.g. --model openai/gpt-4o-mini or scripted/<policy>, "
                                f"or set ${MODEL_ENV}).")
    provider, _, name = model.partition("/")
    _check_model_args(provider, model_args)
    if provider == "scripted" and name and "policy" not in model_args and "outputs" not in model_args:
        if name not in _POLICIES:
            known = ", ".join(scripted_policies()) or "none registered"
            raise UnknownModelError(f"Unknown scripted policy '{name}' (the task defines: {known}).")
        model_args["policy"] = _POLICIES[name]
    try:
        return get_model(model, **model_args)
    except ValueError as exc:
        raise UnknownModelError(f"Cannot use model '{model}': {exc}") from exc
    except ImportError as exc:
        raise UnknownModelError(f"Model '{model}' needs a package that is not installed: {exc}") from exc


def _check_model_args(provider: str, model_args: dict[str, Any]) -> None:
    """Unknown ``-M`` keys are one clear line (the provider's constructor says what it accepts)."""
    if not model_args:
        return
    from orchestrator.model._model import _provider_class

    try:
        cls = _provider_class(provider)
    except ValueError as exc:
        raise UnknownModelError(str(exc)) from exc
    except ImportError as exc:
        raise UnknownModelError(f"Model provider '{provider}' needs a package that is not installed: {exc}") from exc
    params = inspect.signature(cls.__init__).parameters
    client_args = cls.client_arg_names()
    if client_args is None and any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return  # a provider that takes anything and does not say what
    own = [n for n, p in params.items() if n not in ("self", "model_name", "config") and p.kind is not p.VAR_KEYWORD]
    accepted = sorted({*own, *(client_args or ()), "retry"})
    unknown = [k for k in model_args if k not in accepted]
    if unknown:
        raise UnknownModelError(f"Model provider '{provider}' has no argument {', '.join(repr(k) for k in unknown)} "
                                f"(accepted -M keys: {', '.join(accepted)}).")


def configured_model(model: Model, max_connections: int | None, model_prices: str | None = None) -> Model:
    """``model`` with its own bound on requests in flight (``--max-connections``: the ceiling of its
    adaptive limit), whatever the provider, and priced by ``--model-prices`` over the built-in table."""
    if max_connections is not None and max_connections < 1:
        raise SetupError(f"--max-connections must be at least 1, got {max_connections}.")
    if max_connections is None and model_prices is None:
        return model
    try:
        prices = price_table(model_prices) if model_prices is not None else model.prices
    except PriceFileError as exc:
        raise SetupError(str(exc)) from None
    configured = Model(model.api, model.config, model.retry, prices)
    configured._slots = ConnectionLimiter(max_connections) if max_connections is not None else model._slots
    return configured
