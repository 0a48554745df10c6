"""Hostile code against the sandbox, through the real HumanEval scoring path.

Every forging completion below gives a wrong answer (the honest verdict is a failure)
and then tries to turn it into a pass; a pass means the forge worked. They all run in
one pool (`forged` fixture), each test checks one. Then: what a sandboxed program can
reach of the host (files, sockets, processes, disk), and what a killed evaluator leaves.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import proctor
from proctor import sandbox
from proctor.requests import GenerateResult, Generation
from proctor.sandbox import Isolation, Limits, Outcome, cgroups, judge, leftovers
from proctor.tasks.registry import resolve

from test_sandbox import ran, sandbox_processes

INFO = sandbox.detect()
UNSAFE_OK = not INFO.network_isolated
own_root = pytest.mark.skipif(INFO.isolation is not Isolation.NAMESPACES,
                              reason=f"no sandbox root of its own here ({INFO.describe()})")
uid_dropped = pytest.mark.skipif(not INFO.drops_uid, reason=f"no sandbox uid here ({INFO.describe()})")
FAST = Limits(wall_s=2.0, memory_mb=512, max_procs=16, output_bytes=1 << 16)

# ---- shared pieces of hostile completions ------------------------------------------

# Module-level helper (dedented: after the function body): every fake verdict we can
# think of, in the old runner's JSON-line format (with every nonce-like string found) and
# in the wire format (length-prefixed messages), ready to write anywhere.
FAKES = r'''
def _fakes(extra=()):
    import gc, json, os, struct
    nonces = {"0" * 32, *extra}
    for o in gc.get_objects():
        if isinstance(o, dict):
            for key in ("nonce", "token", "secret"):
                if isinstance(o.get(key), str):
                    nonces.add(o[key])
    out = []
    for n in nonces:
        for rec in ({"nonce": n, "pid": os.getpid(), "outcome": "passed", "detail": ""},
                    {"nonce": n, "runner": True, "child_pid": os.getpid(), "timed_out": False,
                     "exit_code": 0, "elapsed_s": 0.1}):
            out.append((json.dumps(rec) + "\n").encode())
    for rec in ({"outcome": "passed", "detail": ""},
                {"mode": "check", "verdict": {"outcome": "passed", "detail": ""}, "timed_out": False,
                 "candidate_exit": None, "tester_exit": 0, "elapsed_s": 0.1}):
        out.append((json.dumps(rec) + "\n").encode())
    for msg in ({"ready": True}, {"return": True}, {"outcome": "passed", "detail": ""}):
        body = json.dumps(msg).encode()
        out.append(struct.pack(">I", len(body)) + body)
    return out


def _spray(fds, extra=()):
    import os
    for fd in fds:
        for line in _fakes(extra):
            try:
                os.write(fd, line)
            except OSError:
                pass
'''

VERDICT = '{"outcome": "passed", "detail": ""}'
PLANTED_MODULE = (f"import os\nfor _fd in range(3, 16):\n    try:\n        os.write(_fd, {VERDICT!r}.encode())\n"
                  "    except OSError:\n        pass\nos._exit(0)\n")


def body(code: str) -> str:
    """A function body: `code` indented one level."""
    return textwrap.indent(textwrap.dedent(code).strip("\n") + "\n", "    ")


def module(code: str) -> str:
    return textwrap.dedent(code).strip("\n") + "\n"


# The problems used, by task id (entry points repeat: HumanEval/53 and /85 are both `add`).
CLOSE, PARENS, TRUNCATE, FLIP, ADD = "HumanEval/0", "HumanEval/1", "HumanEval/2", "HumanEval/27", "HumanEval/53"
WRONG = {   # a wrong answer's return statement for each
    CLOSE: "return True",
    PARENS: "return []",
    TRUNCATE: "return 7.0",
    FLIP: "return 'nope'",
    ADD: "return x - y",
}

EQ_TRUE = """
class _Eq:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return 0
    def __bool__(self): return True
