"""Native code in a child process: a crash there is one NativeCrash here, naming the backend and signal."""

import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest

from proctor.backends import isolated
from proctor.backends.isolated import ChildObject, NativeCrash, exit_description
from proctor.errors import UserError


class StandIn:
    """A stand-in for a native model: squares numbers, and really segfaults on call `crash_on`."""

    def __init__(self, crash_on: int = 0, refuse: bool = False):
        if refuse:
            raise UserError("cannot load the stand-in model")
        self.calls = 0
        self.crash_on = crash_on

    def square(self, x: int) -> int:
        self.calls += 1
        if self.calls == self.crash_on:
            ctypes.string_at(0)  # a read of address 0: SIGSEGV in native code
        return x * x

    def pid(self) -> int:
        return os.getpid()

    def exit(self, code: int) -> None:
        os._exit(code)

    def kill_self(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def refuse(self) -> None:
        raise ValueError("no such row")


def child(**kwargs) -> ChildObject:
    from functools import partial

    return ChildObject(partial(StandIn, **kwargs), backend="stand-in", advice="Rebuild the stand-in.")


def test_calls_run_in_a_child_process_and_return_their_results():
    model = child()
    try:
        assert [model.call("square", x) for x in (2, 3)] == [4, 9]
        assert model.call("pid") != os.getpid()
    finally:
        model.close()


def test_a_segfault_in_the_child_is_one_error_naming_backend_signal_and_fix():
    model = child(crash_on=3)
    assert model.call("square", 2) == 4 and model.call("square", 3) == 9
    with pytest.raises(NativeCrash) as caught:
        model.call("square", 4, doing="scoring")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the stand-in backend's native code died (SIGSEGV) while scoring; ")
    assert "a rerun resumes" in message and message.endswith("Rebuild the stand-in.")
    with pytest.raises(NativeCrash):  # the child stays dead: every later call says so
        model.call("square", 5)
    model.close()


def test_a_child_that_exits_is_named_by_its_exit_code():
    model = child()
    with pytest.raises(NativeCrash, match=r"died \(exit code 3\) while exit;"):
        model.call("exit", 3)


def test_exceptions_from_the_child_are_raised_as_they_were():
    model = child()
    try:
        with pytest.raises(ValueError, match="no such row"):
            model.call("refuse")
        assert model.call("square", 6) == 36  # and the child goes on
    finally:
        model.close()
    with pytest.raises(UserError, match="cannot load the stand-in model"):
        child(refuse=True)


def test_exit_descriptions():
    assert exit_description(-11) == "SIGSEGV" and exit_description(-4) == "SIGILL"
    assert exit_description(-6) == "SIGABRT" and exit_description(2) == "exit code 2"
    assert exit_description(None) == "no exit status"


def test_a_script_without_a_main_guard_can_open_a_child(tmp_path):
    # multiprocessing's spawn would re-run this script in the child (and fail); a fresh interpreter does not
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text("from functools import partial\n"
                      "from proctor.backends.isolated import ChildObject\n"
                      "child = ChildObject(partial(int, '7'), backend='x', advice='')\n"
                      "print('ran', child.call('bit_length'))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "ran 3\n"), done.stderr


def test_a_killed_child_is_not_given_the_rebuild_advice():
    model = child()
    with pytest.raises(NativeCrash) as caught:
        model.call("kill_self", doing="scoring")
    message = str(caught.value)
    assert "died (SIGKILL) while scoring" in message and "out-of-memory" in message
    assert "Rebuild" not in message


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


def test_a_stopped_child_is_ended_with_one_line(monkeypatch):
    monkeypatch.setattr(isolated, "STOPPED_LIMIT_S", 1.0)
    model = child()
    pid = model.call("pid")
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(NativeCrash) as caught:
        model.call("square", 2, doing="scoring")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "\n" not in message and f"child process (pid {pid}) stopped answering while scoring" in message
    assert f"kill -CONT {pid}" in message and "a rerun resumes" in message
    assert gone(pid)
    with pytest.raises(NativeCrash):
        model.call("square", 3)


def test_a_child_that_uses_no_cpu_while_a_call_waits_is_ended(monkeypatch):
    monkeypatch.setattr(isolated, "STALLED_LIMIT_S", 1.5)
    model = child()
    pid = model.call("pid")
    started = time.monotonic()
    with pytest.raises(NativeCrash, match=r"used no CPU time for 1.5 s \(deadlocked\)"):
        model.call("sleep", 60)
    assert time.monotonic() - started < 15
    assert gone(pid)


def test_the_child_dies_with_its_parent_and_says_nothing(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text("import sys, time\n"
                      "from functools import partial\n"
                      "from proctor.backends.isolated import ChildObject\n"
                      "child = ChildObject(partial(int, '7'), backend='x', advice='')\n"
                      "print(child._process.pid, flush=True)\n"
                      "time.sleep(60)\n")
    err = tmp_path / "stderr"
    with open(err, "w") as stderr:
        parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=stderr, text=True)
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 5
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid)
    time.sleep(0.5)
    assert err.read_text() == ""
