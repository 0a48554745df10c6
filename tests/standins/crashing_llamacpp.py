"""A llama.cpp backend that really segfaults (in its child process) on its Nth scoring call.

Run as `python crashing_llamacpp.py N proctor-args...`: the CLI with the llama.cpp backend's
child opened by `open_crashing`, which is pickled to the child by name: `crashing_llamacpp`
(this file's folder is on the script's sys.path, which the child is given).
"""

import ctypes
import os
import sys

from proctor.backends import llamacpp


def open_crashing(path, **kwargs):
    backend = llamacpp.open_in_child(path, **kwargs)
    crash_on = int(os.environ["PROCTOR_STANDIN_CRASH_ON"])
    score = backend.score
    calls = []

    def crashing_score(*args, **kw):
        calls.append(1)
        if len(calls) == crash_on:
            ctypes.string_at(0)  # SIGSEGV in native code, as a miscompiled llama.cpp kernel
        return score(*args, **kw)

    backend.score = crashing_score
    return backend


if __name__ == "__main__":
    import crashing_llamacpp  # this file under its module name, so the child can import it by that
    from proctor.cli import main

    os.environ["PROCTOR_STANDIN_CRASH_ON"] = sys.argv[1]
    llamacpp.open_in_child = crashing_llamacpp.open_crashing
    sys.exit(main(sys.argv[2:]))
