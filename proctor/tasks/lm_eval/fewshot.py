"""lm-eval 0.4.13's few-shot samplers, reproduced draw for draw.

lm-eval seeds one `random.Random(1234)` per task and draws each doc's shots from it in
doc order, so a doc's shots depend on every draw before it. When the few-shot split is
the test split (for HellaSwag both are unset, which lm-eval also counts as equal), the
eval doc is passed along: n + 1 docs are drawn and copies of the eval doc removed.
"""

from __future__ import annotations

import random
from typing import Optional, Sequence

from proctor.errors import UserError

FEWSHOT_SEED = 1234


def _too_few(n: int, pool: Sequence[dict]) -> UserError:
    return UserError(f"{n} few-shot examples requested but the few-shot split has only {len(pool)}")


def sample_random(rnd: random.Random, pool: Sequence[dict], n: int,
                  eval_doc: Optional[dict] = None) -> list[dict]:
    """`ContextSampler.sample`: n docs from `pool` (rnd advances exactly as lm-eval's does)."""
    if n == 0:
        return []
    if n + (eval_doc is not None) > len(pool):
        raise _too_few(n, pool)
    if eval_doc is None:
        return rnd.sample(list(pool), n)
    shots = [x for x in rnd.sample(list(pool), n + 1) if x != eval_doc][:n]
    if len(shots) < n:  # the pool held more than one copy of the eval doc
        rest = [x for x in pool if x != eval_doc]
        if n > len(rest):
            raise _too_few(n, rest)
        shots = rnd.sample(rest, n)
    return shots


def first_n(pool: Sequence[dict], n: int, eval_doc: Optional[dict] = None) -> list[dict]:
    """`FirstNSampler.sample`: the first n docs of the split, in order."""
    docs = [x for x in pool if x != eval_doc] if eval_doc is not None else list(pool)
    if n > len(docs):
        raise _too_few(n, docs)
    return docs[:n]
