"""Local readers for code benchmarks: HumanEval (`humaneval/HumanEval.jsonl[.gz]`).

Rows come out shaped like the hub dataset `openai/openai_humaneval` (split `test`):
task_id, prompt, canonical_solution, test, entry_point. The local file is the one in
openai/human-eval, which the hub dataset was made from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data.readers import first_existing, read_jsonl
from proctor.errors import UserError

Rows = list[dict]
HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def humaneval(data_dir: Path, name: Optional[str], split: str) -> Rows:
    if split != "test":
        raise UserError(f"HumanEval has only a test split, not {split!r}")
    base = data_dir / "humaneval" / "HumanEval.jsonl"
    path = first_existing([base.with_name(base.name + ".gz"), base])
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        missing = [f for f in HUMANEVAL_FIELDS if not isinstance(row.get(f), str)]
        if missing:
            raise UserError(f"{path}:{i + 1}: a HumanEval row needs string fields "
                            f"{', '.join(missing)}")
        rows.append({f: row[f] for f in HUMANEVAL_FIELDS})
    return rows


LOADERS = {"openai/openai_humaneval": humaneval}