"""

SWAP = """
import ctypes, sys, threading
{eq}
def _swap(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "check":
        frame.f_locals["candidate"] = lambda *a, **k: _Eq()
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    return None
sys.{hook}(_swap)
threading.{hook}(_swap)
"""

MEMORY_SCAN = """
import ctypes
def _in_memory(first, second):
    with open("/proc/self/maps") as f:
        regions = [line.split() for line in f]
    for r in regions:
        if "r" not in r[1] or (len(r) > 5 and r[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        start, end = (int(x, 16) for x in r[0].split("-"))
        try:
            data = ctypes.string_at(start, end - start)
        except Exception:
            continue
        i = data.find(first)
        while i >= 0:
            if data[i + len(first):i + len(first) + len(second)] == second:
                return True
            i = data.find(first, i + 1)
    return False
"""

# name -> (entry point, completion, outcomes allowed). Each completion = function body,
# then optionally module-level code.
FORGES = {
    "frame_walk_to_nonce_and_fd": (CLOSE, body("""
        import os, sys
        ints, strs = set(range(3, 16)), set()
        f = sys._getframe()
        while f is not None:
            for scope in (f.f_locals, f.f_globals):
                for v in list(scope.values()):
                    for x in (list(v.values()) if isinstance(v, dict) else [v]):
                        if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1024:
                            ints.add(x)
                        elif isinstance(x, str) and len(x) == 32:
                            strs.add(x)
            f = f.f_back
        _spray(sorted(ints), strs)
        os._exit(0)
        """) + module(FAKES), {"failed"}),
    "gc_hunt_for_nonce_and_fds": (CLOSE, body("""
        import os
        _spray(range(3, 64))
        os._exit(0)
        """) + module(FAKES), {"failed"}),
    "monkeypatch_json_dumps": (CLOSE, body("return True") + module("""
        import json
        _dumps = json.dumps
        def _forged(obj, *a, **k):
            if isinstance(obj, dict):
                if "outcome" in obj:
                    obj = dict(obj, outcome="passed", detail="")
                if "raise" in obj or "error" in obj:
                    obj = {"return": True}
            return _dumps(obj, *a, **k)
        json.dumps = _forged
        """), {"failed"}),
    "monkeypatch_os_write": (CLOSE, body("return True") + module("""
        import os
        _write = os.write
        def _forged(fd, data):
            data = bytes(data).replace(b'"failed"', b'"passed"').replace(b'"memory"', b'"passed"')
            return _write(fd, data)
        os.write = _forged
        """), {"failed"}),
    "monkeypatch_builtins": (CLOSE, body("return True") + module("""
        import builtins
        class _Swallow(Exception):
            pass
        builtins.AssertionError = _Swallow
        builtins.abs = lambda x: 0
        builtins.bool = lambda x=None: True
        builtins.print = lambda *a, **k: None
        """), {"failed"}),
    "monkeypatch_builtins_wholesale": (CLOSE, body("return True") + module("""
        import builtins
        builtins.isinstance = lambda *a: True
        builtins.issubclass = lambda *a: True
        builtins.len = lambda x: 0
        builtins.type = lambda *a: bool
        """), {"failed"}),
    "eq_always_true_object": (CLOSE, body("return _Eq()") + module(EQ_TRUE), {"failed"}),
    "int_subclass_eq": (CLOSE, body("""
        class B(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = int.__hash__
        return B(0)
        """), {"failed"}),
    "str_subclass_eq": (FLIP, body("""
        class S(str):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = str.__hash__
        return S("nope")
        """), {"failed"}),
    "list_subclass_eq": (PARENS, body("""
        class L(list):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
        return L(["nope"])
        """), {"failed"}),
    "float_subclass_arithmetic": (TRUNCATE, body("""
        class F(float):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __sub__(self, other): return F(0.0)
            def __abs__(self): return 0.0
            def __lt__(self, other): return True
            __hash__ = float.__hash__
        return F(7.0)
        """), {"failed"}),
    "fake_class_attribute": (CLOSE, body("""
        class Liar:
            __class__ = property(lambda self: bool)
            def __eq__(self, other): return True
        return Liar()
        """), {"failed"}),
    "settrace_swaps_candidate": (CLOSE, body("return True")
                                 + module(SWAP.format(eq=EQ_TRUE, hook="settrace")), {"failed"}),
    "setprofile_swaps_candidate": (CLOSE, body("return True")
                                   + module(SWAP.format(eq=EQ_TRUE, hook="setprofile")), {"failed"}),
    "fake_verdicts_on_every_fd": (CLOSE, body("""
        _spray(range(256))
        return True
        """) + module(FAKES), {"failed"}),
    "fake_verdicts_at_import_then_exit": (CLOSE, body("return True") + module(FAKES) + module("""
        import os
        _spray(range(256))
        os._exit(0)
        """), {"failed"}),
    "stuff_channel_with_replies": (CLOSE, body("""
        import json, os, struct
        msg = json.dumps({"return": True}).encode()
        for _ in range(200):
            try:
                os.write(3, struct.pack(">I", len(msg)) + msg)
            except OSError:
                break
        return True
        """), {"failed"}),
    "kill_parent_pid1_and_everyone": (CLOSE, body("""
        import os, signal
        me = os.getpid()
        for pid in [os.getppid(), 1, *range(2, 400)]:
            if pid != me:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        return True
        """), {"failed"}),
    "kill_minus_one": (CLOSE, body("""
        import os, signal
        os.kill(-1, signal.SIGKILL)
        return True
        """), {"failed"}),
    "ptrace_and_proc_of_the_tester": (CLOSE, body(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        me = os.getpid()
        for pid in range(1, 300):
            if pid == me:
                continue
            if libc.ptrace(16, pid, 0, 0) == 0:
                print("ATTACHED", pid)
            for name in ("mem", "environ", "maps", "fd/0", "fd/3", "fd/4", "cwd/."):
                try:
                    with open(f"/proc/{{pid}}/{{name}}", "rb"):
                        print("OPENED", pid, name)
                except OSError:
                    pass
            for n in range(3, 8):
                try:
                    fd = os.open(f"/proc/{{pid}}/fd/{{n}}", os.O_WRONLY)
                    os.write(fd, {VERDICT!r}.encode())
                    print("WROTE", pid, n)
                except OSError:
                    pass
        return True
        """), {"failed"}),
    "exit_0_at_import": (CLOSE, body("return True") + module("import os\nos._exit(0)"),
                         {"failed"}),
    "system_exit_at_import": (CLOSE, body("return True") + module("raise SystemExit(0)"),
                              {"failed"}),
    "sys_exit_0_in_call": (CLOSE, body("import sys\nsys.exit(0)"), {"failed"}),
    "os_exit_0_in_call": (CLOSE, body("import os\nos._exit(0)"), {"failed"}),
    "exit_builtin_in_call": (CLOSE, body("exit(0)"), {"failed"}),
    "sigkill_itself": (CLOSE, body("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"),
                       {"failed"}),
    "forked_child_keeps_running": (CLOSE, body("""
        import os, time
        if os.fork() == 0:
            _spray(range(256))
            time.sleep(60)
            os._exit(0)
        return True
        """) + module(FAKES), {"failed"}),
    "parent_exits_child_serves": (CLOSE, body("""
        import os
        if os.fork():
            os._exit(0)
        return True
        """), {"failed"}),
    "fake_verdict_on_stdout": (CLOSE, body("""
        import sys
        for line in _fakes():
            sys.stdout.buffer.write(line)
            sys.stderr.buffer.write(line)
        print("passed")
        sys.stdout.flush()
        return True
        """) + module(FAKES), {"failed"}),
    "raise_base_exception_subclass": (CLOSE, body("""
        class Escape(BaseException):
            pass
        raise Escape("passed")
        """), {"failed"}),
    "raise_keyboard_interrupt": (CLOSE, body("raise KeyboardInterrupt"), {"failed"}),
    "raise_generator_exit": (CLOSE, body("raise GeneratorExit"), {"failed"}),
    "raise_exception_with_hostile_str": (CLOSE, body("""
        class E(Exception):
            def __str__(self): raise SystemExit(0)
        raise E()
        """), {"failed"}),
    "huge_string": (CLOSE, body("return 'x' * (64 << 20)"), {"failed"}),
    "huge_list": (CLOSE, body("return [True] * (10 ** 7)"), {"failed"}),
    "deeply_nested": (CLOSE, body("""
        x = True
        for _ in range(100000):
            x = [x]
        return x
        """), {"failed"}),
    "cyclic_list": (CLOSE, body("a = []\na.append(a)\nreturn a"), {"failed"}),
    "unsendable_object": (CLOSE, body("return (lambda: True)"), {"failed"}),
    "thread_sprays_garbage": (CLOSE, body("""
        import os, threading
        def spam():
            while True:
                for fd in range(256):
                    try:
                        os.write(fd, b"\\x00\\x00\\x00\\x0b{\\"ready\\":1}passed\\n")
                    except OSError:
                        pass
        threading.Thread(target=spam, daemon=True).start()
        return True
        """), {"failed"}),
    "sigstop_itself": (CLOSE, body("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)"),
                       {"timeout"}),
    # The tests are nowhere the candidate can read them: not in its memory (it was
    # forked before they were read), not on its filesystem.
    "look_for_the_tests_in_memory": (CLOSE, body("""
        if _in_memory(b"def chec", b"k(candidate"):
            print("FOUND TESTS IN MEMORY")
        return True
        """) + module(MEMORY_SCAN), {"failed"}),
    "look_for_the_tests_on_disk": (CLOSE, body("""
        import os
        for top, dirs, files in os.walk("/"):
            if top in ("/proc", "/dev"):
                dirs[:] = []
                continue
            for name in files:
                try:
                    with open(os.path.join(top, name), "rb") as f:
                        data = f.read(1 << 20)
                except OSError:
                    continue
                if (b"def chec" + b"k(candidate") in data:
                    print("FOUND TESTS ON DISK", os.path.join(top, name))
        return True
        """), {"failed", "timeout"}),   # a big host file system takes longer than the wall limit to walk
    # A module planted where the tester might import it would run with the verdict fd.
    "plant_modules_for_the_tester": (ADD, body(f"""
        import os, sys
        places = {{"/tmp", "/dev/shm", os.getcwd(), "/"}}
        for p in sys.path:
            places.update({{p, os.path.dirname(p)}})
        for place in places:
            for name in ("random", "math", "copy", "string", "sitecustomize"):
                try:
                    os.makedirs(place, exist_ok=True)
                    with open(os.path.join(place, name + ".py"), "w") as f:
                        f.write({PLANTED_MODULE!r})
                    print("PLANTED", place, name)
                except OSError:
                    pass
        return x - y
        """), {"failed"}),
    "exhaust_the_memory_cgroup": (CLOSE, body("""
        import os, time
        for _ in range(6):
            if os.fork() == 0:
                try:
                    hog = b"x" * (250 << 20)
                    time.sleep(10)
                finally:
                    os._exit(0)
        hog = b"x" * (250 << 20)
        return True
        """), {"failed", "memory", "timeout"}),
}


@pytest.fixture(scope="module")
def problems(data_dir):
    task = resolve("humaneval::greedy")[0]
    return {inst.native_id: inst for inst in task.instances(data_dir)}


def score(problems, cases: list[tuple[str, str]]) -> list[dict]:
    """Each (entry point, completion) through HumanEvalTask.score_many; their sample records."""
    task = resolve("humaneval::greedy")[0]
    task.allow_unsafe_exec = UNSAFE_OK
    instances = [problems[entry] for entry, _ in cases]
    results = [GenerateResult((Generation(text, 1, "stop"),)) for _, text in cases]
    return [s.model_output[0].to_dict() for s in task.score_many(instances, results)]


@pytest.fixture(scope="module")
def forged(problems):
    names = list(FORGES)
    outputs = score(problems, [(FORGES[n][0], FORGES[n][1]) for n in names])
    return dict(zip(names, outputs))


def test_the_problems_used_pass_when_solved_and_fail_when_wrong(problems):
    entries = sorted(WRONG)
    right = score(problems, [(e, problems[e].target.canonical_solution) for e in entries])
    wrong = score(problems, [(e, body(WRONG[e])) for e in entries])
    assert [o["outcome"] for o in right] == ["passed"] * len(entries), right
    assert [o["outcome"] for o in wrong] == ["failed"] * len(entries), wrong


@pytest.mark.parametrize("name", list(FORGES))
def test_forged_passes_are_failures(forged, name):
    out = forged[name]
    allowed = FORGES[name][2]
    assert out["passed"] is False and out["outcome"] != "passed", (name, out)
    assert out["outcome"] in allowed, (name, out["outcome"], out["detail"])


CONTROL = body("""
    needle = bytearray(b"def chec") + b"k(candidate"
    if _in_memory(b"def chec", b"k(candidate"):
        print("CONTROL FOUND")
    return True
    """) + module(MEMORY_SCAN)
PROBES = ["ptrace_and_proc_of_the_tester", "look_for_the_tests_in_memory", "look_for_the_tests_on_disk",
          "plant_modules_for_the_tester"]


def test_probing_completions_find_nothing(problems):
    """What the probing completions printed (the sandbox call HumanEval scoring makes,
    `judge_many`, keeps the output): no access to the tester, no tests in reach, nowhere
    to plant a module but the candidate's own scratch space."""
    cases = [(FORGES[n][0], FORGES[n][1]) for n in PROBES] + [(CLOSE, CONTROL)]
    candidates = [problems[entry].target.candidate(text) for entry, text in cases]
    results = sandbox.judge_many(candidates, Limits(wall_s=10.0, output_bytes=1 << 16), workers=2,
                                 allow_unsafe_exec=UNSAFE_OK)
    out = dict(zip([*PROBES, "control"], results))
    assert not any(r.passed for r in results), results
    assert "CONTROL FOUND" in out["control"].output, out["control"]   # the memory scan works
    for marker in ("ATTACHED", "OPENED", "WROTE"):
        assert marker not in out["ptrace_and_proc_of_the_tester"].output, out["ptrace_and_proc_of_the_tester"]
    assert "FOUND TESTS" not in out["look_for_the_tests_in_memory"].output, out["look_for_the_tests_in_memory"]
    assert "FOUND TESTS" not in out["look_for_the_tests_on_disk"].output, out["look_for_the_tests_on_disk"]
    if INFO.isolation is Isolation.NAMESPACES:
        planted = {line.split()[1] for line in out["plant_modules_for_the_tester"].output.splitlines()
                   if line.startswith("PLANTED")}
        assert planted <= {"/tmp", "/dev/shm", "/sandbox"}, planted


# ---- what a sandboxed program can reach of the host ---------------------------------

def run(src: str, limits: Limits = FAST):
    """A whole program in the candidate process (`test_sandbox.ran`): it passes when it loads to its end."""
    return judge(ran(textwrap.dedent(src)), limits, allow_unsafe_exec=UNSAFE_OK)


@own_root
@uid_dropped
def test_writes_do_not_outlive_the_run_and_their_total_is_capped():
    name = f"proctor-hostile-{uuid.uuid4().hex[:8]}"
    places = ["/run/lock", "/var/lock", "/dev/shm", "/tmp", "/var/tmp", "/", "/root", "/work"]
    r = run(f"""
        import os
        places = {places!r} + [os.getcwd(), os.environ["HOME"]]
        for d in places:
            try:
                with open(os.path.join(d, {name!r}), "w") as f:
                    f.write("escaped")
                print("WROTE", d)
            except OSError as e:
                print("REFUSED", d, e.strerror)
        total, error = 0, None
        chunk = b"x" * (10 << 20)
        for i in range(40):
            d = ("/tmp", "/dev/shm", os.getcwd())[i % 3]
            try:
                with open(os.path.join(d, f"fill{{i}}"), "wb") as f:
                    f.write(chunk)
                total += len(chunk)
            except OSError as e:
                error = e.strerror
                break
        print("TOTAL", total, error)
        """)
    assert r.outcome is Outcome.PASSED, r
    for place in [*places, "/sandbox"]:
        assert not (Path(place) / name).exists(), f"{place}/{name} outlived the run"
    wrote = {line.split()[1] for line in r.output.splitlines() if line.startswith("WROTE")}
    assert wrote <= {"/dev/shm", "/tmp", "/sandbox"}, r.output
    total_line = next(line for line in r.output.splitlines() if line.startswith("TOTAL"))
    total = int(total_line.split()[1])
    assert "No space left" in total_line and total <= FAST.tmp_mb << 20, total_line
    # A second run starts from empty scratch space: nothing of the first is left.
    again = run("""
        import os
        print(sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")), sorted(os.listdir(".")))
        """)
    assert again.outcome is Outcome.PASSED and again.output.strip() == "[] [] []", again


@pytest.mark.skipif(not INFO.network_isolated, reason="no network isolation here")
def test_planted_unix_sockets_are_unreachable():
    servers, paths = [], []
    # /tmp, not tmp_path: a socket path holds at most 107 bytes, and pytest-xdist's tmp_path is longer
    for parent in ("/run", "/var/tmp", "/tmp"):
        d = tempfile.mkdtemp(prefix="proctor-hostile-", dir=parent)
        os.chmod(d, 0o755)
        path = os.path.join(d, "planted.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        os.chmod(path, 0o777)
        s.listen(4)
        s.settimeout(0.2)
        servers.append((s, d))
        paths.append(path)
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"\0proctor-hostile-{uuid.uuid4().hex[:8]}"
    abstract.bind(abstract_name)
    abstract.listen(4)
    abstract.settimeout(0.2)
    try:
        r = run(f"""
            import socket
            for addr in {[*paths, abstract_name]!r}:
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(addr)
                    s.sendall(b"hello")
                    print("CONNECTED", addr)
                except OSError as e:
                    print("REFUSED", e.strerror)
            """)
        assert r.outcome is Outcome.PASSED, r
        assert "CONNECTED" not in r.output, r.output
        for s in [*(s for s, _ in servers), abstract]:
            with pytest.raises(socket.timeout):
                s.accept()
    finally:
        abstract.close()
        for s, d in servers:
            s.close()
            subprocess.run(["rm", "-rf", d])


@own_root
def test_host_files_are_unreadable(tmp_path):
    secret = f"proctor-secret-{uuid.uuid4().hex}"
    planted = []
    for parent in ("/var/tmp", "/opt", str(tmp_path)):
        d = tempfile.mkdtemp(prefix="proctor-hostile-", dir=parent)
        os.chmod(d, 0o755)
        f = Path(d) / "planted.txt"
        f.write_text(secret)
        f.chmod(0o644)
        planted.append(f)
    project = Path(proctor.__file__).resolve().parents[1]
    targets = [*map(str, planted), str(project / "README.md"), str(Path(proctor.__file__).resolve()),
               str(project / "proctor" / "sandbox" / "_runner.py"), "/etc/passwd", "/etc/hostname",
               "/etc/shadow", "/root/.bashrc", "/proc/1/environ", str(Path(sys.executable).resolve().parents[1])
               + "/lib/python3.11/site-packages/proctor.egg-link"]
    try:
        r = run(f"""
            import os
            for path in {targets!r}:
                try:
                    with open(path, "rb") as f:
                        print("READ", path, f.read(200))
                except OSError as e:
                    print("UNREADABLE", path, e.strerror)
            print("ROOT", sorted(os.listdir("/")))
            """)
        assert r.outcome is Outcome.PASSED, r
        assert "READ " not in r.output and secret not in r.output, r.output
        root_line = next(line for line in r.output.splitlines() if line.startswith("ROOT"))
        for name in ("work", "etc", "run", "var", "opt", "home", "usr", "bin", "mnt"):
            assert f"'{name}'" not in root_line, root_line
    finally:
        for f in planted:
            subprocess.run(["rm", "-rf", str(f.parent)])


@pytest.mark.skipif(not INFO.network_isolated, reason="no PID namespace here")
def test_host_processes_are_invisible():
    r = run("""
        import os
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        for p in pids:
            try:
                print("PROC", p, open(f"/proc/{p}/cmdline", "rb").read()[:80])
            except OSError:
                pass
        print("COUNT", len(pids))
        """)
    assert r.outcome is Outcome.PASSED, r
    count = int(next(line for line in r.output.splitlines() if line.startswith("COUNT")).split()[1])
    # only the namespace's own: the program and its runner (hidden by hidepid under
    # `namespaces`; bwrap adds its init)
    assert count <= 3, r.output
    assert "pytest" not in r.output, r.output


# ---- a killed evaluator ------------------------------------------------------------

KILLED_EVALUATOR = """
import sys
from proctor.sandbox import Candidate, Limits, judge_many
limits = Limits(wall_s=30.0)
slow = "import time\\ntime.sleep(60)\\n"
call = "def check(c):\\n    c()\\n"
if sys.argv[1] == "loading":     # the candidate sleeps while its module loads
    judge_many([Candidate(slow + "def f():\\n    pass\\n", "f", "", call)] * 4, limits, workers=2,
               allow_unsafe_exec=True)
else:                            # the candidate sleeps in a call of the tests
    judge_many([Candidate("def f():\\n    import time\\n    time.sleep(60)\\n", "f", "", call)] * 4, limits,
               workers=2, allow_unsafe_exec=True)
"""


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rpartition(")")[2].split()[1] == str(pid):
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def _run_cgroups(pid: int) -> list[Path]:
    return [p for h in cgroups._hierarchies() for p in h.parent.glob(f"{leftovers.PREFIX}{pid}-*")]


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not INFO.network_isolated, reason="no PID namespace here")
@pytest.mark.parametrize("entry", ["loading", "calling"])
def test_a_killed_evaluator_leaves_no_sandbox_running_and_the_next_run_cleans_up(entry):
    evaluator = subprocess.Popen([sys.executable, "-c", KILLED_EVALUATOR, entry],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # both workers' sandboxes are up and sleeping
            groups = _run_cgroups(evaluator.pid)
            procs = [int(p) for g in groups for p in (g / "cgroup.procs").read_text().split()]
            if INFO.cgroups and len(groups) >= 2 * len(INFO.cgroups) and len(procs) >= 4:
                break
            if not INFO.cgroups and len(sandbox_processes()) >= 2:
                break
            assert evaluator.poll() is None, evaluator.stderr.read().decode()
            time.sleep(0.1)
        else:
            pytest.fail("the sandboxes did not start")
        launchers = _children(evaluator.pid)
        assert launchers, "no launcher processes"
    finally:
        evaluator.send_signal(signal.SIGKILL)
        evaluator.wait()

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        groups = _run_cgroups(evaluator.pid)
        live = [int(p) for g in groups for p in (g / "cgroup.procs").read_text().split()]
        if not live and not any(_alive(p) for p in launchers):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"still running after the evaluator died: {live} / launchers {launchers}")
    # The dead evaluator's cgroups are left over (unless a sandbox run of another process, such
    # as the other pytest-xdist worker's, removed them already); the next run removes them.
    assert run("pass").passed
    assert _run_cgroups(evaluator.pid) == []


def _dead_tag() -> str:
    """pid-starttime of a process that has exited."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        start = (Path("/proc") / str(child.pid) / "stat").read_text().rpartition(")")[2].split()[19]
    finally:
        child.kill()
        child.wait()
    return f"{child.pid}-{start}"


def test_sweep_removes_dead_runs_leftovers_and_keeps_live_ones():
    dead, live = _dead_tag(), leftovers.run_name()[len(leftovers.PREFIX):].rsplit("-", 1)[0]
    made_groups = []
    for h in cgroups._hierarchies():
        for tag in (dead, live):
            path = h.parent / f"{leftovers.PREFIX}{tag}-{uuid.uuid4().hex[:12]}"
            path.mkdir()
            made_groups.append(path)
    dead_dir = Path(tempfile.mkdtemp(prefix=f"{leftovers.PREFIX}{dead}-"))
    (dead_dir / "file").write_text("left over")
    live_dir = Path(tempfile.mkdtemp(prefix=f"{leftovers.PREFIX}{live}-"))
    try:
        leftovers.sweep()
        assert not dead_dir.exists() and live_dir.exists()
        for path in made_groups:
            assert path.exists() == (f"-{live}-" in path.name), path
    finally:
        for path in made_groups:
            if path.exists():
                path.rmdir()
        subprocess.run(["rm", "-rf", str(dead_dir), str(live_dir)])
