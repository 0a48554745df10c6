"""Language-modelling tasks for training loops: documents as scored chunks (C4, Paloma).

Chunking is `TokenizationPolicy.rolling_windows`, the rule the offline engine uses: every
text token is a target once, the first conditioned on BOS (EOS without a BOS), no EOS
target, at most `model_ctx_len` targets per chunk, adjacent chunks share one context token.
A document with no tokens (an empty text) gives no chunks and is skipped; it still counts
among the first `num_samples` documents read. The document's UTF-8 byte count rides on its
last chunk (0 on the others), so BPB is only valid over a complete pass.

Item order: chunks are sorted longest first (stable: ties keep document order, then chunk
order), so consecutive items have similar lengths and a batch pads little. `item_id` is
the position in that order; `documents[i]` the document number of item i (0..n-1 over the
scored documents, in corpus order), which `DocumentSampler` partitions across ranks.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from proctor.data.corpora import PALOMA_SOURCES, Document, PathLike, c4_documents, check_paloma_source, paloma_documents
from proctor.engine.tokens import TextEncoder, TokenizationPolicy
from proctor.inloop.batching import collate_items, pad_token_id

log = logging.getLogger(__name__)
_TOKENIZE_BATCH = 256  # documents tokenized at a time, so only their Window tuples are alive

__all__ = ["LMChunkDataset", "C4English", "Paloma", "PALOMA_SOURCES"]


class LMChunkDataset(Dataset):
    """Scored chunks of documents; `task[i]` is a dict of python lists/ints (batch contract)."""

    task_name = "lm"

    def __init__(self, documents: Sequence[Document], tokenizer: TextEncoder, model_ctx_len: int = 2048) -> None:
        if isinstance(model_ctx_len, bool) or not isinstance(model_ctx_len, int) or model_ctx_len < 1:
            raise ValueError(f"model_ctx_len must be a positive integer, got {model_ctx_len!r}")
        self.model_ctx_len = model_ctx_len
        self.pad_token_id = pad_token_id(tokenizer)
        self.tokenizer_name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
        self.num_documents_read = len(documents)
        policy = TokenizationPolicy(tokenizer, max_length=model_ctx_len)
        self.scored_documents: list[Document] = []  # indexed by document number (doc_id)
        # Per chunk: inputs followed by the last target, so inputs = seq[:-1], labels = seq[1:].
        sequences: list[np.ndarray] = []
        doc_ids: list[int] = []
        byte_counts: list[int] = []
        for begin in range(0, len(documents), _TOKENIZE_BATCH):
            batch = documents[begin : begin + _TOKENIZE_BATCH]
            for document, windows in zip(batch, policy.rolling_windows([d.text for d in batch])):
                if not windows:
                    continue
                doc_id = len(self.scored_documents)
                self.scored_documents.append(document)
                n_bytes = len(document.text.encode("utf-8"))
                for k, window in enumerate(windows):
                    seq = np.asarray(window.inputs + window.targets[-1:], dtype=np.int64)
                    assert window.start == 0 and tuple(seq[1:].tolist()) == window.targets
                    sequences.append(seq)
                    doc_ids.append(doc_id)
                    byte_counts.append(n_bytes if k == len(windows) - 1 else 0)
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))  # stable
        self._sequences = [sequences[i] for i in order]
        self.documents: list[int] = [doc_ids[i] for i in order]
        self.bytes: list[int] = [byte_counts[i] for i in order]
        log.info("%s: %d documents read, %d scored (empty ones skipped), %d chunks of at most %d tokens",
                 self.task_name, self.num_documents_read, len(self.scored_documents), len(self), model_ctx_len)

    def __len__(self) -> int:
        return len(self._sequences)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"item {index} out of range for {len(self)} chunks")
        seq = self._sequences[index]
        return {
            "input_ids": seq[:-1].tolist(),
            "labels": seq[1:].tolist(),
            "item_id": index,
            "num_items": len(self),
            "doc_id": self.documents[index],
            "bytes": self.bytes[index],
        }

    def collate_fn(self, items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Right-pad chunks into a batch with this task's pad id (`collate_items`)."""
        return collate_items(items, self.pad_token_id)

    @property
    def num_tokens(self) -> int:
        """Scored tokens over the whole task."""
        return sum(len(s) - 1 for s in self._sequences)

    @property
    def total_bytes(self) -> int:
        """UTF-8 bytes of the scored text over the whole task (the BPB denominator)."""
        return sum(self.bytes)

    def config(self) -> dict[str, Any]:
        """Return what the task was built from (safe to log or dump: no credentials)."""
        return {"task": self.task_name, "model_ctx_len": self.model_ctx_len,
                "tokenizer": self.tokenizer_name, "documents_read": self.num_documents_read,
                "documents_scored": len(self.scored_documents), "chunks": len(self)}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "task")
        return f"{type(self).__name__}({fields})"


class C4English(LMChunkDataset):
    """`c4_en`: the first `num_samples` documents of C4 English validation, chunked.

    Documents come from `path` (a file or directory) if given, else the local data
    directory (`data_dir`, else $PROCTOR_DATA_DIR), else the hub, streamed.
    """

    task_name = "c4_en"

    def __init__(self, tokenizer: TextEncoder, num_samples: int = 1000, model_ctx_len: int = 2048,
                 data_dir: Optional[PathLike] = None, path: Optional[PathLike] = None) -> None:
        self.num_samples = num_samples
        super().__init__(c4_documents(data_dir, num_samples, path=path), tokenizer, model_ctx_len)

    def config(self) -> dict[str, Any]:
        """Return what the task was built from, with `num_samples`."""
        return {**super().config(), "num_samples": self.num_samples}


class Paloma(LMChunkDataset):
    """`paloma_bpb` / `paloma_<source>_bpb`: the first `num_samples` documents of each selected source.

    The sources (default: all 16, in PALOMA_SOURCES order) make one corpus for the metric.
    `token` authenticates the hub download only; it is never stored on the task.
    """

    task_name = "paloma"

    def __init__(self, tokenizer: TextEncoder, dataset_name: Union[str, Sequence[str], None] = None,
                 split: str = "val", num_samples: int = 1000, model_ctx_len: int = 2048,
                 data_dir: Optional[PathLike] = None, token: Optional[str] = None) -> None:
        sources = (PALOMA_SOURCES if dataset_name is None else
                   (dataset_name,) if isinstance(dataset_name, str) else tuple(dataset_name))
        if not sources:
            raise ValueError("dataset_name selects no Paloma source; omit it for all 16")
        if len(set(sources)) != len(sources):
            raise ValueError(f"dataset_name repeats a source: {list(sources)}")
        for source in sources:
            check_paloma_source(source, split)  # fail before any download
        self.dataset_name = sources
        self.split = split
        self.num_samples = num_samples
        documents: list[Document] = []
        for source in sources:
            documents.extend(paloma_documents(source, split, num_samples, data_dir, token=token))
        super().__init__(documents, tokenizer, model_ctx_len)

    def config(self) -> dict[str, Any]:
        """Return what the task was built from, with its sources, split and `num_samples`."""
        return {**super().config(), "dataset_name": list(self.dataset_name), "split": self.split,
                "num_samples": self.num_samples}
