"""lm-evaluation-harness's own task objects, built from local rows (the hub is not reachable).

`lm_eval_task` loads a task YAML shipped with lm-eval, swaps its dataset for one made
from our rows (`custom_dataset`), seeds the few-shot sampler as `simple_evaluate` does,
and `lm_eval_requests` builds its requests exactly as an evaluation run would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def lm_eval_tasks_dir() -> Path:
    import lm_eval

    return Path(lm_eval.__file__).parent / "tasks"


def lm_eval_yaml(relative: str) -> dict:
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(lm_eval_tasks_dir() / relative, resolve_func=True)


def lm_eval_task(relative: str, splits: dict[str, list[dict]], num_fewshot: Optional[int] = None, **overrides):
    import datasets
    from lm_eval.api.task import ConfigurableTask

    config = lm_eval_yaml(relative)
    dataset = datasets.DatasetDict({s: datasets.Dataset.from_list(rows) for s, rows in splits.items()})
    config["custom_dataset"] = lambda **_: dataset
    if num_fewshot is not None:
        config["num_fewshot"] = num_fewshot
    config.update(overrides)
    task = ConfigurableTask(config=config)
    task.set_fewshot_seed(1234)  # simple_evaluate's default fewshot_random_seed
    return task


def lm_eval_chat_template(tokenizer):
    """lm-eval's own `HFLM.apply_chat_template` over `tokenizer` (no model needed)."""
    from functools import partial
    from types import SimpleNamespace

    from lm_eval.models.huggingface import HFLM

    return partial(HFLM.apply_chat_template, SimpleNamespace(tokenizer=tokenizer, chat_template_args={}))


def lm_eval_requests(task, limit: Optional[int] = None, **chat) -> list[tuple[dict, list[tuple]]]:
    """Per doc, in doc order: (doc, [request arguments per choice]): (context, continuation) for
    multiple choice, (context, generation kwargs) for generation. `chat`: build_all_requests's
    apply_chat_template, fewshot_as_multiturn, system_instruction and chat_template."""
    task.build_all_requests(limit=limit, rank=0, world_size=1, **chat)
    by_doc: dict[int, list] = {}
    for inst in task.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    out = []
    for doc_id in sorted(by_doc):
        insts = sorted(by_doc[doc_id], key=lambda i: i.idx)
        out.append((insts[0].doc, [tuple(i.arguments) for i in insts]))
    return out
