"""proctor: evaluate language models with reproducible protocols.

The library's entry points (imported on first use, so `import proctor` stays light):

- `proctor.evaluate(model, tasks=[...], ...)` -> `RunRecord` (see `proctor.api`)
- `proctor.read_run(directory)` -> `RunRecord`, and `proctor.write_run(record, directory)`
  (see `proctor.outputs.run_dir`)
- `proctor.load_model(model)` -> `(model, tokenizer)`: transformers objects, for a training loop
- `proctor.task(...)`: the decorator that registers a Python task class
- `proctor.include(paths)`: load task files (YAML/TOML) and task modules of your own
- `proctor.UserError`: the one exception type for mistakes a caller can fix
- the record types, documented in `proctor.outputs.records`
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from proctor.errors import UserError
from proctor.version import VERSION as __version__

_LAZY = {
    "evaluate": "proctor.api",
    "read_run": "proctor.api",   # proctor.outputs.run_dir's, its arguments checked
    "write_run": "proctor.api",
    "load_model": "proctor.runtime",   # (model, tokenizer) as transformers objects, for a training loop
    "task": "proctor.tasks.plugins",
    "include": "proctor.tasks.plugins",
    "RunRecord": "proctor.outputs.records",
    "TaskRecord": "proctor.outputs.records",
    "ChoiceRecord": "proctor.outputs.records",
    "GenerationRecord": "proctor.outputs.records",
    "PerplexityRecord": "proctor.outputs.records",
    "QueryMetadata": "proctor.outputs.records",
    "SpecScore": "proctor.outputs.records",
    "FORMAT_VERSION": "proctor.outputs.records",
}

__all__ = ["UserError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'proctor' has no attribute {name!r}")
