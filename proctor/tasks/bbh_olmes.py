r"""BIG-Bench-Hard as OLMES's chat (Tulu) regime runs it: 3-shot chain of thought, multiturn.

Specs (27 tasks each), as allenai/olmes @5a51f50 `oe_eval/configs/tasks.py` defines them
(the `for task_type in BBH_TASKS` block), on class `GenericBBH` of
`oe_eval/tasks/oe_eval_tasks/bbh.py`:

- `bbh_<task>:cot-v1::tulu` — use_chat_format, 3 shots, chat_overrides: greedy
  (temperature 0.0, do_sample False), max_gen_toks 512, stop_sequences [] and
  `answer_extract_fn: "answer_regex"` (`GenericBBH._extract_answer_regex`, here
  `extract_answer_regex`). Suite `bbh:cot-v1::tulu`, primary `micro` (task_suites.py).
- `bbh_<task>:cot::tulu` — the same prompts and decoding (its generation_kwargs are set at
  the top level instead of in chat_overrides, which gives the same merged values) with the
  class's default answer extraction `GenericBBH._extract_answer` (`extract_the_answer_is`):
  the first `(?<=the answer is )(.*)(?=.)` match with periods stripped, else "". Suite
  `bbh:cot::tulu`, primary `micro`.

Both: the class defaults with its chat_overrides (short_prefix "Q:"/"A:", use_cot,
assistant_prefix None, fewshot_as_multiturn True), description `BBH_DESCRIPTIONS[task]`
(`oe_eval/data/bbh_tasks.py`), few-shot source `STD:bbh_<task>` (the first 3 entries of
`oe_eval/tasks/fewshot_sources.py`, unsampled).

- Prompt (`GenericBBH._process_doc`, then `Task.fewshot_context` with use_chat_format,
  `proctor.tasks.prompts.olmes_chat`): a user turn
  description + "Q: {input}\nA: Let's think step by step." and an assistant turn
  `solution.strip()` per shot (solution: the shot's target with a leading
  "Let's think step by step." removed), the description before the first shot only; then
  the doc's user turn "Q: {input}\nA: Let's think step by step.". The model's template
  renders it with its generation prompt; nothing follows (no assistant prefix). Default
  OLMES tokenization policy.
- Generation: greedy, 512 new tokens, no stop strings: OLMES stops at the model's EOS only
  ("we rely on the chat format to provide the stop sequence"); proctor's engine adds the
  chat template's end of turn to a chat request's stops, which is where an instruct model's
  EOS falls (see "Differences").
- Gold: the doc's target (its `(?<=answer is )(.*)(?=.)` match when it has one; no test row
  does). exact_match: HF-evaluate exact match with ignore_case, and ignore_punctuation on
  every task but dyck_languages; exact_match_simple: the strings equal. Only the first
  sample is scored. Native id: row index (OLMES's `map_indexed`, field "index").

Data. Docs are read as `proctor.tasks.bbh` reads them (`SaylorTwift/bbh`, locally
`bbh/bbh/<task>.json`): OLMES's `lukaemon/bbh` is a loading script that yields the
`examples` of the release's `bbh/<task>.json` in file order, and its card's per-task row
counts and `num_bytes` (UTF-8 bytes of input and target plus 8 offset bytes per row) equal
those of the local files for all 27 tasks. Shots and descriptions come from the release's
`bbh/cot-prompts/<task>.txt`: each `STD:bbh_<task>` entry (input, target) equals the parsed
file's shot byte for byte, and each `BBH_DESCRIPTIONS` value is the file's description plus
"\n\n" (checked for all 27 tasks at 5a51f50).

Differences from OLMES. (1) Stops: OLMES passes only the tokenizer's EOS (`eot_token_id`);
with a template whose end of turn differs from that token (e.g. Llama 3's `<|eot_id|>`
against `<|end_of_text|>`), OLMES generates past the end of turn up to 512 tokens while
proctor stops there. (2) OLMES's `_extract_answer_regex` appends "\b([A-Z])\b" written in a
non-raw string, so its "\b" is a backspace character (U+0008); it is kept so, and in
practice never matches.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional

from proctor.metrics.answers import BBH_ANSWER, exact_match
from proctor.outputs.records import SampleOutput
from proctor.requests import Generate, GenerateResult
from proctor.tasks import bbh
from proctor.tasks.base import TaskConfig
from proctor.tasks.bbh import BBHTask, CotPrompt
from proctor.tasks.config import ChatFormat
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor.tasks.prompts import olmes_chat
from proctor.tasks.spec import parse_spec

VARIANT = "tulu"
FORMATS = ("cot", "cot-v1")          # cot: "the answer is" extraction; cot-v1: answer_regex
COT_CUE = "A: Let's think step by step."
MAX_GEN_TOKS = 512
CHAT = ChatFormat(fewshot_as_multiturn=True, assistant_prefix="")

#: OLMES `BBH_ANSWER_REGEX`: the answer's shape per task; "MC" is a parenthesised letter
ANSWER_REGEX: dict[str, str] = {
    "boolean_expressions": "[tT]rue|[fF]alse",
    "causal_judgement": "[yY]es|[nN]o",
    "dyck_languages": "[\\]\\)\\}\\> ]+",
    "formal_fallacies": "[iI]nvalid|[vV]alid",
    "multistep_arithmetic_two": "-?\\d+",
    "navigate": "[nN]o|[yY]es",
    "object_counting": "\\d+",
    "sports_understanding": "[yY]es|[nN]o",
    "web_of_lies": "[yY]es|[nN]o",
    "word_sorting": "[a-z ]+",
}
MC_ANSWER = "\\([A-Z]\\)"
#: `_extract_answer_regex`'s default patterns, tried in order; $ANS$ is the task's answer regex
ANSWER_TEMPLATES: tuple[str, ...] = (
    "(?i)So the answer is ($ANS$)\\.?",
    "(?i)answer is ($ANS$)",
    "(?i)answer:.*?($ANS$)",
    "(?i)answer\\b.*?($ANS$)",
    "($ANS$)",
)
#: the multiple-choice last resort, as OLMES writes it ("\b([A-Z])\b", not raw: backspaces)
LONE_LETTER = "\x08([A-Z])\x08"
#: (left, right) pairs removed from around the extracted answer, in OLMES's order
DELIMITERS: tuple[tuple[str, str], ...] = (
    ("$", "$"), ("\\(", "\\)"), ("(", ")"), ("**", "**"), ("***", "***"),
    ("\\[", "\\]"), ("'", "'"), ("`", "`"), ('"', '"'),
)
_GOLD = re.compile("(?<=answer is )(.*)(?=.)")   # `_process_doc`'s, without "the"


def doc_to_text(question: str) -> str:
    """`_process_doc`'s query with short_prefix and use_cot."""
    return f"Q: {question}\n{COT_CUE}"


