"""What a task module may not do while it is imported: end the process, or change it for the run.

A Python task file is code that runs with the user's rights; proctor cannot sandbox it. What
it does guard is the import itself (`guarded_import`), so that a task module cannot make a
command report success silently or send its outputs elsewhere:

- an exit from inside the import (`os._exit`, or an `os.exec*` that would replace the
  process) is refused, even when the module catches what the call raises (`sys.exit` and
  `exit()` raise SystemExit, which `include` refuses as any other error of the import);
- an exit hook the module's own code registers (`atexit.register`) is not registered;
- a changed working directory or signal handler (SIGINT ignored: Ctrl-C would not stop the
  run) is put back;
- a thread it starts must not outlive the import.

Each is one `UserError` naming the file. The `proctor` command resolves its paths before any
task module is imported and leaves through `proctor.cli.run`, whose exit code no exit hook
can change and which no thread left running keeps alive.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from proctor.errors import UserError

#: the calls that end or replace the process, patched while a task module is imported
_EXITS = ("_exit", "abort", "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe")
_RULE = "a task module must only define and register tasks"


class _Refused(BaseException):
    """Raised in place of a call that would end the process during a task module's import."""


def _signal_handlers() -> dict[int, Any]:
    handlers: dict[int, Any] = {}
    for number in signal.valid_signals():
        try:
            handlers[number] = signal.getsignal(number)
        except (OSError, ValueError):  # not a signal this platform lets Python see
            continue
    return handlers


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@contextmanager
def guarded_import(file: Path) -> Iterator[None]:
    """Run a task module's import (the `with` body) under the guard; UserError naming `file` on a breach."""
    origin = str(file.resolve())
    refused: list[str] = []
    hooks: list[str] = []
    modules = [os, *(m for m in (sys.modules.get("posix"), sys.modules.get("nt")) if m is not None)]
    saved = {(m, name): getattr(m, name) for m in modules for name in _EXITS if hasattr(m, name)}
    real_register = atexit.register

    active = [True]

    def refuse(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not active[0]:  # kept by the module (`atexit.register(os._exit, 0)`): what os's is now
                return getattr(os, name)(*args, **kwargs)
            refused.append(f"os.{name}({', '.join(repr(a) for a in args)[:60]})")
            raise _Refused(refused[-1])
        call.__name__ = call.__qualname__ = f"os.{name}"
        return call

    def register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        caller = sys._getframe(1).f_code.co_filename
        if os.path.abspath(caller) == origin:  # the module's own hook, not one of a library it imports
            hooks.append(getattr(func, "__qualname__", None) or repr(func)[:60])
            return func
        return real_register(func, *args, **kwargs)

    cwd = os.getcwd()
    handlers = _signal_handlers()
    threads = set(threading.enumerate())
    for (module, name) in saved:
        setattr(module, name, refuse(name))
    atexit.register = register  # type: ignore[assignment]
    try:
        try:
            yield
        except BaseException:
            if not refused:  # the import's own error (SystemExit included): the caller names it
                raise
            # else: a refused exit, named below (also when the module caught it and raised another)
    finally:
        active[0] = False
        for (module, name), value in saved.items():
            setattr(module, name, value)
        atexit.register = real_register
        try:
            moved = os.getcwd()
        except OSError:  # it moved into a directory and removed it
            moved = "a directory it removed"
        if moved != cwd:
            os.chdir(cwd)
        changed = _restore_signals(handlers)
    started = [t.name for t in threading.enumerate() if t not in threads and t.is_alive()]
    if refused:
        raise UserError(f"{file}: importing it called {refused[0]}; {_RULE} (it must not end the process)")
    if hooks:
        raise UserError(f"{file}: importing it registered an exit hook (atexit.register({hooks[0]})); {_RULE}")
    if moved != cwd:
        raise UserError(f"{file}: importing it changed the working directory (os.chdir to {moved}); {_RULE} "
                        "(the directory is put back)")
    if started:
        raise UserError(f"{file}: importing it started a thread that is still running ({started[0]}); {_RULE} "
                        "(start threads in the task's methods, if at all)")
    if changed:
        raise UserError(f"{file}: importing it changed the handler of {', '.join(changed)}; {_RULE} "
                        "(the handlers are put back)")


def _restore_signals(before: dict[int, Any]) -> list[str]:
    """Put back every signal handler that differs from `before`; return the names of those signals."""
    changed = []
    for number, handler in _signal_handlers().items():
        old = before.get(number)
        if handler is old or handler == old:
            continue
        changed.append(_signal_name(number))
        if old is not None:  # None: a handler set outside Python, which Python cannot put back
            try:
                signal.signal(number, old)
            except (OSError, ValueError):  # not the main thread: the module could not have set it either
                pass
    return changed
