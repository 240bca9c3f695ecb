"""Image names as Docker reads them: which registry an image names, and who may pull it. Pure."""

from __future__ import annotations

__all__ = ["image_registry", "pulls_from"]

def image_registry(image: str) -> str | None:
    """The registry host an image names (``127.0.0.1:5000/team/img:1`` -> ``127.0.0.1:5000``), or None for a
    bare name (``toolfleet/sandbox:latest``, ``img:1``): its first path component has a '.' or a ':' or is
    ``localhost``, as Docker reads it."""
    first, slash, _ = image.partition("/")
    if not slash or not first:
        return None
    return first if ("." in first or ":" in first or first == "localhost") else None


def pulls_from(registries: list[str] | None, image: str) -> bool:
    """Whether ``image`` may be pulled by a process pulling from ``registries`` (None: from any registry,
    as embedded mode does); a bare name is never pulled (built or loaded on the host)."""
    registry = image_registry(image)
    if registry is None:
        return False
    return registries is None or registry.lower() in {r.lower() for r in registries}

