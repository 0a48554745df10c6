"""Progress bar for the engine: requests done/total, tokens/s, ETA (rich; off when not a TTY)."""

from __future__ import annotations

import sys
import time
from typing import Optional

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress as RichProgress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _TokensPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        rate = task.fields.get("tok_s")
        return Text(f"{rate:,.0f} tok/s" if rate else "- tok/s", style="progress.data.speed")


class Progress:
    """Counts requests (cached ones included) and the tokens the model actually ran."""

    def __init__(self, total: int, *, enabled: bool, description: str = "loglikelihood"):
        self._bar: Optional[RichProgress] = None
        self._tokens = 0
        self._started = time.monotonic()
        self._enabled = enabled
        if enabled and sys.stderr.isatty():
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _TokensPerSecond(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._task = self._bar.add_task(description, total=total, tok_s=0.0)
            self._bar.start()

    def say(self, line: str) -> None:
        """Print `line` to stderr above the bar (without a terminal, as a plain line) when progress is shown."""
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        elif self._enabled:
            print(line, file=sys.stderr, flush=True)

    def advance(self, requests: int, tokens: int = 0) -> None:
        """Count `requests` as done and `tokens` as run by the model (the tok/s rate)."""
        self._tokens += tokens
        if self._bar is not None:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            self._bar.update(self._task, advance=requests, tok_s=self._tokens / elapsed)

    def close(self) -> None:
        """Stop the bar, leaving it on the terminal."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
