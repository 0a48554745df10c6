"""The sandbox against hostile programs: each is contained, the evaluator survives, the
verdict is right. Limits are ~1-2 s so the file stays fast."""

import os
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from proctor.errors import UserError
from proctor.sandbox import Isolation, Limits, Outcome, SandboxInfo, detect, isolation, run_many, run_program
from proctor.sandbox.isolation import SANDBOX_UID_BASE

INFO = detect()
FAST = Limits(wall_s=1.5, memory_mb=256, max_procs=16, output_bytes=4096)
isolated = pytest.mark.skipif(not INFO.network_isolated,
                              reason=f"no network isolation on this machine ({INFO.describe()})")
uid_dropped = pytest.mark.skipif(not INFO.drops_uid, reason=f"no sandbox uid here ({INFO.describe()})")
procs_bounded = pytest.mark.skipif(not (INFO.drops_uid or "pids" in INFO.cgroups),
                                   reason=f"no process limit here ({INFO.describe()})")


def run(src: str, limits: Limits = FAST):
    return run_program(textwrap.dedent(src), limits, allow_unsafe_exec=not INFO.network_isolated)


def sandbox_processes() -> list[int]:
    """Host pids running under any sandbox uid (there must be none after a run)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue
            if SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + 256:
                pids.append(int(entry.name))
    return pids


def evaluator_is_fine() -> None:
    assert subprocess.run(["true"]).returncode == 0       # can still fork and exec
    assert run("assert 1 + 1 == 2").outcome is Outcome.PASSED
    if INFO.drops_uid:
        assert sandbox_processes() == []


def test_isolation_is_recorded():
    print(INFO.describe())
    assert INFO.describe().startswith(INFO.isolation.value)
    assert INFO.describe().split("+")[0] in {i.value for i in Isolation}


def test_correct_and_incorrect_solutions_are_judged():
    good = "def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n"
    bad = "def add(a, b):\n    return a * b\nassert add(2, 3) == 5\n"
    assert run(good).outcome is Outcome.PASSED
    r = run(bad)
    assert r.outcome is Outcome.FAILED and r.detail.startswith("AssertionError")
    r = run("def f(:\n    pass\n")
    assert r.outcome is Outcome.FAILED and "SyntaxError" in r.detail


def test_the_standard_library_imports_under_the_sandbox_uid():
    r = run("import math, hashlib, collections, socket\nassert math.gcd(12, 18) == 6\n")
    assert r.outcome is Outcome.PASSED, r


def test_exiting_before_the_tests_run_is_not_a_pass():
    for early in ("import sys; sys.exit(0)", "raise SystemExit", "import os; os._exit(0)"):
        r = run(f"{early}\nassert False\n")
        assert r.outcome is Outcome.FAILED, (early, r)


def test_a_forked_copy_finishing_the_program_does_not_count():
    r = run("""
        import os
        pid = os.fork()
        if pid:
            os.waitpid(pid, 0)
            assert False, "the parent fails"
        """)
    assert r.outcome is Outcome.FAILED and "the parent fails" in r.detail


def test_infinite_loops_time_out():
    start = time.monotonic()
    busy = run("while True:\n    pass\n", Limits(wall_s=1.0))
    sleepy = run("import time\ntime.sleep(60)\n", Limits(wall_s=1.0))
    assert busy.outcome is Outcome.TIMEOUT and sleepy.outcome is Outcome.TIMEOUT
    assert "wall-clock" in sleepy.detail
    assert time.monotonic() - start < 8


@procs_bounded
def test_fork_bomb_is_contained():
    start = time.monotonic()
    r = run("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """, Limits(wall_s=1.5, max_procs=16))
    assert r.outcome in (Outcome.TIMEOUT, Outcome.FAILED)
    assert time.monotonic() - start < 10
    evaluator_is_fine()


def test_memory_bomb_is_stopped():
    at_once = run("x = bytearray(8 << 30)\n")
    gradual = run("chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n")
    assert at_once.outcome is Outcome.MEMORY and gradual.outcome is Outcome.MEMORY, (at_once, gradual)
    evaluator_is_fine()


