"""The seed's in-loop evaluation loop (its C4 example), verbatim apart from its inputs."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader


def seed_loop(model, task, metric, device="cpu", batch_size: int = 8) -> dict:
    loader = DataLoader(task, batch_size=batch_size, collate_fn=task.collate_fn)
    metric = metric.to(device)
    model.eval()
    with torch.no_grad():
        for batch in loader:
            batch = {key: value.to(device) for key, value in batch.items()}
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
            ).logits  # Adapt this call to your model's forward interface.
            metric.update(batch, logits)
    return metric.compute()
