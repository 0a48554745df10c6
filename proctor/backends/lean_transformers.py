"""Import transformers' model code without the optional packages it would import for nothing.

Whenever they are installed, transformers imports scikit-learn (and with it scipy and pandas:
~1.3 s here) for assisted generation's `roc_curve`, and scipy's optimizer (~0.4 s) for
object-detection losses, as its model code is imported; proctor's runs call neither.
`import_transformers` imports that code with the two packages hidden, then gives each name
a module skipped for it (`if is_scipy_available(): from scipy... import name`) a stand-in
that imports the real function on its first call, so transformers behaves as before. The
packages stay importable: only that one import goes without them.
"""

from __future__ import annotations

import importlib
import re
import sys
from types import ModuleType
from typing import Any, Callable

_HIDDEN = ("sklearn", "scipy")
# what the model classes import (AutoModel), and what AutoTokenizer imports besides
_MODEL_CODE = ("transformers.modeling_utils", "transformers.generation.candidate_generator")
_SKIPPED_IMPORT = re.compile(r"^    from ((?:sklearn|scipy)[\w.]*) import ([\w, ]+)$", re.M)


def import_transformers() -> None:
    """Import transformers' model code, skipping scikit-learn and scipy (see the module's docstring)."""
    if all(name in sys.modules for name in _MODEL_CODE):
        return
    hidden = [name for name in _HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # find_spec: not installed; import: ImportError
    try:
        for name in _MODEL_CODE:
            importlib.import_module(name)
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    if hidden:
        _defer_skipped_names()


def _defer_skipped_names() -> None:
    checks = tuple(f"is_{name}_available" for name in _HIDDEN)
    for module in list(sys.modules.values()):
        # plain modules only: a lazy one (a model package) would import what it names when read
        if (type(module) is not ModuleType or not module.__name__.startswith("transformers.")
                or not any(check in vars(module) for check in checks)):
            continue
        origin = getattr(module.__spec__, "origin", None)
        if not origin or not origin.endswith(".py"):
            continue
        with open(origin, encoding="utf-8") as f:
            source = f.read()
        for package, names in _SKIPPED_IMPORT.findall(source):
            for name in (n.strip() for n in names.split(",")):
                if name and not hasattr(module, name):
                    setattr(module, name, _on_first_call(package, name))


def _on_first_call(package: str, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(package), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{package}.{name}, imported on its first call (proctor.backends.lean_transformers)."
    return call
