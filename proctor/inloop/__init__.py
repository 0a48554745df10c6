"""In-loop evaluation for training loops (the OLMo in-loop evals API).

    from proctor.inloop import C4Metric, build_task
    task = build_task("c4_en", tokenizer, model_ctx_len=2048)
    loader = DataLoader(task, batch_size=8, collate_fn=task.collate_fn)

Tasks are torch Datasets of pre-tokenized rows built with the same tokenization policy
and the same task code as `proctor run`; metrics keep sums and reduce them across
`torch.distributed` ranks. Use `DocumentSampler` to split a task across ranks.
"""

# Any task's items: what each task's `collate_fn` does (padding is masked, so the pad id
# never changes results).
from proctor.inloop.batching import collate_items as collate_fn
from proctor.inloop.distributed import DocumentSampler
from proctor.inloop.icl_metric import ICLMetric
from proctor.inloop.lm_metric import C4Metric, PalomaMetric
from proctor.inloop.tasks import (
    LENGTHS,
    PALOMA_SOURCES,
    Babilong,
    C4English,
    ICLTask,
    Paloma,
    Phonebook,
    build_task,
    task_names,
)

__all__ = [
    "Babilong", "C4English", "C4Metric", "DocumentSampler", "ICLMetric", "ICLTask", "LENGTHS",
    "PALOMA_SOURCES", "Paloma", "PalomaMetric", "Phonebook", "build_task", "collate_fn", "task_names",
]
