r"""HumanEval: code completion judged by running the problem's tests on the completed function in the sandbox.

The data is `openai/openai_humaneval`, test split, 164 problems. Both specs reproduce
lm-evaluation-harness 0.4.13's `humaneval` task family (lm_eval/tasks/humaneval/humaneval*.yaml
and utils.py):

- prompt = the doc's `prompt` (the signature and docstring), 0-shot; with a chat
  template (lm-eval's --apply_chat_template) it is the one user turn; lm-eval's
  tokenization policy;
- generation stops at "\nclass", "\ndef", "\n#", "\nif" or "\nprint", at most 1,024
  new tokens;
- the program run is `prompt + completion + "\n" + test + "\ncheck(entry_point)"`
  (lm-eval's `build_predictions` filter joins prompt and completion; HF `code_eval`
  appends "\n" and the reference, which is `doc_to_target` = test + "\ncheck(...)");
- a sample passes when that program runs to the end within 3 s (code_eval's timeout).
  It is run split in two (`sandbox.judge`), so that generated code cannot report its
  own pass: `prompt + completion` in the sandboxed candidate process, the prompt (for
  the helpers some tests call) and `test` + `check(entry_point)` in a trusted tester
  process that reaches the completed function only by calls carrying plain data;
- per-doc pass@k is the unbiased estimator of Chen et al. (2021), averaged over docs.

Specs:

- `humaneval::greedy` — lm-eval `humaneval`: greedy, 1 sample, pass_at_1.
- `humaneval::n64` — lm-eval `humaneval_64`: 64 samples at temperature 0.2, top-p 0.95,
  pass_at_{2,8,16,32,64} as lm-eval reports, plus pass_at_1 (the primary metric here:
  the usual headline number of the sampled protocol).

native_id = the problem's `task_id` ("HumanEval/0"). Not reproduced: the instruct
variants (`humaneval_instruct`, chat prompt with a gen_prefix) and `humaneval_plus`.

Scoring runs code, so it is not pure like other tasks' `score`: `score_many` runs every
sample of many docs in one bounded pool, and each sample's record says how it ended and
which isolation ran it. Set `allow_unsafe_exec` (the CLI's `--allow-unsafe-exec`) to run
where no network isolation is possible; `preflight()` refuses early otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from proctor import sandbox
from proctor.data import load_split
from proctor.metrics.samples import pass_at_ks
from proctor.outputs.records import GenerationSettings, SampleOutput
from proctor.requests import Generate, GenerateResult
from proctor.tasks.base import TaskConfig
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor.tasks.lm_eval.context import fewshot_context

DATASET = "openai/openai_humaneval"
STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
MAX_GEN_TOKS = 1024
LIMITS = sandbox.Limits(wall_s=3.0)


@dataclass(frozen=True)
class Variant:
    """What differs between the HumanEval specs: decoding and the pass@k reported."""

    repeats: int
    do_sample: bool
    temperature: float
    top_p: float
    ks: tuple[int, ...]
    primary_metric: str


VARIANTS: dict[str, Variant] = {
    "humaneval::greedy": Variant(repeats=1, do_sample=False, temperature=0.0, top_p=1.0,
                                 ks=(1,), primary_metric="pass_at_1"),
    "humaneval::n64": Variant(repeats=64, do_sample=True, temperature=0.2, top_p=0.95,
                              ks=(1, 2, 8, 16, 32, 64), primary_metric="pass_at_1"),
}


@dataclass(frozen=True)
class Problem:
    """What `score` needs of a doc besides the completion (an instance's `target`)."""

    prompt: str
    test: str
    entry_point: str
    canonical_solution: str

    def program(self, completion: str) -> str:
        """Return the single program lm-eval / code_eval run (what `candidate` splits in two)."""
        return self.prompt + completion + "\n" + self.test + f"\ncheck({self.entry_point})"

    def candidate(self, completion: str) -> sandbox.Candidate:
        """Split the program for `sandbox.judge`: prompt + completion sandboxed, the prompt and test trusted."""
        return sandbox.Candidate(source=self.prompt + completion, entry_point=self.entry_point,
                                 prelude=self.prompt, test=self.test)


class HumanEvalTask(GenerationTask):
    """HumanEval as lm-eval runs it: completions of each problem's prompt, scored by running its tests."""

    supports_chat = True
    supports_system_instruction = True

    def __init__(self, config: TaskConfig):
        super().__init__(config)
        self.variant = VARIANTS[config.name]
        self.metric_names = tuple(f"pass_at_{k}" for k in self.variant.ks)
        self.allow_unsafe_exec = False
        self.limits = LIMITS
        self.workers: Optional[int] = None   # sandbox pool size; None: by CPU count

    def native_id(self, row: dict, index: int) -> str:
        """Return the problem's `task_id` ("HumanEval/0")."""
        return row["task_id"]

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the split's problems as docs."""
        return self.as_docs(load_split(DATASET, None, self.config.split, data_dir), self.config.split)

    def doc_request(self, prefix: str, doc: dict) -> Generate:
        """Ask for completions of the problem's prompt (the one user turn in chat format), decoded as the spec says."""
        v, c = self.variant, self.config
        # in chat format the problem is the one user turn; the program is still prompt + completion
        context = fewshot_context(prefix, [], doc["prompt"], system_instruction=c.system_instruction, chat=c.chat)
        return Generate(context=context, max_gen_toks=MAX_GEN_TOKS, stop=STOP,
                        do_sample=v.do_sample, temperature=v.temperature, top_p=v.top_p,
                        repeats=v.repeats, policy="lm_eval")

    def doc_target(self, doc: dict) -> Problem:
        """Return what scoring needs of the doc besides the completion."""
        return Problem(doc["prompt"], doc["test"], doc["entry_point"], doc["canonical_solution"])

    # ---- scoring: runs code ------------------------------------------------------

    def sandbox_info(self) -> sandbox.SandboxInfo:
        """Detect the isolation the sandbox can give on this machine."""
        return sandbox.detect()

    def preflight(self, allow_unsafe_exec: bool) -> None:
        """Refuse before any generation when the sandbox would refuse to run the samples."""
        self.allow_unsafe_exec = allow_unsafe_exec
        sandbox.require(self.sandbox_info(), allow_unsafe_exec)

    def settings(self, instances: Sequence[GenerationInstance]) -> GenerationSettings:
        """Return the generation settings, plus the sandbox that ran the code and whether unsafe exec was allowed."""
        return replace(super().settings(instances), sandbox=self.sandbox_info().describe(),
                       allow_unsafe_exec=self.allow_unsafe_exec)

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Run one doc's samples and score them (`score_many` of one doc)."""
        return self.score_many([instance], [result])[0]

    def score_many(self, instances: Sequence[GenerationInstance],
                   results: Sequence[GenerateResult]) -> list[DocScore]:
        """Every sample of every doc through one sandbox pool; one DocScore per doc."""
        if len(instances) != len(results):
            raise ValueError(f"{len(instances)} instances but {len(results)} results")
        for inst, res in zip(instances, results):
            if len(res.samples) < max(self.variant.ks):
                raise ValueError(f"{inst.query_id}: {len(res.samples)} samples, pass@k needs "
                                 f"{max(self.variant.ks)}")
        candidates = [inst.target.candidate(s.text) for inst, res in zip(instances, results)
                      for s in res.samples]
        runs = iter(sandbox.judge_many(candidates, self.limits, workers=self.workers,
                                       allow_unsafe_exec=self.allow_unsafe_exec))
        where = self.sandbox_info().describe()
        return [self._doc_score(inst, res, [next(runs) for _ in res.samples], where)
                for inst, res in zip(instances, results)]

    def _doc_score(self, instance: GenerationInstance, result: GenerateResult,
                   runs: list[sandbox.ExecResult], where: str) -> DocScore:
        metrics = pass_at_ks([r.passed for r in runs], self.variant.ks)
        first = result.samples[0]
        return DocScore(
            metrics=metrics,
            predicted_answer=first.text,
            correct_answer=instance.target.canonical_solution,
            is_correct=runs[0].passed,
            model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason,
                                            {"passed": r.passed, "outcome": r.outcome.value, "detail": r.detail,
                                             "exec_time_s": r.elapsed_s, "sandbox": where})
                               for s, r in zip(result.samples, runs)),
        )


def configs() -> dict[str, TaskConfig]:
    """Build the config of each spec (`VARIANTS`)."""
    return {
        name: TaskConfig(name=name, benchmark="humaneval", dataset_path=DATASET, dataset_name=None,
                         split="test", num_shots=0, primary_metric=v.primary_metric)
        for name, v in VARIANTS.items()
    }


TASK_CLASS = HumanEvalTask