def solution(target: str) -> str:
    """Strip a leading "Let's think step by step." from a shot's target, leaving its chain of thought."""
    return re.sub("^Let's think step by step.", "", target)


def gold_answer(target: str) -> str:
    """`_process_doc`'s answer: the `answer is ...` part of a CoT target, else the target."""
    match = _GOLD.search(target)
    return match[0] if match else target


def is_multiple_choice(task: str) -> bool:
    """Tell whether a BBH task's answers are parenthesised letters (it has no answer regex of its own)."""
    return task not in ANSWER_REGEX


def answer_regex(task: str) -> str:
    """Return the regex the task's answers match: its own from OLMES, or a parenthesised letter."""
    return MC_ANSWER if is_multiple_choice(task) else ANSWER_REGEX[task]


def extract_the_answer_is(text: str) -> str:
    """`GenericBBH._extract_answer` (`:cot`): the first "the answer is" match, periods stripped."""
    match = re.search(BBH_ANSWER, text)
    return match[0].strip(".") if match else ""


def _first_pattern_last_match(text: str, patterns: list[str]) -> str:
    """Return the last match of the first pattern that matches at all ("" when none does)."""
    for pattern in patterns:
        found = re.findall(pattern, text)
        if found:
            return str(found[-1])
    return ""


def _strip_delimiters(answer: str, pattern: str) -> str:
    """Remove each delimiter pair from around the answer, stripping the answer after each.

    A pair whose left side is itself a valid answer is skipped.
    """
    for left, right in DELIMITERS:
        if re.match(pattern, left):
            continue
        answer = re.sub(f"^{re.escape(left)}(.*){re.escape(right)}$", "\\1", answer).strip()
    return answer


