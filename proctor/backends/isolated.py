"""Native code run in a child process, so that its crash is an error here and not the end of the run.

A backend whose C/C++ code can die on a signal (a llama.cpp build for another CPU dies with
SIGSEGV or SIGILL on its first decode) builds its model in a child process and calls it
through a socket pair. When the child dies, the call raises `NativeCrash`, a UserError naming the
backend, the signal and what to do: the CLI prints it as one line, the runtime closes the
result cache, and what the engine stored before the crash is there for the rerun.

Only the child touches the native library: it is a fresh interpreter (`python -m
proctor.backends.isolated`, not a fork), so it shares no threads or locks with this process
and a crash takes only the child. Not multiprocessing's spawn either: that re-imports the
caller's main script in the child, which a script without an `if __name__ == "__main__":`
guard cannot survive.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable, NoReturn

from proctor.errors import UserError

_CLOSE_TIMEOUT_S = 10.0


class NativeCrash(UserError):
    """A backend's native code died on a signal (or exited) while working for this run."""


def exit_description(exitcode: int | None) -> str:
    """Name how a child process ended: "SIGSEGV" for a signal, "exit code 3" otherwise."""
    if exitcode is None:
        return "no exit status"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


class ChildObject:
    """An object built by `factory` in a child process (a fresh interpreter); `call` runs one of its methods there.

    Arguments and results cross the socket pickled. An exception the method raises is raised
    here as it was; the child dying raises NativeCrash with `backend` and `advice` in its message.
    """

    def __init__(self, factory: Callable[[], Any], *, backend: str, advice: str):
        self.backend = backend
        self.advice = advice
        ours, theirs = socket.socketpair()
        # the child imports what this process can (its sys.path), so the factory unpickles there
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
        with theirs:
            self._process = subprocess.Popen([sys.executable, "-m", "proctor.backends.isolated", str(theirs.fileno())],
                                             pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        self._conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, _stop, self._conn, self._process)
        self._conn.send(factory)
        self._crash = ""  # the message, once the child has died
        self._receive("loading the model")

    def call(self, method: str, *args: Any, doing: str = "", **kwargs: Any) -> Any:
        """Run `method(*args, **kwargs)` on the child's object and return its result."""
        if self._crash:
            raise NativeCrash(self._crash)
        try:
            self._conn.send((method, args, kwargs))
        except (BrokenPipeError, ConnectionError, EOFError):
            self._crashed(doing or method)
        return self._receive(doing or method)

    def close(self) -> None:
        """Ask the child to exit and wait for it (it is killed if it does not)."""
        self._finalizer()

    def _receive(self, doing: str) -> Any:
        try:
            ok, value = self._conn.recv()
        except (EOFError, ConnectionError):
            self._crashed(doing)
        if not ok:
            raise value
        return value

    def _crashed(self, doing: str) -> NoReturn:
        try:
            code: int | None = self._process.wait(_CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        how = exit_description(code)
        self._finalizer()
        self._crash = (f"the {self.backend} backend's native code died ({how}) while {doing}; results "
                       f"computed before it are in the result cache and a rerun resumes from them. {self.advice}")
        raise NativeCrash(self._crash) from None


def _serve(conn: Connection) -> None:
    """Build the object (in the child), then answer calls until told to stop or the socket closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        target = conn.recv()()
    except Exception as e:
        _send(conn, False, e)
        return
    _send(conn, True, None)
    while True:
        try:
            message = conn.recv()
        except (EOFError, ConnectionError):
            return
        if message is None:
            return
        method, args, kwargs = message
        try:
            result = getattr(target, method)(*args, **kwargs)
        except Exception as e:
            _send(conn, False, e)
        else:
            _send(conn, True, result)


def _send(conn: Connection, ok: bool, value: Any) -> None:
    try:
        conn.send((ok, value))
    except Exception as e:  # an exception (or result) that does not pickle: send what it said
        conn.send((False, RuntimeError(f"{type(value).__name__}: {value} (not picklable: {e})")))


def _stop(conn: Connection, process: subprocess.Popen) -> None:
    try:
        conn.send(None)
    except (BrokenPipeError, ConnectionError, EOFError, OSError):
        pass
    try:
        process.wait(_CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    conn.close()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
