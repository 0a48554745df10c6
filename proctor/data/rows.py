"""Hub-shaped rows as the tasks read them, checked: from a local reader or a few-shot list.

Each check takes a row (a local reader's conversion, or an entry of `fewshot/<SOURCE>.json`)
and returns a new row holding just the fields the tasks read, each of its JSON type, with
the protocol's invariants held (a gold label that names one of the row's choices, ...);
anything else is a UserError. `where` names the row ("dev.jsonl:3: the row",
"OLMES_ARC-Easy.json: examples[2]").
"""

from __future__ import annotations

from typing import Callable

from proctor.data.exported import MT_MBPP_LANGUAGES
from proctor.data.fields import field
from proctor.errors import UserError

Check = Callable[[object, str], dict]

SIQA_TEXT = ("context", "question", "answerA", "answerB", "answerC")
SIQA_LABELS = ("1", "2", "3")
#: ARC's choice labels: letters, or numbers on some NY Regents items (OLMES maps 1.. to A..)
ARC_LABELS = ("ABCDE", "12345")
HELLASWAG_ENDINGS = 4
HELLASWAG_LABELS = ("0", "1", "2", "3")
CSQA_CHOICES = 5
OBQA_CHOICES = 4
SCIQ_OPTIONS = 4
GSM8K_GOLD = "####"


def social_i_qa(row: object, where: str) -> dict:
    """Check a SocialIQA row: its context, question and three answers, and a label "1", "2" or "3"."""
    out = {name: field(row, name, str, where) for name in SIQA_TEXT}
    label = field(row, "label", str, where)
    if label not in SIQA_LABELS:
        raise UserError(f"{where} has label {label!r}; it must be 1, 2 or 3")
    return {**out, "label": label}


def ai2_arc(row: object, where: str) -> dict:
    """Check an ARC row: 2 to 5 choices labelled A, B, C.. or 1, 2, 3.. in order, and an answerKey among them."""
    texts = field(row, "choices.text", list[str], where)
    labels = field(row, "choices.label", list[str], where)
    key = field(row, "answerKey", str, where)
    if len(labels) != len(texts):
        raise UserError(f"{where} has {len(texts)} choice texts but {len(labels)} choice labels")
    if not any(labels == list(order[: len(labels)]) for order in ARC_LABELS) or len(labels) < 2:
        raise UserError(f"{where} has choice labels {labels}; they must be A, B, C.. or 1, 2, 3.. "
                        f"in order (2 to {len(ARC_LABELS[0])} of them)")
    if key not in labels:
        raise UserError(f"{where} has answerKey {key!r}, which is none of its labels {labels}")
    return {"id": field(row, "id", str, where), "question": field(row, "question", str, where),
            "choices": {"text": list(texts), "label": list(labels)}, "answerKey": key}


def hellaswag(row: object, where: str) -> dict:
    """Check a HellaSwag row: its context parts, four endings and a label "0" to "3"."""
    out = {name: field(row, name, str, where) for name in ("activity_label", "ctx_a", "ctx_b")}
    endings = field(row, "endings", list[str], where)
    if len(endings) != HELLASWAG_ENDINGS:
        raise UserError(f"{where} has {len(endings)} endings; HellaSwag items have {HELLASWAG_ENDINGS}")
    label = field(row, "label", str, where)
    if label not in HELLASWAG_LABELS:
        raise UserError(f"{where} has label {label!r}; it must be 0, 1, 2 or 3")
    return {**out, "endings": list(endings), "label": label}


def boolq(row: object, where: str) -> dict:
    """Check a BoolQ row: its question and passage, and super_glue's label 0 or 1 (or google/boolq's boolean answer)."""
    out = {name: field(row, name, str, where) for name in ("question", "passage")}
    if isinstance(row, dict) and "label" not in row and "answer" in row:
        return {**out, "answer": field(row, "answer", bool, where)}
    label = field(row, "label", int, where)
    if label not in (0, 1):
        raise UserError(f"{where} has label {label!r}; it must be 0 (no) or 1 (yes)")
    return {**out, "label": label}


def lettered_choices(row: object, where: str, most: int) -> tuple[list[str], str]:
    """Check a row's choices: 2 to `most` texts labelled A, B, C.. in order, and an answerKey (stripped) among them."""
    texts = field(row, "choices.text", list[str], where)
    labels = field(row, "choices.label", list[str], where)
    key = field(row, "answerKey", str, where).strip()
    if len(labels) != len(texts) or labels != list(ARC_LABELS[0][: len(labels)]) or not 2 <= len(labels) <= most:
        raise UserError(f"{where} has choice labels {labels} for {len(texts)} choice texts; they must be "
                        f"A, B, C.. in order, one per text (2 to {most})")
    if key not in labels:
        raise UserError(f"{where} has answerKey {key!r}, which is none of its labels {labels}")
    return list(texts), key


