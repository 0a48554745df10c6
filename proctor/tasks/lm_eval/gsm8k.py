r"""GSM8K 5-shot as lm-evaluation-harness 0.4.13 runs it: spec `gsm8k::lm_eval` (lm-eval's `gsm8k`).

From lm_eval/tasks/gsm8k/gsm8k.yaml and lm-eval's defaults:

- Docs: `openai/gsm8k` config `main`, test split (1,319), in order; native_id = row index.
- Shots: 5 drawn from the train split by lm-eval's default sampler (`ContextSampler` in
  lm_eval/api/samplers.py): one `random.Random(1234)` per task, `rnd.sample(train, 5)`
  for each doc in doc order (`proctor.tasks.lm_eval.fewshot`). The few-shot split
  (train) is not the test split, so the eval doc is not passed to the sampler.
- Prompt: doc_to_text "Question: {question}\nAnswer:", doc_to_target = the whole
  `answer` (chain of thought and "#### N"), lm-eval's default target_delimiter " " and
  fewshot_delimiter "\n\n", no description: Σ("Question: q\nAnswer: a\n\n") +
  "Question: q\nAnswer:" (`proctor.tasks.lm_eval.context.fewshot_context`, which also
  lays out --system_instruction and the chat format).
- Generation: greedy (do_sample false, temperature 0), stop at "Question:", "</s>" or
  "<|im_end|>"; the YAML sets no max_gen_toks, so it is HFLM's default 256
  (`HFLM.max_gen_toks`, lm_eval/models/huggingface.py; vLLM's default is 256 too).
  Tokenized under lm-eval's policy.
- Scoring: two filters of the first sample (`take_first`), each an lm-eval `regex`
  filter (lm_eval/filters/extraction.py, fallback "[invalid]"):
  "strict-match" = first match of `#### (\-?[0-9\.\,]+)`; "flexible-extract" = last
  match (group_select -1) of `(-?[$0-9.,]{2,})|(-?[0-9]+)`, its non-empty group. Each is
  compared with the doc's whole `answer` by lm-eval's `exact_match`
  (lm_eval/api/metrics.py `exact_match_hf_evaluate`) with the YAML's regexes_to_ignore
  [",", "\$", "(?s).*#### ", "\.$"] applied to both sides in that order and
  ignore_case true. Per doc and in aggregate: `exact_match_strict` (lm-eval's
  `exact_match,strict-match`) and `exact_match_flexible` (`exact_match,flexible-extract`).

Primary metric: `exact_match_strict`. The Open LLM Leaderboard (v1, lm-eval commit
b281b09) reported GSM8K 5-shot as the exact match of the answer after "#### ", which is
what the strict-match filter extracts; flexible-extract, added later, also credits a
model that states its number without the "####" format, so it is reported beside it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional, Sequence

from proctor.data import load_split
from proctor.metrics.answers import GSM8K_IGNORE, exact_match, normalize_for_match, regex_extract
from proctor.outputs.records import SampleOutput
from proctor.requests import Context, Generate, GenerateResult
from proctor.tasks.base import TaskConfig
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor.tasks.lm_eval.context import fewshot_context
from proctor.tasks.lm_eval.fewshot import FEWSHOT_SEED, sample_random

DATASET = "openai/gsm8k"
CONFIG = "main"
SPEC = "gsm8k::lm_eval"
NUM_FEWSHOT = 5
STOP = ("Question:", "</s>", "<|im_end|>")
MAX_GEN_TOKS = 256          # HFLM.max_gen_toks: the YAML's generation_kwargs set none
TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"

#: lm-eval filter name -> (regex_pattern, group_select), from gsm8k.yaml's filter_list
FILTERS: dict[str, tuple[str, int]] = {
    "strict-match": (r"#### (\-?[0-9\.\,]+)", 0),
    "flexible-extract": (r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1),
}
#: lm-eval filter name -> proctor's metric name for its exact_match
METRICS: dict[str, str] = {"strict-match": "exact_match_strict", "flexible-extract": "exact_match_flexible"}
PRIMARY_FILTER = "strict-match"


def doc_to_text(row: dict) -> str:
    """Return lm-eval's doc_to_text: "Question: ..." with "Answer:" on the next line."""
    return f"Question: {row['question']}\nAnswer:"


