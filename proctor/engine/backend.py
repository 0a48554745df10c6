"""What the engine needs from a backend, and everything callers read off one.

Every backend (transformers, llama.cpp, OpenAI-compatible servers, vLLM) provides all of
it; nothing is probed with getattr. Hidden states are the one optional service, a protocol
of its own (`proctor.engine.hidden.HiddenStateBackend`: transformers only).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

from proctor.engine.gen_plan import GenRow
from proctor.engine.plan import Row
from proctor.engine.tokens import TextEncoder
from proctor.requests import Generation, LoglikelihoodResult


@runtime_checkable
class Backend(Protocol):
    """A model the engine scores and generates with, plus what metrics.json records about it."""

    @property
    def tokenizer(self) -> TextEncoder:
        """The model's tokenizer."""

    @property
    def max_length(self) -> int:
        """The most tokens one model input may hold (the run's max length)."""

    @property
    def shares_prefixes(self) -> bool:
        """Whether `score` takes `prefix=` and `parents=` (the engine then groups rows by shared prefix)."""

    @property
    def fingerprint(self) -> str:
        """Stable identity of model weights + dtype + device type + max_length."""

    @property
    def dtype(self) -> Any:
        """The weights' type as metrics.json records it (`str()` of it; e.g. torch.float32, "Q4_1")."""

    @property
    def device(self) -> Any:
        """Where the model runs as metrics.json records it (`str()` of it; e.g. cpu, cuda:0, remote)."""

    def config_record(self) -> dict[str, Any]:
        """Return the backend's own settings for metrics.json's model_config (JSON values)."""

    def token_budget(self) -> int:
        """Tokens per batch for batch_size="auto" (deterministic per device)."""

    def score(self, rows: Sequence[Row], prefix: tuple[int, ...] = (),
              parents: Sequence[int] = ()) -> list[tuple[LoglikelihoodResult, ...]]:
        """One forward pass over `rows`; results aligned with each row's readouts.

        Only a backend with `shares_prefixes` is given `prefix` (tokens every row continues)
        and `parents` (row i continues row parents[i], -1 for none; see engine.plan.Batch).
        """

    def generate(
        self, rows: Sequence[GenRow], on_done: Optional[Callable[[int, tuple[Generation, ...]], None]] = None,
        slots: Optional[int] = None,
    ) -> list[tuple[Generation, ...]]:
        """Each row's samples in seed order; `on_done(i, samples)` as soon as row i is finished.

        `rows` is the whole queue; `slots` caps the samples decoded at once (None: the
        backend's own scheduling). A backend that schedules on its own (a server, vLLM)
        may ignore it.
        """
