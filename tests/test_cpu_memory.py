"""Large CPU tensors reuse freed memory once proctor loads a CPU model (glibc's malloc thresholds)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from proctor.backends.cpu_memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.set_num_threads(1)  # one arena: the main thread allocates every tensor
x = torch.ones(1000, 1536)
def layer():  # a layer's temporaries: several 6 MB tensors alive at once, then all freed
    temporaries = [x * k for k in range(6)]
    del temporaries
for _ in range(3):
    layer()  # warm up (glibc adapts its thresholds to what is freed)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    layer()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    def faults(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    # glibc's own thresholds trim the freed top of the heap, so the next layer's temporaries are
    # faulted in again: ~9,000-18,000 faults (or far more) for the 40 layers here; with proctor's,
    # 0 when the machine is quiet, and up to ~3,000 in a run beside another busy process: each
    # is the fewest of three runs
    plain, kept = (min(faults(mode) for _ in range(3)) for mode in ("plain", "keep"))
    assert kept * 3 < plain