def filtered(text: str) -> dict[str, str]:
    """Each filter's answer from one generated text."""
    return {name: regex_extract(text, pattern, group_select=group) for name, (pattern, group) in FILTERS.items()}


def lm_eval_exact_match(prediction: str, answer: str) -> bool:
    """gsm8k.yaml's exact_match: regexes_to_ignore on both sides, then case ignored."""
    return exact_match(prediction, answer, regexes_to_ignore=GSM8K_IGNORE, ignore_case=True)


class GSM8KLmEvalTask(GenerationTask):
    """GSM8K as lm-eval's `gsm8k` runs it: seeded shots from train, greedy, strict and flexible exact match."""

    supports_chat = True
    supports_system_instruction = True
    metric_names = tuple(METRICS.values())

    def rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split of `openai/gsm8k` (config `main`)."""
        return load_split(DATASET, CONFIG, split, data_dir)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the spec's split as docs, in order."""
        return self.as_docs(self.rows(data_dir, self.config.split), self.config.split)

    def shot_draws(self, count: int, data_dir: Optional[Path]) -> list[list[dict]]:
        """Draw the shots of the first `count` docs, in doc order from one seeded sampler."""
        n = self.config.num_shots
        if n == 0:
            return [[] for _ in range(count)]
        pool = self.rows(data_dir, "train")
        rnd = random.Random(FEWSHOT_SEED)
        return [sample_random(rnd, pool, n) for _ in range(count)]

    def _instances(self, data_dir: Optional[Path], limit: Optional[int]) -> list[GenerationInstance]:
        numbered = self.numbered_docs(data_dir, limit)
        draws = self.shot_draws(len(numbered), data_dir)
        return [
            GenerationInstance(
                query_id=qid, task=self.config.name, doc_id=doc_id, native_id=doc["native_id"],
                request=self.doc_request(shots, doc), target=self.doc_target(doc),
                metadata=self.doc_metadata(doc),
            )
            for (doc_id, doc, qid), shots in zip(numbered, draws)
        ]

    def context(self, shots: Sequence[dict], doc: dict) -> Context:
        """Lay out a doc's prompt after its shots as lm-eval's `fewshot_context` does (no description)."""
        c = self.config
        return fewshot_context("", [(doc_to_text(s), s["answer"]) for s in shots], doc_to_text(doc),
                               target_delimiter=TARGET_DELIMITER, fewshot_delimiter=FEWSHOT_DELIMITER,
                               gen_prefix=None, system_instruction=c.system_instruction, chat=c.chat)

    def doc_request(self, prefix: Sequence[dict], doc: dict) -> Generate:
        """`prefix`: the doc's own shots (`shot_draws`)."""
        return Generate(context=self.context(prefix, doc), max_gen_toks=MAX_GEN_TOKS, stop=STOP,
                        do_sample=False, temperature=0.0, policy="lm_eval")

    def doc_target(self, doc: dict) -> str:
        """lm-eval's doc_to_target: the whole answer (exact_match strips all up to "#### ")."""
        return doc["answer"]

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Score the first sample by each filter's exact match with the answer; strict-match is the primary."""
        if not result.samples:
            raise ValueError(f"{instance.query_id}: a GenerateResult without samples")
        answer = instance.target
        readings = [filtered(s.text) for s in result.samples]
        first = readings[0]  # lm-eval's take_first
        metrics = {METRICS[f]: 1.0 if lm_eval_exact_match(first[f], answer) else 0.0 for f in FILTERS}
        primary = METRICS[PRIMARY_FILTER]
        return DocScore(
            metrics=metrics,
            predicted_answer=first[PRIMARY_FILTER],
            correct_answer=normalize_for_match(answer, regexes_to_ignore=GSM8K_IGNORE, ignore_case=True),
            is_correct=metrics[primary] == 1.0,
            model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason, dict(r))
                               for s, r in zip(result.samples, readings)),
        )


def configs() -> dict[str, TaskConfig]:
    """Build the one spec's config."""
    return {SPEC: TaskConfig(name=SPEC, benchmark="gsm8k", dataset_path=DATASET, dataset_name=CONFIG,
                             split="test", num_shots=NUM_FEWSHOT, primary_metric=METRICS[PRIMARY_FILTER],
                             fewshot_source="train split, lm-eval random sampler (seed 1234)")}


TASK_CLASS = GSM8KLmEvalTask
