r"""BIG-Bench-Hard, 3-shot chain of thought, as lm-evaluation-harness 0.4.13 runs it.

Specs `bbh_<task>:cot::lm_eval` (27 tasks) reproduce lm-eval's `bbh_cot_fewshot_<task>`
(tasks/bbh/cot_fewshot/<task>.yaml + _cot_fewshot_template_yaml); the suite
`bbh:cot::lm_eval` is lm-eval's group `bbh_cot_fewshot`, whose reported score is the
mean over all 6,511 docs (`weight_by_size: true`), so its primary aggregate is `micro`.

- Docs: the Suzgun et al. release (`SaylorTwift/bbh` config <task>, test split; locally
  `bbh/bbh/<task>.json`), in order; native_id = row index.
- Prompt: description + "\n\n", then for each of the 3 shots
  "Q: {input}\nA: Let's think step by step.\n" + target + "\n\n", then
  "Q: {input}\nA: Let's think step by step.\n" (target_delimiter ""); in chat format
  the description is the system message and each shot a user and an assistant turn
  (`proctor.tasks.lm_eval.context`). Tokenized under lm-eval's policy. Description and
  shots come from the release's `cot-prompts/<task>.txt` (lm-eval's YAML `samples` were
  generated from the same files; the text after "A: Let's think step by step." is the
  shot's target, whether the file puts it on a new line or after a space).
- Generation: greedy, max_gen_toks 1024, stop at "</s>", "Q" or "\n\n".
- Answer: lm-eval's filter "get-answer" = first match of
  `(?<=the answer is )(.*)(?=.)`, stripped, else "[invalid]"; the same pattern for every
  task, multiple-choice or free-form. exact_match compares it with the target verbatim
  (the YAML leaves ignore_case and ignore_punctuation off).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from proctor.data import load_data_text, load_split
from proctor.errors import UserError
from proctor.metrics.answers import BBH_ANSWER, exact_match, regex_extract
from proctor.outputs.records import SampleOutput
from proctor.requests import Generate, GenerateResult
from proctor.tasks.base import TaskConfig
from proctor.tasks.counts import BBH_TEST
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor.tasks.lm_eval.context import fewshot_context

DATASET = "SaylorTwift/bbh"
VARIANT = "lm_eval"
SUITE = f"bbh:cot::{VARIANT}"
COT_CUE = "A: Let's think step by step."
STOP = ("</s>", "Q", "\n\n")
MAX_GEN_TOKS = 1024

#: the 27 BBH tasks, in lm-eval's group order
TASKS: tuple[str, ...] = tuple(BBH_TEST)


@dataclass(frozen=True)
class CotPrompt:
    """One task's `cot-prompts/<task>.txt`: its description and (input, target) shots."""

    description: str
    shots: tuple[tuple[str, str], ...]


def doc_to_text(question: str) -> str:
    """Lay out a question as lm-eval's prompt does: "Q: ...", then the chain-of-thought cue."""
    return f"Q: {question}\n{COT_CUE}\n"


def parse_cot_prompt(text: str, where: str) -> CotPrompt:
    """Split a BBH cot-prompts file: canary line, "-----", description, then Q/A shots."""
    _, sep, body = text.partition("-----\n")
    if not sep:
        raise UserError(f"{where}: expected a '-----' line after the canary line")
    description, *blocks = body.rstrip("\n").split("\n\nQ: ")
    shots = []
    for i, block in enumerate(blocks, start=1):
        question, cue, answer = block.partition("\n" + COT_CUE)
        if not cue or answer[:1] not in ("\n", " "):
            raise UserError(f"{where}: shot {i} has no line '{COT_CUE}' followed by its answer")
        shots.append((question, answer[1:]))
    if not shots:
        raise UserError(f"{where}: no 'Q: ...' shots found")
    return CotPrompt(description=description, shots=tuple(shots))


class BBHTask(GenerationTask):
    """One BBH task as lm-eval's `bbh_cot_fewshot_<task>` runs it (the subject is the task)."""

    supports_chat = True
    supports_system_instruction = True
    metric_names = ("exact_match",)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the task's test rows as docs."""
        return self.as_docs(load_split(DATASET, self.config.subject, "test", data_dir), "test")

    def cot_prompt_file(self) -> str:
        """Return the path of the task's `cot-prompts` file, relative to the data directory."""
        return f"bbh/cot-prompts/{self.config.subject}.txt"

    def cot_prompt(self, data_dir: Optional[Path]) -> CotPrompt:
        """Read and parse the task's `cot-prompts` file: all its shots."""
        relative = self.cot_prompt_file()
        text = load_data_text(relative, f"the BBH chain-of-thought prompt for {self.config.subject}",
                              data_dir)
        return parse_cot_prompt(text, relative)

    def prompt_prefix(self, data_dir: Optional[Path]) -> CotPrompt:
        """Return the description and the spec's shots (its first `num_shots`)."""
        cot = self.cot_prompt(data_dir)
        k = self.config.num_shots
        if k > len(cot.shots):
            raise UserError(f"{self.cot_prompt_file()} has {len(cot.shots)} few-shot examples, "
                            f"{k} were asked for")
        return CotPrompt(cot.description, cot.shots[:k])

    def doc_request(self, prefix: CotPrompt, doc: dict) -> Generate:
        """Build the doc's greedy request: description, shots and question as lm-eval lays them out."""
        c = self.config
        context = fewshot_context(prefix.description + "\n\n", [(doc_to_text(q), a) for q, a in prefix.shots],
                                  doc_to_text(doc["input"]), target_delimiter="", fewshot_delimiter="\n\n",
                                  system_instruction=c.system_instruction, chat=c.chat)
        return Generate(context=context, max_gen_toks=MAX_GEN_TOKS, stop=STOP, do_sample=False,
                        temperature=0.0, policy="lm_eval")

    def doc_target(self, doc: dict) -> str:
        """Return the doc's target, compared verbatim."""
        return doc["target"]

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Score the first sample's "the answer is" extraction by exact match with the target."""
        if not result.samples:
            raise ValueError(f"{instance.query_id}: a GenerateResult without samples")
        sample = result.samples[0]  # lm-eval's take_first
        answer = regex_extract(sample.text, BBH_ANSWER)
        ok = exact_match(answer, instance.target)
        return DocScore(
            metrics={"exact_match": 1.0 if ok else 0.0},
            predicted_answer=answer,
            correct_answer=instance.target,
            is_correct=ok,
            model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason,
                                            {"extracted": regex_extract(s.text, BBH_ANSWER)})
                               for s in result.samples),
        )


def spec_name(task: str) -> str:
    """Return the spec name of a BBH task: `bbh_<task>:cot::lm_eval`."""
    return f"bbh_{task}:cot::{VARIANT}"


def configs() -> dict[str, TaskConfig]:
    """Build the config of each task's spec."""
    return {
        spec_name(t): TaskConfig(name=spec_name(t), benchmark="bbh", dataset_path=DATASET,
                                 dataset_name=t, split="test", num_shots=3,
                                 primary_metric="exact_match", fewshot_source="bbh:cot-prompts",
                                 subject=t)
        for t in TASKS
    }


TASK_CLASS = BBHTask