def commonsense_qa(row: object, where: str) -> dict:
    """Check a CommonsenseQA row: its id and question, up to five lettered choices and an answerKey among them."""
    texts, key = lettered_choices(row, where, CSQA_CHOICES)
    return {"id": field(row, "id", str, where), "question": field(row, "question", str, where),
            "choices": {"text": texts, "label": list(ARC_LABELS[0][: len(texts)])}, "answerKey": key}


def openbookqa(row: object, where: str) -> dict:
    """Check an OpenBookQA row: its id and question stem, up to four lettered choices and an answerKey among them."""
    texts, key = lettered_choices(row, where, OBQA_CHOICES)
    return {"id": field(row, "id", str, where), "question_stem": field(row, "question_stem", str, where),
            "choices": {"text": texts, "label": list(ARC_LABELS[0][: len(texts)])}, "answerKey": key}


def piqa(row: object, where: str) -> dict:
    """Check a PIQA row: its goal, two solutions and a label 0 or 1."""
    out = {name: field(row, name, str, where) for name in ("goal", "sol1", "sol2")}
    label = field(row, "label", int, where)
    if label not in (0, 1):
        raise UserError(f"{where} has label {label!r}; it must be 0 or 1")
    return {**out, "label": label}


def winogrande(row: object, where: str) -> dict:
    """Check a WinoGrande row: a sentence with one blank '_', two options and an answer "1" or "2"."""
    out = {name: field(row, name, str, where) for name in ("sentence", "option1", "option2")}
    if out["sentence"].count("_") != 1:
        raise UserError(f"{where} has a sentence with {out['sentence'].count('_')} blanks '_'; it needs exactly one")
    answer = field(row, "answer", str, where)
    if answer not in ("1", "2"):
        raise UserError(f"{where} has answer {answer!r}; it must be 1 or 2")
    return {**out, "answer": answer}


def sciq_shot(row: object, where: str) -> dict:
    """Check a SciQ few-shot example (OLMES:sciq): a question, four options and the gold's index."""
    options = field(row, "options", list, where)
    if len(options) != SCIQ_OPTIONS or not all(isinstance(o, str) for o in options):
        raise UserError(f"{where} has options {options!r}; it needs {SCIQ_OPTIONS} strings")
    gold = field(row, "gold", int, where)
    if not 0 <= gold < SCIQ_OPTIONS:
        raise UserError(f"{where} has gold {gold!r}; it must index its {SCIQ_OPTIONS} options")
    return {"question": field(row, "question", str, where), "options": options, "gold": gold}


def medmcqa(row: object, where: str) -> dict:
    """Check a MedMCQA row: a question, options opa-opd and the gold's index cop (0-3)."""
    out = {name: field(row, name, str, where) for name in ("question", "opa", "opb", "opc", "opd")}
    cop = field(row, "cop", int, where)
    if not 0 <= cop <= 3:
        raise UserError(f"{where} has cop {cop!r}; it must be 0-3")
    return {**out, "cop": cop}


def medqa(row: object, where: str) -> dict:
    """Check a MedQA row: a question, its options and the gold's index answer_idx."""
    choices = field(row, "choices", list, where)
    if not choices or not all(isinstance(c, str) for c in choices):
        raise UserError(f"{where} has choices {choices!r}; it needs a non-empty list of strings")
    gold = field(row, "answer_idx", int, where)
    if not 0 <= gold < len(choices):
        raise UserError(f"{where} has answer_idx {gold!r}; it must index its {len(choices)} choices")
    return {"question": field(row, "question", str, where), "choices": choices, "answer_idx": gold}


def minerva_shot(row: object, where: str) -> dict:
    """Check a Minerva MATH example: a problem and its solution as the prompt shows it."""
    return {"problem": field(row, "problem", str, where), "solution": field(row, "solution", str, where)}


def code_shot(row: object, where: str) -> dict:
    """Check an MBPP or MT-MBPP example: a task's text and its code."""
    return {"text": field(row, "text", str, where), "code": field(row, "code", str, where)}


