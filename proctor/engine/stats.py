"""What the engine did: counters for logs, metrics.json and tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class EngineStats:
    """What the last `run` did (for logs, metrics.json timing, and tests)."""

    requests: int = 0          # as given, duplicates included
    unique: int = 0            # after dedupe on request key
    cached: int = 0            # unique requests answered by the cache (any rank's)
    rolling_chunks: int = 0    # chunks of the rolling requests in the full plan
    rows: int = 0              # model rows with readouts in the full plan
    batches: int = 0           # batches in the full plan
    batches_run: int = 0       # batches actually sent to the backend
    tokens_run: int = 0        # real (unpadded) tokens the backend computed, each shared prefix once
    tokens_total: int = 0      # real tokens the same batches hold without prefix sharing
    prefixes_run: int = 0      # shared prefixes computed (a prefix spanning consecutive batches counts once)
    plan_seconds: float = 0.0  # tokenizing and batching
    oom_splits: int = 0        # batches halved because the backend ran out of memory
    first_batch_seconds: Optional[float] = None  # from `run` to the first batch's results stored
    # generation (`Engine.generate`)
    gen_requests: int = 0         # as given, duplicates included
    gen_unique: int = 0           # after dedupe on request key
    gen_cached: int = 0           # unique requests answered by the cache
    gen_batches: int = 0          # backend calls in the full plan (one queue of requests each)
    gen_batches_run: int = 0      # backend calls made (more than planned after running out of memory)
    gen_slots: int = 0            # samples decoded at once (0: as many as the queue holds)
    gen_samples: int = 0          # samples generated (a greedy request's repeats count once)
    gen_tokens: int = 0           # tokens generated
    gen_prompt_tokens: int = 0    # context tokens prefilled (once per prompt, whatever its samples)
    gen_seconds: float = 0.0
    gen_first_done_seconds: Optional[float] = None  # from `generate` to the first request's samples done


# What each rank did on its own; `Engine.total_stats` adds them up over the ranks.
WORK_COUNTERS = ("batches_run", "tokens_run", "tokens_total", "prefixes_run", "oom_splits",
                 "gen_batches_run", "gen_samples", "gen_tokens", "gen_prompt_tokens")
