"""Run a function in N CPU processes joined by a torch.distributed gloo group (for tests).

`run_ranks(target, world_size, *args)` spawns `world_size` processes; each initialises the
process group (file:// rendezvous in a temporary directory), calls `target(*args)`, and
returns its (picklable) result; the results come back as a list indexed by rank.
`target` must be importable by the children: define it at module level in a test module or
in this one. Each child uses one thread so the processes don't fight over the cores.
"""

from __future__ import annotations

import datetime
import os
import pickle
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank: int, world_size: int, init_method: str, out_dir: str, target: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    out = Path(out_dir) / f"rank{rank}.pkl"
    # A rank that fails leaves the others in a collective: let that fail within minutes.
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=120))
    try:
        result: Any = ("ok", target(*args))
    except BaseException as e:  # report it to the parent, whose assertion shows it
        result = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()
    out.write_bytes(pickle.dumps(result))
    # Leave without running C++ destructors: gloo's threads can abort a normal interpreter
    # exit ("terminate called without an active exception") after the work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(target: Callable, world_size: int, *args: Any, timeout_s: float = 300) -> list[Any]:
    """`target(*args)` on each of `world_size` ranks; raises if any rank failed or hung."""
    with tempfile.TemporaryDirectory() as tmp:
        init_method = "file://" + os.path.join(tmp, "rendezvous")
        context = mp.start_processes(_entry, args=(world_size, init_method, tmp, target, args),
                                     nprocs=world_size, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"distributed run of {target.__name__} exceeded {timeout_s} s")
        results = []
        for rank in range(world_size):
            status, value = pickle.loads((Path(tmp) / f"rank{rank}.pkl").read_bytes())
            if status != "ok":
                raise AssertionError(f"rank {rank} of {world_size} failed: {value}")
            results.append(value)
        return results
