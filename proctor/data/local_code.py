"""Local readers for code benchmarks: HumanEval (`humaneval/HumanEval.jsonl[.gz]`).

Rows come out shaped like the hub dataset `openai/openai_humaneval` (split `test`):
task_id, prompt, canonical_solution, test, entry_point. The local file is the one in
openai/human-eval, which the hub dataset was made from.
"""

from __future__ import annotations

import keyword
from pathlib import Path
from typing import Optional

from proctor.data.fields import field, nonempty
from proctor.data.readers import first_existing, read_jsonl
from proctor.errors import UserError

Rows = list[dict]
HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def humaneval(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read HumanEval's test split, checking each row's fields and that its entry_point is a function name."""
    if split != "test":
        raise UserError(f"HumanEval has only a test split, not {split!r}")
    base = data_dir / "humaneval" / "HumanEval.jsonl"
    path = first_existing([base.with_name(base.name + ".gz"), base])
    needs = f"a HumanEval row needs string fields {', '.join(HUMANEVAL_FIELDS)}; the row"
    rows = [_humaneval_row(row, f"{path}:{line}: {needs}") for line, row in read_jsonl(path)]
    return nonempty(rows, path)


def _humaneval_row(row: dict, where: str) -> dict:
    out = {f: field(row, f, str, where) for f in HUMANEVAL_FIELDS}
    if not out["entry_point"].isidentifier() or keyword.iskeyword(out["entry_point"]):
        # the program ends with check(<entry_point>): anything else fails every sample
        raise UserError(f"{where} has entry_point {out['entry_point']!r}, which is not a "
                        "Python function name")
    return out


LOADERS = {"openai/openai_humaneval": humaneval}
