"""Backends turn token rows into log-probs. Imported lazily: torch loads only when used."""

from __future__ import annotations

from typing import Any

__all__ = ["load_backend", "HFBackend"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from proctor.backends import hf

        return getattr(hf, name)
    raise AttributeError(f"module 'proctor.backends' has no attribute {name!r}")