@isolated
@uid_dropped
def test_writes_outside_its_directory_do_not_land(tmp_path):
    os.chmod(tmp_path, 0o777)
    targets = ["/tmp/proctor-escape", str(tmp_path / "escape"), str(Path.cwd() / "escape"),
               "/root/escape", "/dev/shm/proctor-escape", "/var/tmp/proctor-escape"]
    r = run(f"""
        import os
        with open("inside.txt", "w") as f:      # its own directory works
            f.write("ok")
        wrote = []
        for path in {targets!r}:
            try:
                with open(path, "w") as f:
                    f.write("escaped")
                wrote.append(path)
            except OSError:
                pass
        print("wrote", wrote)
        """)
    assert r.outcome is Outcome.PASSED, r
    for path in targets:
        assert not Path(path).exists(), f"{path} written from the sandbox ({r.output})"


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("PROCTOR_TEST_SECRET", "hunter2-swordfish")
    r = run("""
        import os
        print(dict(os.environ))
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    print(open(f"/proc/{pid}/environ", "rb").read())
                except OSError:
                    pass
        assert "PROCTOR_TEST_SECRET" not in os.environ
        """, Limits(wall_s=2.0, output_bytes=1 << 20))
    assert r.outcome is Outcome.PASSED, r
    assert "hunter2" not in r.output and not r.output_truncated


@isolated
def test_network_is_unreachable():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    r = run(f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"hello")
        """)
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()
    # unshare leaves the new loopback down (unreachable); bwrap brings it up (refused)
    assert r.outcome is Outcome.FAILED and ("unreachable" in r.detail or "refused" in r.detail), r
    assert run("import socket\nassert [n for _, n in socket.if_nameindex()] == ['lo']").passed
    assert not run("import urllib.request\nurllib.request.urlopen('http://1.1.1.1', timeout=1)").passed


@isolated
def test_the_evaluator_cannot_be_killed():
    me = os.getpid()
    r = run(f"""
        import os, signal
        for target in (os.getppid(), {me}, -1):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        """)
    assert r.outcome is Outcome.PASSED, r      # it ran to the end and killed nothing of ours
    evaluator_is_fine()


def test_huge_output_is_bounded():
    chatty = run("import sys\nsys.stdout.write('x' * (50 << 20))\n", Limits(wall_s=3.0, output_bytes=1000))
    assert chatty.outcome is Outcome.PASSED and chatty.output_truncated
    assert chatty.output == "x" * 1000
    endless = run("while True:\n    print('y' * 10000)\n", Limits(wall_s=1.0, output_bytes=1000))
    assert endless.outcome is Outcome.TIMEOUT and len(endless.output) == 1000


def test_many_programs_in_parallel_keep_their_order():
    sources = [f"assert {i} % 3 != 0" for i in range(12)]
    results = run_many(sources, FAST, workers=4, allow_unsafe_exec=not INFO.network_isolated)
    assert [r.outcome is Outcome.PASSED for r in results] == [i % 3 != 0 for i in range(12)]


def test_no_network_isolation_is_refused_unless_allowed(monkeypatch):
    weak = SandboxInfo(Isolation.NONE, drops_uid=INFO.drops_uid)
    monkeypatch.setattr(isolation, "detect", lambda: weak)
    with pytest.raises(UserError, match="--allow-unsafe-exec"):
        run_program("pass")
    with pytest.raises(UserError, match="--allow-unsafe-exec"):
        run_many(["pass"])
    r = run_program("import os\nprint(os.getcwd())\nopen('f', 'w').write('x')\n", FAST,
                    allow_unsafe_exec=True)
    assert r.outcome is Outcome.PASSED, r
    workdir = r.output.strip()
    assert workdir.startswith("/tmp/proctor-sandbox-") and not Path(workdir).exists()
    assert run_program("while True: pass", Limits(wall_s=1.0), allow_unsafe_exec=True).outcome is Outcome.TIMEOUT
