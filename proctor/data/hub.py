"""Rows from the Hugging Face hub through `datasets.load_dataset` (spec dataset ids)."""

from __future__ import annotations

from typing import Optional

from proctor.errors import UserError

FIX = ("pass --data-dir DIR or set PROCTOR_DATA_DIR to a directory laid out like "
       "shared/data, or make the Hugging Face hub reachable")


def load_hub_split(dataset: str, name: Optional[str], split: str) -> list[dict]:
    """All rows of one split, in dataset order, as plain dicts."""
    where = f"{dataset}" + (f" ({name})" if name else "") + f" split {split!r}"
    try:
        import datasets
    except ImportError:
        raise UserError(f"no local data directory given and the `datasets` package is not "
                        f"installed, so {where} cannot come from the hub; {FIX}") from None
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # its per-retry warnings would bury the one error line
    try:
        ds = datasets.load_dataset(dataset, name, split=split)
    except Exception as e:  # network, auth, missing config: all fixable by the user
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"could not load {where} from the Hugging Face hub ({reason}) and no "
                        f"local data directory was given; {FIX}") from None
    return [dict(row) for row in ds]
