"""What a call of the engine is about to do, said before it starts, with a rough time.

The time comes from the rate this model ran at the last time it was measured on this
machine (tokens/s, kept in the result cache under the engine's fingerprint: model, dtype,
device, window and tokenization policy), so a first run says what it will do and every
later one also how long it should take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from proctor.engine.engine import Engine

#: a call shorter than this measures start-up costs more than a rate: not kept
MIN_MEASURED_SECONDS = 1.0


def duration(seconds: float) -> str:
    """`seconds` as a person says it: 40 s, 12 min, 2.5 h."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def counted(n: int, what: str, plural: str = "") -> str:
    """`n` with `what` in the plural when it is not one: 1 request, 8 requests (`plural`: when not what + s)."""
    return f"{n:,} {what}" if n == 1 else f"{n:,} {plural or what + 's'}"


def scored_work(description: str, batches: list, pending: int, cached: int, rate: Optional[float]) -> str:
    """Say what a call that runs `batches` (`proctor.engine.plan.Batch`) does for `pending` requests."""
    tokens = sum(b.real_tokens + len(b.prefix) for b in batches)
    held = f" ({cached:,} more cached)" if cached else ""
    return workload_line(description, f"{counted(pending, 'request')}{held}: {tokens:,} tokens in "
                         f"{counted(len(batches), 'batch', 'batches')}", tokens, rate)


def workload_line(description: str, what: str, tokens: int, rate: Optional[float], *, at_most: bool = False) -> str:
    """One line: the kind, what it will do, and from a measured rate (tokens/s) its rough time."""
    line = f"{description}: {what}"
    if rate and tokens:
        bound = "at most " if at_most else ""
        line += f"; {bound}about {duration(tokens / rate)} at the {rate:,.0f} tokens/s measured here before"
    return line


def measured_rate(engine: Engine, kind: str) -> Optional[float]:
    """Return the tokens/s `kind` ran at the last time this engine's model was measured here (None: never, or no cache)."""
    return None if engine.cache is None else engine.cache.get_rate(engine.fingerprint, kind)


def keep_rate(engine: Engine, kind: str, tokens: int, seconds: float) -> None:
    """Keep the rate of a call that ran `tokens` in `seconds` (a call too short to tell is not kept)."""
    if engine.cache is not None and tokens > 0 and seconds >= MIN_MEASURED_SECONDS:
        engine.cache.put_rate(engine.fingerprint, kind, tokens / seconds)
