"""The untrusted process: runs generated code, already confined (see `_confine`).

Standard library only (the runner imports it).

`serve`: executes the candidate module, says "ready" (or how it failed), then answers
calls of its entry point and nothing else, each as plain data over the channel (`_wire`).
Everything here runs beside the generated code, which may rewrite any of it; that is
harmless, as all this process can do is send bytes, and the tester trusts none of them
beyond their decoded plain value.

The module runs in globals of its own with no `__name__`, as human-eval's and HF
evaluate's code_eval `exec` it, so its `if __name__ == "__main__":` block does not run
(the name reads as the builtins module's, "builtins").
"""

import builtins
import os
import sys
from typing import Callable

try:
    from . import _wire  # imported as part of proctor.sandbox
except ImportError:
    import _wire  # type: ignore[no-redef]  # imported by the runner from this directory: the same module


def _describe(e: BaseException) -> str:
    try:
        if isinstance(e, SystemExit):
            return f"SystemExit({e.code!r})"[:300]
        return f"{type(e).__name__}: {e}"[:300]
    except BaseException:
        return type(e).__name__[:100]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _load(source: str, entry_point: str) -> tuple[Callable[..., object] | None, dict | None]:
    """Load the program: return (its entry point, None), or (None, the setup_error message)."""
    namespace = {"__builtins__": builtins}
    try:
        exec(compile(source, "program.py", "exec"), namespace)
    except SyntaxError as e:
        return None, {"setup_error": f"SyntaxError: {e}"[:300], "kind": "failed"}
    except MemoryError:
        return None, {"setup_error": "MemoryError", "kind": "memory"}
    except BaseException as e:
        return None, {"setup_error": f"{_describe(e)} while loading the program", "kind": "failed"}
    fn = namespace.get(entry_point)
    if not callable(fn):
        return None, {"setup_error": f"NameError: {entry_point!r} is not a function of the program",
                      "kind": "failed"}
    return fn, None


def _reply(fn: Callable[..., object], request: dict) -> dict:
    try:
        args = _wire.from_plain(request["args"])
        kwargs = _wire.from_plain(request["kwargs"])
        result = fn(*args, **kwargs)
    except MemoryError:
        return {"raise": "MemoryError", "message": "", "base": False}
    except Exception as e:
        return {"raise": type(e).__name__[:100], "message": _describe(e).partition(": ")[2], "base": False}
    except BaseException as e:
        return {"raise": type(e).__name__[:100], "message": _describe(e), "base": True}
    try:
        return {"return": _wire.to_plain(result)}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def serve(source: str, entry_point: str, fd: int) -> None:
    fn, failure = _load(source, entry_point)
    _flush()
    _wire.send(fd, failure or {"ready": True})
    if failure:
        os._exit(0)
    assert fn is not None   # _load gives the function exactly when it gives no failure
    while True:
        try:
            request = _wire.recv(fd)
        except EOFError:
            os._exit(0)
        reply = _reply(fn, request)
        _flush()
        try:
            _wire.send(fd, reply)
        except _wire.WireError as e:   # e.g. a return value over the size limit
            _wire.send(fd, {"error": str(e)[:300]})

