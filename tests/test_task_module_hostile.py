"""A Python task file that misbehaves cannot make a command report success silently or write elsewhere.

Each attack is a task module that registers a working task and then, at import, ends the
process (`os._exit(0)`, a caught `sys.exit`), leaves an exit hook that calls `os._exit(0)`,
moves the working directory, ignores Ctrl-C or starts a thread that never ends. `proctor
tasks` and `proctor run` (real processes: `python -m proctor`) must fail with exit 2 and one
line naming the file. At run time (the task's own methods) a module may still move the
working directory or start a thread: the run's output stays where it was asked for and the
command ends when the run does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import proctor
from tinylm import build_tiny_model

TASK = '''
from proctor import task
from proctor.tasks.choice import ChoiceTask, Rendered


@task("hostile_{name}:mc")
class Hostile(ChoiceTask):
    def split_rows(self, data_dir, split):
{at_run_time}
        return [{{"q": f"{{i}} + 1?", "c": [str(i + 1), str(i + 2)], "a": 0}} for i in range(4)]

    def fewshot_rows(self, data_dir):
        return []

    def render(self, row):
        return Rendered(text=f"Question: {{row['q']}}\\nAnswer:", options=tuple(row["c"]), gold=row["a"])

{at_import}
'''

#: attack -> (code run when the module is imported, what the one error line says)
AT_IMPORT = {
    "os_exit": ("import os\nos._exit(0)", "called os._exit(0)"),
    "exit_caught": ("import os, sys\ntry:\n    os._exit(0)\nexcept BaseException:\n    pass\nsys.exit(0)",
                    "called os._exit(0)"),
    "sys_exit": ("import sys\nsys.exit(0)", "raised SystemExit(0)"),
    "atexit_hook": ("import atexit, os\natexit.register(os._exit, 0)", "registered an exit hook"),
    # registered where the guard cannot see who asked (exec), then the import fails: the exit
    # hook runs when proctor ends, and must not turn the error's exit 2 into 0
    "atexit_hook_then_raise": ('exec("import atexit, os; atexit.register(os._exit, 0)")\n'
                               'raise RuntimeError("broken on purpose")', "RuntimeError: broken on purpose"),
    "chdir": ("import os, tempfile\nos.chdir(tempfile.gettempdir())", "changed the working directory"),
    "sigint_ignored": ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)", "handler of SIGINT"),
    "thread": ("import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()",
               "started a thread"),
}


def module(directory: Path, name: str, *, at_import: str = "", at_run_time: str = "pass") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / f"{name}.py"
    file.write_text(TASK.format(name=name, at_import=at_import, at_run_time=" " * 8 + at_run_time))
    return file


def proctor_cli(args: list[str], cwd: Path, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PROCTOR_CACHE_DIR": str(cwd / "cache"), "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "proctor", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("attack", list(AT_IMPORT))
def test_tasks_refuses_a_module_that_misbehaves_at_import(attack, tmp_path):
    code, says = AT_IMPORT[attack]
    file = module(tmp_path / "tasks", attack, at_import=code)
    done, _ = proctor_cli(["tasks", "hostile", "--include", "tasks/" + file.name], tmp_path, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"proctor: error: {file}: importing it ") and says in done.stderr


@pytest.mark.parametrize("attack", ["os_exit", "atexit_hook_then_raise", "chdir", "sigint_ignored", "thread"])
def test_run_refuses_a_module_that_misbehaves_at_import_before_any_model_work(attack, tmp_path):
    code, says = AT_IMPORT[attack]
    file = module(tmp_path, attack, at_import=code)
    done, _ = proctor_cli(["run", "--model", "./no-such-model", "--include", file.name, "--tasks", f"hostile_{attack}:mc",
                           "--output", "rel_out", "--no-progress"], tmp_path, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and str(file) in done.stderr and says in done.stderr, done.stderr
    assert not (tmp_path / "rel_out").exists()


def test_a_run_keeps_its_output_where_asked_and_ends_though_the_task_moves_away_and_leaves_a_thread(
        tiny, tmp_path):
    elsewhere, work = tmp_path / "elsewhere", tmp_path / "work"
    elsewhere.mkdir()
    file = module(work / "tasks", "wanders", at_run_time=(
        f"import os, threading, time; os.chdir({str(elsewhere)!r}); "
        "threading.Thread(target=time.sleep, args=(600,)).start()"))
    done, seconds = proctor_cli(["run", "--model", str(tiny), "--include", f"tasks/{file.name}", "--tasks",
                                 "hostile_wanders:mc", "--output", "rel_out", "--no-progress", "--max-length", "256"],
                                work, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("wrote rel_out")
    assert (work / "rel_out" / "metrics.json").is_file() and list(elsewhere.iterdir()) == []
    assert proctor.read_run(work / "rel_out").tasks["hostile_wanders:mc"].records
    assert seconds < 300  # the thread sleeps 600 s: the command did not wait for it


def test_the_library_refuses_the_same_and_puts_the_process_back(tmp_path):
    before = os.getcwd(), signal.getsignal(signal.SIGINT), os._exit
    for attack in ("os_exit", "chdir", "sigint_ignored", "atexit_hook"):
        code, says = AT_IMPORT[attack]
        file = module(tmp_path, f"library_{attack}", at_import=code)
        with pytest.raises(proctor.UserError, match=re.escape(says)):
            proctor.include([file])
        assert (os.getcwd(), signal.getsignal(signal.SIGINT), os._exit) == before


def test_a_well_behaved_module_still_loads(tmp_path):
    file = module(tmp_path / "tasks", "fine", at_import="import json, atexit  # libraries may be imported")
    done, _ = proctor_cli(["tasks", "hostile", "--include", f"tasks/{file.name}"], tmp_path, timeout=60)
    assert done.returncode == 0 and "hostile_fine:mc" in done.stdout, done.stderr
