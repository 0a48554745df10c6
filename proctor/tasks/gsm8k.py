r"""GSM8K (`openai/gsm8k`, config `main`): OLMES 8-shot chain-of-thought generation.

Specs:

- `gsm8k::olmo3:n8:v2` — the OLMo 3 protocol of spec/olmes.md: 8 samples per question at
  temperature 0.6, top-p 0.6; per doc pass_at_{1,2,4,8}, maj_at_{1,2,4,8} and
  exact_match (first sample); primary pass_at_1.
- `gsm8k::olmes` — OLMES-v0.2's greedy GSM8K, primary exact_match. Source: the
  `"gsm8k::olmes"` entry of allenai/olmes `oe_eval/configs/tasks.py` (task gsm8k, split
  test, num_shots 8, fewshot_source STD:GSM8k, primary exact_match, no overrides), so its
  generation is the GSM8K task default of `oe_eval/tasks/oe_eval_tasks/gsm8k.py`:
  max_gen_toks 512, do_sample False, temperature 0.0, stop sequences
  ["Question:", "</s>", "<|im_end|>", "\n\n"] — the same as olmo3:n8:v2, which only
  overrides sampling and repeats (OLMES's gsm8k.py itself was not in the searched corpus;
  its defaults are as quoted by ports of it and the OLMo-3 evaluation protocol).

- `gsm8k::tulu` — OLMES's chat variant (tasks.py `"gsm8k::tulu"`: use_chat_format, 8 shots
  of STD:GSM8k, exact_match), greedy as gsm8k::olmes.

In chat format (gsm8k::tulu, or --chat-template on the others) the GSM8K class's
chat_overrides apply (allenai/olmes oe_eval/tasks/oe_eval_tasks/gsm8k.py): assistant_prefix
"Answer:", few-shot as multiturn — user "Question: q" (the trailing "Answer:" cut), assistant
"Answer: <cot>" —, the rendered template followed by "Answer:", and stop sequences
["Question:", "</s>", "<|im_end|>"] ("\n\n" is dropped).

All: test split, 1,319 docs in order; native_id = row index (OLMES maps the split with
`with_indices=True` into field `id`); prompt = 8 shots of STD:GSM8k
("Question: q\nAnswer: <cot>") then "Question: q\nAnswer:".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot, load_split
from proctor.metrics.answers import extract_last_number, gsm8k_gold, gsm8k_match
from proctor.metrics.samples import sampled_metrics
from proctor.outputs.records import SampleOutput
from proctor.requests import Generate, GenerateResult
from proctor.tasks.base import TaskConfig
from proctor.tasks.config import ChatFormat
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor.tasks.prompts import make_cloze_prompt, olmes_context

DATASET = "openai/gsm8k"
CONFIG = "main"
FEWSHOT = "STD:GSM8k"
STOP = ("Question:", "</s>", "<|im_end|>", "\n\n")
CHAT_STOP = ("Question:", "</s>", "<|im_end|>")
CHAT = ChatFormat(fewshot_as_multiturn=True, assistant_prefix="Answer:")


@dataclass(frozen=True)
class Variant:
    """What differs between the GSM8K specs: decoding and the metrics reported."""

    max_gen_toks: int
    do_sample: bool
    temperature: float
    top_p: float
    repeats: int
    ks: tuple[int, ...]          # pass_at_k / maj_at_k reported (empty: exact_match only)
    primary_metric: str


VARIANTS: dict[str, Variant] = {
    "gsm8k::olmo3:n8:v2": Variant(max_gen_toks=512, do_sample=True, temperature=0.6, top_p=0.6,
                                  repeats=8, ks=(1, 2, 4, 8), primary_metric="pass_at_1"),
    "gsm8k::olmes": Variant(max_gen_toks=512, do_sample=False, temperature=0.0, top_p=1.0,
                            repeats=1, ks=(), primary_metric="exact_match"),
    "gsm8k::tulu": Variant(max_gen_toks=512, do_sample=False, temperature=0.0, top_p=1.0,
                           repeats=1, ks=(), primary_metric="exact_match"),
}


class GSM8KTask(GenerationTask):
    """GSM8K as OLMES runs it: few-shot chain of thought, each sample's last number its answer."""

    supports_chat = True
    supports_system_instruction = True   # OLMES's context_kwargs system_prompt
    system_instruction_needs_chat = True

    def chat_format(self, fewshot_as_multiturn: Optional[bool]) -> ChatFormat:
        """Return OLMES's GSM8K chat layout ("Answer:" assistant prefix); shots as turns unless the run says not."""
        return replace(CHAT, fewshot_as_multiturn=fewshot_as_multiturn is not False)

    def __init__(self, config: TaskConfig):
        super().__init__(config)
        self.variant = VARIANTS[config.name]
        ks = self.variant.ks
        self.metric_names = (*(f"pass_at_{k}" for k in ks), *(f"maj_at_{k}" for k in ks),
                             "exact_match")

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the split's rows as docs."""
        return self.as_docs(load_split(DATASET, CONFIG, self.config.split, data_dir), self.config.split)

    def prompt_prefix(self, data_dir: Optional[Path]) -> list[tuple[str, str]]:
        """Return the shots as (prompt text, " " + chain of thought)."""
        k = self.config.num_shots
        if k == 0:
            return []
        return [(make_cloze_prompt(s["question"]), " " + s["answer"]) for s in load_fewshot(FEWSHOT, k, data_dir)]

    def doc_request(self, prefix: list[tuple[str, str]], doc: dict) -> Generate:
        """Build the doc's request with the variant's decoding; in chat format without the blank-line stop."""
        v, chat = self.variant, self.config.chat
        context = olmes_context("", prefix, make_cloze_prompt(doc["question"]), chat, self.config.system_instruction)
        return Generate(context=context, max_gen_toks=v.max_gen_toks, stop=STOP if chat is None else CHAT_STOP,
                        do_sample=v.do_sample, temperature=v.temperature, top_p=v.top_p, repeats=v.repeats)

    def doc_target(self, doc: dict) -> str:
        """Return the gold number of the doc's answer (`gsm8k_gold`)."""
        return gsm8k_gold(doc["answer"])

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Match each sample's last number with the gold: pass@k and maj@k over samples, exact_match of the first."""
        samples = result.samples
        if not samples:
            raise ValueError(f"{instance.query_id}: a GenerateResult without samples")
        gold = instance.target
        answers = [extract_last_number(s.text) for s in samples]
        correct = [gsm8k_match(a, gold) for a in answers]
        metrics = sampled_metrics(answers, correct, self.variant.ks)
        metrics["exact_match"] = 1.0 if correct[0] else 0.0
        return DocScore(
            metrics=metrics,
            predicted_answer=answers[0],
            correct_answer=gold,
            is_correct=correct[0],
            model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason, {"extracted": a, "correct": ok})
                               for s, a, ok in zip(samples, answers, correct)),
        )


def configs() -> dict[str, TaskConfig]:
    """Build the config of each spec (`VARIANTS`); gsm8k::tulu's in OLMES's chat format."""
    return {
        name: TaskConfig(name=name, benchmark="gsm8k", dataset_path=DATASET, dataset_name=CONFIG,
                         split="test", num_shots=8, primary_metric=v.primary_metric,
                         fewshot_source=FEWSHOT, chat=CHAT if name.endswith("::tulu") else None)
        for name, v in VARIANTS.items()
    }


TASK_CLASS = GSM8KTask
