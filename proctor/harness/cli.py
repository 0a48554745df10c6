"""`proctor lm-eval ...`: lm-eval's own command line, with proctor's model registered as `--model proctor`.

lm-eval 0.4.13 registers models only from its own source tree (entry-point plugins came
later), so this command registers `ProctorLM` under the name `proctor` and hands every other
argument to lm-eval's command line, in this process. `--data-dir DIR` first (default:
$PROCTOR_DATA_DIR) serves the datasets proctor has locally to lm-eval's tasks, as it does for
`lm_eval:` specs; the model need not be proctor's (`--model hf` runs lm-eval's own HFLM).
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from proctor.data import resolve_data_dir
from proctor.errors import UserError
from proctor.harness.library import lm_eval_version
from proctor.harness.offline import local_datasets

MODEL_NAME = "proctor"


def split_data_dir(argv: Sequence[str]) -> tuple[Optional[str], list[str]]:
    """Return the leading `--data-dir DIR` (or `--data-dir=DIR`) and the arguments for lm-eval."""
    rest = list(argv)
    if rest[:1] == ["--data-dir"]:
        if len(rest) < 2:
            raise UserError("--data-dir needs a directory: proctor lm-eval --data-dir DIR run ...")
        return rest[1], rest[2:]
    if rest and rest[0].startswith("--data-dir="):
        return rest[0].split("=", 1)[1], rest[1:]
    return None, rest


def run_lm_eval(argv: Sequence[str]) -> int:
    """Run lm-eval's command line on `argv` with `--model proctor` registered; return its exit code."""
    given, rest = split_data_dir(argv)
    lm_eval_version()
    data_dir = resolve_data_dir(given)
    import lm_eval.models  # noqa: F401  (lm-eval's own models register here, and only while its registry is empty)
    from lm_eval.__main__ import cli_evaluate
    from lm_eval.api.registry import register_model

    from proctor.harness.lm import ProctorLM

    register_model(MODEL_NAME)(ProctorLM)
    saved = sys.argv
    sys.argv = ["lm-eval", *rest]
    try:
        with local_datasets(data_dir):
            cli_evaluate()
    except SystemExit as done:  # lm-eval's --help, or its own argument errors
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.argv = saved
    return 0
