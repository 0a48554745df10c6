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

The child never outlives this process: on Linux the kernel kills it when the thread that
started it ends (PR_SET_PDEATHSIG), however this process ends. A child that stops
answering is ended too: one stopped by a signal for `STOPPED_LIMIT_S`, or one that uses no
CPU time for `STALLED_LIMIT_S` while a call waits (a deadlock), raises NativeCrash.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable, NoReturn, Optional

import psutil

from proctor.errors import UserError

_CLOSE_TIMEOUT_S = 10.0
STOPPED_LIMIT_S = 10.0    # a child stopped (SIGSTOP, a debugger) this long while a call waits is ended
STALLED_LIMIT_S = 120.0   # a child that uses no CPU time this long while a call waits is ended
_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1
# signals of native code gone wrong: the backend's crash advice fits these only
_CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT}


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
            self._process = subprocess.Popen([sys.executable, "-m", "proctor.backends.isolated", str(theirs.fileno()),
                                              str(os.getpid())],
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
        watch = _Watch(self._process.pid)
        try:
            while not self._conn.poll(_POLL_S):
                hung = watch.hung()
                if hung is not None:
                    self._hung(doing, hung)
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
        self._finalizer()
        self._crash = (f"the {self.backend} backend's native code died ({exit_description(code)}) while {doing}; "
                       f"results computed before it are in the result cache and a rerun resumes from them. "
                       f"{self._advice_for(code)}")
        raise NativeCrash(self._crash) from None

    def _advice_for(self, code: int | None) -> str:
        if code is not None and code < 0 and -code in _CRASH_SIGNALS:
            return self.advice
        if code == -signal.SIGKILL:
            return ("Something killed it: often the kernel's out-of-memory killer (see `dmesg`); free memory or "
                    "use a smaller --max-length.")
        return "Its own error, if any, is printed above."

    def _hung(self, doing: str, how: str) -> NoReturn:
        self._process.kill()
        self._finalizer()
        self._crash = (f"the {self.backend} backend's child process (pid {self._process.pid}) stopped answering "
                       f"while {doing}: {how}; it was ended. Results computed before it are in the result cache "
                       "and a rerun resumes from them.")
        raise NativeCrash(self._crash) from None


class _Watch:
    """Whether a child process that a call waits on has stopped answering: stopped, or using no CPU time."""

    def __init__(self, pid: int):
        self.process = psutil.Process(pid)
        self.cpu = -1.0
        self.active = self.running = time.monotonic()

    def hung(self) -> Optional[str]:
        """Why the child counts as hung (a description), or None while it works or has exited."""
        try:
            status = self.process.status()
            times = self.process.cpu_times()
        except psutil.Error:  # it has exited: the socket says so next
            return None
        now = time.monotonic()
        if status != psutil.STATUS_STOPPED:
            self.running = now
        elif now - self.running >= STOPPED_LIMIT_S:
            return (f"it was stopped by a signal for {STOPPED_LIMIT_S:g} s (SIGSTOP or a debugger; "
                    f"`kill -CONT {self.process.pid}` continues a stopped process)")
        cpu = times.user + times.system
        if cpu != self.cpu:
            self.cpu, self.active = cpu, now
        elif now - self.active >= STALLED_LIMIT_S and status != psutil.STATUS_STOPPED:
            return f"it used no CPU time for {STALLED_LIMIT_S:g} s (deadlocked)"
        return None


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent ends (Linux); exit if it has ended already."""
    if sys.platform.startswith("linux"):
        from proctor.sandbox._confine import prctl

        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above: nothing would kill this child
        os._exit(0)


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
    _die_with(int(sys.argv[2]))
    try:
        _serve(Connection(int(sys.argv[1])))
    except (BrokenPipeError, ConnectionError, EOFError):  # the parent is gone: nothing to tell, no one to tell
        os._exit(0)