def extract_answer_regex(text: str, task: str) -> str:
    """`GenericBBH._extract_answer_regex` (`:cot-v1`, answer_extract_fn "answer_regex")."""
    pattern = answer_regex(task)
    patterns = [t.replace("$ANS$", pattern) for t in ANSWER_TEMPLATES]
    if is_multiple_choice(task):
        patterns.append(LONE_LETTER)
    patterns.append(f"(?i)({pattern})")
    answer = _strip_delimiters(_first_pattern_last_match(text, patterns), pattern)
    if is_multiple_choice(task) and len(answer) == 1:
        answer = f"({answer})"   # a bare letter gets the gold's parentheses back
    return answer


def extractor(fmt: str, task: str) -> Callable[[str], str]:
    """Return the spec format's answer extraction."""
    if fmt == "cot-v1":
        return lambda text: extract_answer_regex(text, task)
    if fmt == "cot":
        return extract_the_answer_is
    raise ValueError(f"no BBH answer extraction for format {fmt!r}")


def olmes_exact_match(prediction: str, gold: str, task: str) -> bool:
    """OLMES BBH's ExactMatch: case ignored, punctuation too except for dyck_languages."""
    return exact_match(prediction, gold, ignore_case=True, ignore_punctuation=task != "dyck_languages")


class BBHOlmesTask(GenerationTask):
    """OLMES's GenericBBH in chat format; docs, shots and description read by `BBHTask`."""

    supports_chat = True
    supports_system_instruction = True   # OLMES's context_kwargs system_prompt
    system_instruction_needs_chat = True
    metric_names = ("exact_match", "exact_match_simple")

    def __init__(self, config: TaskConfig):
        super().__init__(config)
        self.reader = BBHTask(config)   # the lm-eval family's reading of the same files
        self.extract = extractor(parse_spec(config.name)[1] or "", config.needs("subject"))

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the docs as the lm-eval BBH family does (`BBHTask`)."""
        return self.reader.docs(data_dir)

    def prompt_prefix(self, data_dir: Optional[Path]) -> CotPrompt:
        """Return the description and the first `num_shots` shots of `cot-prompts/<task>.txt`."""
        return self.reader.prompt_prefix(data_dir)

    def doc_request(self, prefix: CotPrompt, doc: dict) -> Generate:
        """Build the doc's chat request: shots as turns; greedy, 512 new tokens, no stop strings."""
        chat = self.config.chat
        if chat is None:
            raise ValueError(f"{self.config.name} is a chat spec; its config has no chat format")
        shots = [(doc_to_text(q), " " + solution(a)) for q, a in prefix.shots]
        context = olmes_chat(prefix.description + "\n\n", shots, doc_to_text(doc["input"]), chat,
                             self.config.system_instruction)
        return Generate(context=context, max_gen_toks=MAX_GEN_TOKS, stop=(), do_sample=False, temperature=0.0)

    def doc_target(self, doc: dict) -> str:
        """Return the doc's gold: the `answer is ...` part of its target, else the target."""
        return gold_answer(doc["target"])

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Score the first sample's extracted answer by OLMES's exact match and by string equality."""
        if not result.samples:
            raise ValueError(f"{instance.query_id}: a GenerateResult without samples")
        gold, task = instance.target, self.config.needs("subject")
        answers = [self.extract(s.text) for s in result.samples]
        ok = olmes_exact_match(answers[0], gold, task)   # only the first sample counts
        return DocScore(
            metrics={"exact_match": 1.0 if ok else 0.0, "exact_match_simple": 1.0 if answers[0] == gold else 0.0},
            predicted_answer=answers[0],
            correct_answer=gold,
            is_correct=ok,
            model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason, {"extracted": a})
                               for s, a in zip(result.samples, answers)),
        )


def spec_name(task: str, fmt: str = "cot-v1") -> str:
    """Return the spec name of a BBH task in a format: `bbh_<task>:<fmt>::tulu`."""
    return f"bbh_{task}:{fmt}::{VARIANT}"


def suite_name(fmt: str = "cot-v1") -> str:
    """Return the name of the suite of all BBH tasks in a format: `bbh:<fmt>::tulu`."""
    return f"bbh:{fmt}::{VARIANT}"


def configs() -> dict[str, TaskConfig]:
    """Build the config of every spec: each BBH task in each format."""
    return {
        spec_name(t, fmt): TaskConfig(name=spec_name(t, fmt), benchmark="bbh", dataset_path=bbh.DATASET,
                                      dataset_name=t, split="test", num_shots=3, primary_metric="exact_match",
                                      fewshot_source=f"STD:bbh_{t}", subject=t, chat=CHAT)
        for fmt in FORMATS for t in bbh.TASKS
    }


TASK_CLASS = BBHOlmesTask
