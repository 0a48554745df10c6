"""Native code in a child process: a crash there is one NativeCrash here, naming the backend and signal."""

import ctypes
import os

import pytest

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
