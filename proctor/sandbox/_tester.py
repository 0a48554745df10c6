"""The trusted process of a check: runs the problem's own code and tests.

It calls the candidate only through a proxy. Standard library only (the runner imports it).

It executes the trusted prelude (the problem's prompt: the helpers some tests call,
e.g. `poly` or `encode_cyclic`), binds the entry point's name to the proxy, executes the
test code and calls `check(proxy)`. The proxy sends each call's arguments to the
candidate process as plain data and decodes the reply into fresh plain objects, so no
`__eq__` or other method of the candidate's can run here; an exception the candidate
raised is raised again here as a builtin (or a fresh) exception type. A candidate that
breaks the protocol (dies, exits, raises SystemExit or another BaseException, sends what
is not plain data) fails the check even if the test code swallowed the error.

The verdict is what this process writes to its verdict fd, which the candidate never holds.
"""

import builtins
import json
import os
from typing import Any, Callable, NoReturn

try:
    from . import _wire
except ImportError:
    import _wire  # type: ignore[no-redef]  # imported by the runner from this directory: the same module


class _Broken(BaseException):
    """Raised through the test code when the candidate broke the protocol."""


class _Link:
    """The tester's end of the channel to the candidate, and how it went."""

    def __init__(self, fd: int):
        self.fd = fd
        self.broken: str | None = None          # the first protocol failure, as a detail line
        self.died = False                       # the candidate process went away
        self.harness_error: str | None = None   # the tests passed something the wire cannot carry

    def fail(self, detail: str, died: bool = False) -> NoReturn:
        if self.broken is None:
            self.broken, self.died = detail, died
        raise _Broken(self.broken)

    def call(self, args: tuple, kwargs: dict) -> Any:
        if self.broken is not None:
            raise _Broken(self.broken)
        try:
            request = {"args": _wire.to_plain(args), "kwargs": _wire.to_plain(kwargs)}
        except _wire.WireError as e:
            self.harness_error = f"the tests called the candidate with {e}"
            self.fail(self.harness_error)
        try:
            _wire.send(self.fd, request)
            reply = _wire.recv(self.fd)
        except (EOFError, OSError):
            self.fail("the candidate process ended before the tests finished", died=True)
        except _wire.WireError as e:
            self.fail(f"the candidate sent {e}")
        if "return" in reply:
            try:
                return _wire.from_plain(reply["return"])
            except _wire.WireError as e:
                self.fail(f"the candidate returned {e}")
        name, message = reply.get("raise"), reply.get("message", "")
        if type(name) is str and type(message) is str:
            if reply.get("base") is not False:
                self.fail(f"the candidate raised {name[:100]} ({message[:200]}) before the tests finished")
            raise _rebuild(name[:100], message[:300])
        error = reply.get("error")
        self.fail(f"the candidate's result could not be sent back: {error[:200]}" if type(error) is str
                  else "the candidate sent an unexpected reply")


def _rebuild(name: str, message: str) -> Exception:
    """Make a fresh exception standing for the one the candidate raised."""
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:
            pass
    if name.isidentifier():
        return type(name, (Exception,), {"__module__": "candidate"})(message)
    return Exception(f"{name}: {message}")


def _proxy(link: _Link, name: str) -> Callable[..., Any]:
    def candidate(*args: object, **kwargs: object) -> Any:
        return link.call(args, kwargs)
    candidate.__name__ = candidate.__qualname__ = name
    return candidate


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


def judge(entry_point: str, prelude: str, test: str, fd: int) -> dict:
    """Run the check and return the verdict: {"outcome": passed|failed|memory|error, "detail", "candidate_died"}."""
    try:
        prelude_code = compile(prelude, "prompt.py", "exec")
        test_code = compile(test, "test.py", "exec")
    except SyntaxError as e:
        return {"outcome": "error", "detail": f"the tests do not compile: {e}"[:300]}
    try:
        hello = _wire.recv(fd)
    except (EOFError, OSError):
        return {"outcome": "failed", "detail": "the candidate process ended before the tests ran",
                "candidate_died": True}
    except _wire.WireError as e:
        return {"outcome": "failed", "detail": f"the candidate sent {e}"}
    if "setup_error" in hello:
        kind = "memory" if hello.get("kind") == "memory" else "failed"
        return {"outcome": kind, "detail": str(hello["setup_error"])[:300]}
    if hello != {"ready": True}:
        return {"outcome": "failed", "detail": "the candidate sent an unexpected first message"}

    link = _Link(fd)
    candidate = _proxy(link, entry_point)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(prelude_code, namespace)
        namespace[entry_point] = candidate   # tests that call the function by its name
        exec(test_code, namespace)
        check = namespace.get("check")
    except BaseException as e:
        return {"outcome": "error", "detail": f"the tests failed to load: {_describe(e)}"}
    if not callable(check):
        return {"outcome": "error", "detail": "the tests define no check(candidate)"}
    failure = None
    try:
        check(candidate)
    except _Broken:
        pass
    except MemoryError:
        failure = {"outcome": "memory", "detail": "MemoryError"}
    except BaseException as e:
        failure = {"outcome": "failed", "detail": _describe(e)}
    if link.harness_error is not None:
        return {"outcome": "error", "detail": link.harness_error[:300]}
    if link.broken is not None:   # even when the test code caught the _Broken
        return {"outcome": "failed", "detail": link.broken[:300], "candidate_died": link.died}
    return failure or {"outcome": "passed", "detail": ""}


def main(entry_point: str, prelude: str, test: str, fd: int, verdict_fd: int) -> None:
    try:
        verdict = judge(entry_point, prelude, test, fd)
    except BaseException as e:   # a bug here must still end in a verdict, never a pass
        verdict = {"outcome": "error", "detail": f"tester: {_describe(e)}"}
    try:
        os.write(verdict_fd, json.dumps(verdict).encode())
    finally:
        os._exit(0)