def nq_shot(row: object, where: str) -> dict:
    """Check a Natural Questions few-shot example (OLMES:naturalqs): a question and its answers."""
    answers = field(row, "answer", list, where)
    if not answers or not all(isinstance(a, str) for a in answers):
        raise UserError(f"{where} has answer {answers!r}; it needs a non-empty list of strings")
    return {"question": field(row, "question", str, where), "answer": answers}


def copycolors(row: object, where: str) -> dict:
    """Check a CopyColors row: a question, its colours (texts and labels) and the gold's index answerKey."""
    texts = field(row, "choices.text", list[str], where)
    labels = field(row, "choices.label", list[str], where)
    gold = field(row, "answerKey", int, where)
    if len(labels) != len(texts) or not 0 <= gold < len(texts):
        raise UserError(f"{where} has {len(texts)} choice texts, {len(labels)} labels and answerKey {gold!r}; "
                        "it needs as many labels as texts and an answerKey indexing them")
    return {"question": field(row, "question", str, where), "choices": {"text": texts, "label": labels},
            "answerKey": gold}


def jeopardy(row: object, where: str) -> dict:
    """Check a Jeopardy row: its context "<CATEGORY>: <clue>", the answer (`continuation`) and the category."""
    out = {name: field(row, name, str, where) for name in ("context", "continuation", "category")}
    if ":" not in out["context"]:
        raise UserError(f"{where} has context {out['context']!r}; it must read '<CATEGORY>: <clue>'")
    return out


def drop(row: object, where: str) -> dict:
    """Check a DROP row: a passage, a question, its answer and validated answers (number, date, spans)."""
    out = {name: field(row, name, str, where) for name in ("passage", "question")}
    answer = {"number": field(row, "answer.number", str, where), "spans": field(row, "answer.spans", list[str], where),
              "date": {part: field(row, f"answer.date.{part}", str, where) for part in ("day", "month", "year")}}
    validated = {key: field(row, f"validated_answers.{key}", list, where) for key in ("number", "date", "spans")}
    if len({len(values) for values in validated.values()}) != 1:
        raise UserError(f"{where} has validated answers of unequal lengths (number, date, spans)")
    return {**out, "answer": answer, "validated_answers": validated}


def squad(row: object, where: str) -> dict:
    """Check a SQuAD row: a title, a background paragraph (context), a question and at least one answer."""
    out = {name: field(row, name, str, where) for name in ("title", "context", "question")}
    texts = field(row, "answers.text", list[str], where)
    if not texts:
        raise UserError(f"{where} has no answer text")
    return {**out, "answers": {"text": texts}}


def gsm8k(row: object, where: str) -> dict:
    """Check a GSM8K test/train row: its answer is the reasoning, then '#### <gold>'."""
    question, answer = field(row, "question", str, where), field(row, "answer", str, where)
    if not answer.rpartition(GSM8K_GOLD)[2].strip() or GSM8K_GOLD not in answer:
        raise UserError(f"{where} has an answer without a gold '{GSM8K_GOLD} <number>' at its "
                        "end, so it has no gold answer")
    return {"question": question, "answer": answer}


def gsm8k_shot(row: object, where: str) -> dict:
    """Check a GSM8K few-shot example (STD:GSM8k): its answer is the chain of thought shown in the prompt."""
    return {"question": field(row, "question", str, where), "answer": field(row, "answer", str, where)}


#: few-shot source -> the check of its entries
FEWSHOT: dict[str, Check] = {
    "OLMES:social_i_qa": social_i_qa,
    "OLMES:ARC-Challenge": ai2_arc,
    "OLMES:ARC-Easy": ai2_arc,
    "OLMES:hellaswag": hellaswag,
    "OLMES:BoolQ": boolq,
    "OLMES:commonsense_qa": commonsense_qa,
    "OLMES:openbookqa": openbookqa,
    "OLMES:piqa": piqa,
    "OLMES:winogrande": winogrande,
    "OLMES:sciq": sciq_shot,
    "OLMES:naturalqs": nq_shot,
    "Minerva:MATH:fixed": minerva_shot,
    "Original:MBPP": code_shot,
    **{f"multilingual_mbpp:{lang}": code_shot for lang in MT_MBPP_LANGUAGES},
    "OLMES:medmcqa": medmcqa,
    "OLMES:medqa_en": medqa,
    "STD:GSM8k": gsm8k_shot,
    "copycolors:10_answer_choices:validation": copycolors,
    "OLMES:jeopardy": jeopardy,
    "OLMES:drop": drop,
    "OLMES:squad": squad,
}
