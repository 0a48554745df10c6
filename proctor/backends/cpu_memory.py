"""Large CPU tensors from memory the process already holds, not fresh pages every time.

glibc's malloc serves each allocation above its mmap threshold (128 KiB at first, up to
32 MiB as it adapts) with a fresh `mmap` and returns it to the system on free. A forward
pass allocates dozens of such tensors per layer (activations of a thousand tokens are
megabytes), and glibc trims what is freed at the top of its heap: either way the next
tensor is page-faulted in again and zeroed by the kernel. Three 1,000-token forwards of
SmolLM2-135M took 18,000 to 400,000 page faults here and 10-25% more time than with
fixed thresholds, which make malloc keep freed memory in its heap and reuse it (under
2,000 faults; docs/benchmarks.md, "Whole runs").

Process-wide, so it is set when a CPU model is loaded, and only with glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Activations of a batch (1,024 tokens: at most ~13 MB) come from the heap; larger buffers (an
# LM head's logits chunk, 400 MB) are still mapped and returned, so a run's peak memory stays
# what it was. 32 MiB is also the most glibc's own adaptive threshold reaches.
_MMAP_THRESHOLD = 32 << 20
_TRIM_THRESHOLD = 2 << 30  # 256 MiB still let the heap be trimmed and faulted in again here


@functools.lru_cache(maxsize=None)
def keep_freed_memory() -> bool:
    """Ask glibc's malloc to reuse freed memory for large allocations; False where it is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl has no mallopt thresholds
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
