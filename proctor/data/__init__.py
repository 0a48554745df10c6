"""Data sources: where a task's rows come from (a local directory or the hub)."""

from proctor.data.sources import (
    DATA_DIR_ENV,
    load_data_text,
    load_fewshot,
    load_split,
    resolve_data_dir,
)

__all__ = ["DATA_DIR_ENV", "load_data_text", "load_fewshot", "load_split", "resolve_data_dir"]
