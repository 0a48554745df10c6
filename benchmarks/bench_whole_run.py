"""Whole runs, start to exit: `proctor run` vs lm-evaluation-harness 0.4.13's HF backend, same model, same machine.

    python benchmarks/bench_whole_run.py                               # every workload, both tools, once
    python benchmarks/bench_whole_run.py --workloads mmlu greedy4 --repeat 3 --json whole.json
    python benchmarks/bench_whole_run.py --workloads startup --tools proctor

Every run is a fresh child process, timed from its start to its exit (`time.perf_counter`
around it) with its peak RSS (`os.wait4`'s `ru_maxrss`: the child and any process it waited
for). The model is SmolLM2-135M-Instruct, float32, on the CPU, 2 threads (OMP/MKL_NUM_THREADS;
`proctor run --threads` applies to llama.cpp only), already converted on disk for both tools
(proctor loads `smollm2-135m`, lm-eval's HFLM the same transformers directory,
`bench_harness_run.model_dir()`). Each child gets an empty PROCTOR_CACHE_DIR (its `models`
linked to the real one) and HF datasets cache, HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1;
proctor runs with `--no-cache`. Workloads:

- `mmlu`: `proctor run --model smollm2-135m --tasks mmlu_computer_security:mc::olmes --limit 100
  --data-dir DATA --no-cache --output OUT --no-progress` vs `proctor lm-eval --data-dir DATA run
  --model hf --model_args pretrained=DIR,dtype=float32 --device cpu --tasks mmlu_computer_security
  --limit 100 --batch_size 8 --num_fewshot 5 --output_path OUT`: lm-eval's own command line, in
  which proctor only serves the local data (as `bench_harness_run.py` runs it). The same 100 test
  documents; the accuracies differ because the prompts do (OLMES's vs lm-eval's MMLU format).
- `hellaswag`: `proctor run --tasks hellaswag:rc::olmes --limit 40` (5-shot RC) vs lm-eval's HFLM on
  proctor's identical requests. lm-eval's `hellaswag` draws its shots from the train split,
  which the local data lacks, so its command line cannot run it 5-shot offline; instead a
  fresh `python` child imports lm_eval, builds `HFLM(pretrained=DIR, dtype="float32",
  batch_size=8, device="cpu", max_length=2048)` and runs `loglikelihood` on the requests
  (conditional and unconditional, as `proctor run` scores them) rendered here beforehand
  (`bench_vs_lm_eval.task_instances`) and handed over as JSON; it pays its own imports and
  model load. Agreement: items whose acc_per_char prediction is the same.
- `greedy4`: `proctor run --tasks gsm8k::olmes --limit 4` vs HFLM `generate_until` on the identical
  requests (`bench_generate.py`'s settings: until, max_gen_toks, greedy) in a fresh child.
  New tokens/s over the whole process: both tools' texts re-tokenized with the model's
  tokenizer (proctor's own id count, stop token included, is in the JSON); agreement:
  identical texts.
- `startup` (proctor only): `proctor run --tasks mmlu_computer_security:mc::olmes --limit 20
  --no-cache`, and metrics.json's `timing.first_batch_since_process_start_seconds` (process
  start to the first batch on the model; also read as `start_to_first_model_call_seconds`) or,
  on a proctor without it, `timing.time_to_first_batch_seconds` (from inside `proctor.evaluate`:
  imports not counted), labelled; then `python -X importtime -m proctor run ...` (same, `--limit 2`): total import
  seconds and the 12 largest packages.

`--repeat N` runs every (workload, tool) N times: the table shows the fastest, the JSON all.
The issue asks for a quiet machine: the script prints `uptime` first and warns at a
1-minute load of 0.5 or more.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the other benchmark scripts, imported where used

import bench_harness_run as harness  # noqa: E402  (stdlib-only at import; proctor is imported in its functions)

ROOT = HERE.parent
DATA_DIR = harness.DATA_DIR
MODEL = "smollm2-135m"
SEED = 1234  # proctor's default seed (greedy decoding does not use it)
WORKLOADS = ("mmlu", "hellaswag", "greedy4", "startup")
TOOLS = ("proctor", "lm_eval")
#: workload -> (proctor spec, documents)
SPECS = {"mmlu": ("mmlu_computer_security:mc::olmes", 100), "hellaswag": ("hellaswag:rc::olmes", 40),
         "greedy4": ("gsm8k::olmes", 4), "startup": ("mmlu_computer_security:mc::olmes", 20)}
LM_EVAL_BATCH = 8
MAX_LENGTH = 2048
IMPORTTIME_LIMIT = 2
#: metrics.json `timing` keys for the first batch, preferred first: since the process started (the
#: name asked for, and the one proctor's working tree has now), else since `evaluate` began
FIRST_BATCH = ("first_batch_since_process_start_seconds", "start_to_first_model_call_seconds",
               "time_to_first_batch_seconds")


@dataclass
class Proc:
    """One child process: how long it ran, its peak memory, how it ended."""

    seconds: float
    peak_rss_mib: float
    returncode: int
    stderr: str


@dataclass
class Measured:
    """One tool on one workload, over its repeats."""

    workload: str
    tool: str
    command: list[str]
    seconds: list[float] = field(default_factory=list)
    peak_rss_mib: list[float] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)  # what the last run reported (scores, texts, ...)
    error: Optional[str] = None

    @property
    def best(self) -> float:
        return min(self.seconds)


# ---------------------------------------------------------------- running a child

def script(name: str) -> str:
    """The console script beside this Python (not a pyenv shim, whose own start would be timed)."""
    found = Path(sys.executable).parent / name
    return str(found) if found.exists() else name


def child_env(scratch: Path, threads: int) -> dict[str, str]:
    """An empty proctor cache (the converted models linked in) and HF datasets cache, offline, `threads` threads."""
    from proctor.cache_dir import cache_root

    cache = scratch / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    return {**os.environ, "PROCTOR_CACHE_DIR": str(cache), "PROCTOR_DATA_DIR": str(DATA_DIR),
            "HF_DATASETS_CACHE": str(scratch / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def timed(cmd: list[str], env: dict[str, str], logs: Path) -> Proc:
    """Run `cmd` to its exit; return its wall time (start to reaped) and peak RSS (its own rusage, via wait4)."""
    with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return Proc(seconds, usage.ru_maxrss / 1024, proc.returncode, (logs / "stderr").read_text(errors="replace"))


def proctor_command(workload: str, out: Path, limit: Optional[int] = None) -> list[str]:
    spec, docs = SPECS[workload]
    return [script("proctor"), "run", "--model", MODEL, "--tasks", spec, "--limit", str(limit or docs),
            "--data-dir", str(DATA_DIR), "--no-cache", "--output", str(out), "--no-progress"]


def child_command(kind: str, work: Path, out: Path) -> list[str]:
    """This script as lm-eval's child: `kind` is loglikelihood or generate_until."""
    return [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(work), str(out)]


# ---------------------------------------------------------------- lm-eval's child (imports lm_eval, not proctor)

def run_child(kind: str, work: Path, out: Path) -> None:
    """Load HFLM from the converted directory and run `kind` on the requests in `work`; write the results to `out`."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    given = json.loads(work.read_text())
    lm = HFLM(pretrained=given["model_dir"], dtype="float32", batch_size=LM_EVAL_BATCH, device="cpu",
              max_length=MAX_LENGTH)
    if kind == "loglikelihood":
        instances = [Instance(request_type="loglikelihood", doc={}, arguments=(c, x), idx=i)
                     for i, (c, x) in enumerate(given["requests"])]
        found: list[Any] = [float(ll) for ll, _ in lm.loglikelihood(instances, disable_tqdm=True)]
    else:
        import torch

        instances = [Instance(request_type="generate_until", doc={}, arguments=(c, kwargs), idx=i)
                     for i, (c, kwargs) in enumerate(given["requests"])]
        torch.manual_seed(SEED)
        found = lm.generate_until(instances, disable_tqdm=True)
    out.write_text(json.dumps(found))


# ---------------------------------------------------------------- the workloads

def predictions_file(out: Path) -> list[dict[str, Any]]:
    (path,) = out.glob("*/predictions.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def proctor_result(workload: str, out: Path) -> dict[str, Any]:
    """What a proctor run wrote that the report needs: its primary score, and per document predictions or texts."""
    metrics = json.loads((out / "metrics.json").read_text())
    spec = SPECS[workload][0]
    result: dict[str, Any] = {"metric": metrics["primary_scores"][spec]["metric"],
                              "score": metrics["primary_scores"][spec]["score"], "timing": metrics["timing"]}
    rows = predictions_file(out)
    if workload == "hellaswag":
        suffix = result["metric"].removeprefix("acc_")
        result["predictions"] = {r["query_id"]: r["metrics"][f"predicted_index_{suffix}"] for r in rows}
    elif workload == "greedy4":
        result["texts"] = {r["query_id"]: r["model_output"][0]["text"] for r in rows}
        result["id_tokens"] = sum(r["model_output"][0]["num_tokens"] for r in rows)
    return result


@dataclass
class Prepared:
    """One workload's lm-eval side: its command, and how to read what it wrote."""

    command: list[str]
    read: Callable[[Path], dict[str, Any]]  # what it wrote under OUT -> its result


def prepare_lm_eval(workload: str, limit: Optional[int], model: Path, scratch: Path) -> Prepared:
    """Build lm-eval's command for a workload (rendering the identical requests for the child workloads)."""
    spec, docs = SPECS[workload]
    docs = limit or docs
    if workload == "mmlu":
        def read_cli(out: Path) -> dict[str, Any]:
            scores = harness.scores("lm_eval_hf", out)
            return {"metric": "acc,none", "score": scores["mmlu_computer_security/acc,none"]}

        cmd = harness.command("lm_eval_hf", model, ("mmlu_computer_security",), docs, 5, scratch / "OUT")
        return Prepared([script("proctor"), *cmd[1:]], read_cli)
    if workload == "hellaswag":
        import bench_vs_lm_eval as vs

        instances = vs.task_instances("hellaswag", docs)
        requests = [(r.context, r.continuation) for r in vs.flat_requests(instances)]
        work = scratch / "hellaswag-requests.json"
        work.write_text(json.dumps({"model_dir": str(model), "requests": requests}))

        def read_ll(out: Path) -> dict[str, Any]:
            sums = json.loads(out.read_text())
            picked = vs.predictions(instances, sums, per_char=True)
            right = sum(p == inst.label for p, inst in zip(picked, instances))
            return {"metric": "acc_per_char", "score": right / len(picked),
                    "predictions": {i.query_id: p for i, p in zip(instances, picked)}}

        return Prepared(child_command("loglikelihood", work, scratch / "OUT"), read_ll)
    if workload == "greedy4":
        import bench_generate as gen

        run = gen.task_run(spec, docs)
        requests = [(inst.request.context, gen.lm_eval_kwargs(inst.request)) for inst in run.instances]
        work = scratch / "greedy-requests.json"
        work.write_text(json.dumps({"model_dir": str(model), "requests": requests}))

        def read_gen(out: Path) -> dict[str, Any]:
            texts = json.loads(out.read_text())
            return {"texts": {inst.query_id: t for inst, t in zip(run.instances, texts)}}

        return Prepared(child_command("generate_until", work, scratch / "OUT"), read_gen)
    raise ValueError(f"lm-eval has no {workload} workload")


def measure(workload: str, tool: str, repeat: int, threads: int, limit: Optional[int], model: Path,
            scratch: Path) -> Measured:
    """Run one tool on one workload `repeat` times, each in a fresh process with fresh caches."""
    prepared = None if tool == "proctor" else prepare_lm_eval(workload, limit, model, scratch)
    measured = Measured(workload, tool, [])
    for i in range(repeat):
        where = scratch / f"{workload}-{tool}-{i}"
        where.mkdir()
        out = where / "out"
        if prepared is None:
            cmd = proctor_command(workload, out, limit)
        else:  # the command names OUT under scratch; each repeat writes its own
            cmd = [str(out) if c == str(scratch / "OUT") else c for c in prepared.command]
        measured.command = cmd
        proc = timed(cmd, child_env(where, threads), where)
        print(f"{workload:9} {tool:7} run {i + 1}/{repeat}: {proc.seconds:7.1f} s, "
              f"peak RSS {proc.peak_rss_mib:6.0f} MiB"
              + ("" if proc.returncode == 0 else f", exit {proc.returncode}"), file=sys.stderr, flush=True)
        if proc.returncode != 0:
            measured.error = f"exit {proc.returncode}: " + " / ".join(proc.stderr.strip().splitlines()[-4:])
            break
        measured.seconds.append(proc.seconds)
        measured.peak_rss_mib.append(proc.peak_rss_mib)
        try:
            measured.result = proctor_result(workload, out) if prepared is None else prepared.read(out)
        except (KeyError, ValueError, OSError) as e:  # ran, but did not report what it should
            measured.error = f"its results lack {e!r}"
            break
    return measured


# ---------------------------------------------------------------- startup: first batch and imports

def importtime(threads: int, scratch: Path, limit: Optional[int]) -> dict[str, Any]:
    """`python -X importtime -m proctor run ...`: total import seconds and the largest packages."""
    where = scratch / "importtime"
    where.mkdir()
    cmd = [sys.executable, "-X", "importtime", "-m", "proctor", *proctor_command("startup", where / "out",
                                                                                  limit or IMPORTTIME_LIMIT)[1:]]
    proc = timed(cmd, child_env(where, threads), where)
    if proc.returncode != 0:
        return {"command": cmd, "error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    return {"command": cmd, "seconds": proc.seconds, **parse_importtime(proc.stderr)}


FLOOR = """
import sys, time, psutil
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = torch.tensor([tokenizer("The").input_ids])
print(time.time() - psutil.Process().create_time())  # at the first forward
with torch.inference_mode():
    model(input_ids=ids)
"""


def floor(threads: int, scratch: Path, model: Path) -> dict[str, Any]:
    """A bare script's start-up: import torch and transformers, load the tokenizer and weights, to the first forward."""
    where = scratch / "floor"
    where.mkdir()
    proc = timed([sys.executable, "-c", FLOOR, str(model)], child_env(where, threads), where)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    said = (where / "stdout").read_text().split()
    return {"seconds_to_first_forward": float(said[-1]), "wall_s": proc.seconds}


LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)$")


def parse_importtime(stderr: str, top: int = 12) -> dict[str, Any]:
    """Total import seconds (top-level imports' cumulative) and the `top` packages by cumulative seconds.

    A package's cumulative time is that of its outermost imports (those not inside another import
    of the same package), so it includes what the package imports (torch inside transformers);
    `self` is the time of its own modules alone.
    """
    entries = [(len(m[3]) // 2, m[4], int(m[1]) / 1e6, int(m[2]) / 1e6)
               for m in (LINE.match(line) for line in stderr.splitlines()) if m]
    total = sum(cum for level, _, _, cum in entries if level == 0)
    cumulative: dict[str, float] = {}
    own: dict[str, float] = {}
    stack: list[tuple[int, str]] = []  # (level, package) of the enclosing imports
    for level, name, self_s, cum in reversed(entries):  # importtime prints children first: reversed, parents first
        package = name.split(".")[0]
        while stack and stack[-1][0] >= level:
            stack.pop()
        if not any(p == package for _, p in stack):
            cumulative[package] = cumulative.get(package, 0.0) + cum
        own[package] = own.get(package, 0.0) + self_s
        stack.append((level, package))
    largest = sorted(cumulative, key=cumulative.__getitem__, reverse=True)[:top]
    return {"total_import_seconds": total, "modules": len(entries),
            "largest": [{"package": p, "cumulative_s": cumulative[p], "self_s": own[p]} for p in largest]}


def first_batch(timing: dict[str, Any]) -> tuple[str, Optional[float]]:
    """The first-batch time metrics.json has: since process start where proctor records it, else since evaluate."""
    for key in FIRST_BATCH:
        if timing.get(key) is not None:
            return key, timing[key]
    return FIRST_BATCH[-1], None


# ---------------------------------------------------------------- report

def texts_tokens(model: Path, texts: list[str]) -> int:
    import bench_generate as gen
    from transformers import AutoTokenizer

    return gen.text_tokens(AutoTokenizer.from_pretrained(str(model)), [[t] for t in texts])


def agreement(workload: str, ours: Measured, theirs: Optional[Measured], model: Path) -> str:
    """The agreement cell; also stores what it compared in the two results."""
    if ours.error:
        return ""
    if workload == "startup":
        key, value = first_batch(ours.result["timing"])
        return f"first batch at {value:.1f} s ({key})" if value is not None else "no first batch (cached?)"
    if theirs is None or theirs.error:  # proctor's own score alone
        return f"proctor {ours.result['metric']} {ours.result['score']:.3f}" if "score" in ours.result else ""
    a, b = ours.result, theirs.result
    if workload == "mmlu":
        return f"acc {a['score']:.3f} vs {b['score']:.3f} (prompts differ: OLMES vs lm-eval format)"
    if workload == "hellaswag":
        same = sum(a["predictions"][q] == b["predictions"].get(q) for q in a["predictions"])
        return f"{same}/{len(a['predictions'])} same predictions; {a['metric']} {a['score']:.3f} vs {b['score']:.3f}"
    if workload == "greedy4":
        same = sum(a["texts"][q] == b["texts"].get(q) for q in a["texts"])
        for r, m in ((a, ours), (b, theirs)):
            r["text_tokens"] = texts_tokens(model, list(r["texts"].values()))
            r["new_tokens_per_s"] = r["text_tokens"] / m.best
        return (f"{same}/{len(a['texts'])} identical texts; new tok/s {a['new_tokens_per_s']:.1f} vs "
                f"{b['new_tokens_per_s']:.1f} ({a['text_tokens']} vs {b['text_tokens']} tokens)")
    return ""


def cell(m: Optional[Measured], what: str) -> str:
    if m is None:
        return "-"
    if m.error:
        return "FAILED"
    if what == "seconds":
        return f"{m.best:.1f}" + (f" ({', '.join(f'{s:.1f}' for s in m.seconds)})" if len(m.seconds) > 1 else "")
    return f"{max(m.peak_rss_mib):.0f} MiB"


def report(rows: list[Measured], model: Path) -> list[str]:
    lines = ["| workload | proctor wall s | lm-eval wall s | speed-up | proctor peak RSS | lm-eval peak RSS "
             "| agreement |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for workload in dict.fromkeys(r.workload for r in rows):
        mine = {r.tool: r for r in rows if r.workload == workload}
        ours, theirs = mine.get("proctor"), mine.get("lm_eval")
        speedup = (f"{theirs.best / ours.best:.2f}x" if ours and theirs and not ours.error and not theirs.error
                   else "-")
        agree = agreement(workload, ours, theirs, model) if ours else ""
        lines.append(f"| {workload} | {cell(ours, 'seconds')} | {cell(theirs, 'seconds')} | {speedup} | "
                     f"{cell(ours, 'rss')} | {cell(theirs, 'rss')} | {agree} |")
    return lines


def load_average() -> float:
    shown = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime: {shown}")
    one = os.getloadavg()[0]
    if one >= 0.5:
        print(f"WARNING: 1-minute load {one:.2f} >= 0.5: the machine is not quiet; times will be inflated",
              file=sys.stderr)
    return one


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    p.add_argument("--repeat", type=int, default=1, help="runs of each (workload, tool); the table shows the fastest")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="also write every run here")
    p.add_argument("--limit", type=int, help=argparse.SUPPRESS)  # smoke tests: every workload on N documents
    p.add_argument("--child", nargs=3, metavar=("KIND", "WORK", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kind, work, out = args.child
        run_child(kind, Path(work), Path(out))
        return 0

    load = load_average()
    model = harness.model_dir()
    print(f"SmolLM2-135M-Instruct float32, CPU, {args.threads} threads ({os.cpu_count()} CPUs); model {model}; "
          f"data {DATA_DIR}" + (f"; --limit {args.limit} (smoke test)" if args.limit else ""), flush=True)
    rows: list[Measured] = []
    imports: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-whole-") as tmp:
        for workload in args.workloads:
            for tool in args.tools:
                if workload == "startup" and tool != "proctor":
                    continue
                rows.append(measure(workload, tool, args.repeat, args.threads, args.limit, model, Path(tmp)))
        if "startup" in args.workloads and "proctor" in args.tools:
            imports = importtime(args.threads, Path(tmp), args.limit)
            imports["floor"] = floor(args.threads, Path(tmp), model)
        print()
        print("\n".join(report(rows, model)))
    print("\nwall s: each whole process, start to exit (the fastest of --repeat; all in parentheses); speed-up: "
          "lm-eval's wall s / proctor's; peak RSS: the child's ru_maxrss (the largest of --repeat).\n"
          "hellaswag and greedy4: lm-eval is a python child running HFLM on proctor's requests (its CLI cannot "
          "run HellaSwag 5-shot offline).")
    if imports:
        print(f"\n`{' '.join(imports['command'][:5])} ...`:")
        if "error" in imports:
            print(f"  FAILED {imports['error']}")
        else:
            print(f"  {imports['total_import_seconds']:.2f} s importing ({imports['modules']} modules; "
                  "importtime's own overhead included); largest packages (cumulative s, self s):")
            for entry in imports["largest"]:
                print(f"  {entry['package']:24} {entry['cumulative_s']:7.2f} {entry['self_s']:7.2f}")
    if imports.get("floor"):
        bare = imports["floor"]
        print("\nthe floor, a bare script (import torch and transformers, load the tokenizer and weights, "
              "one forward): " + (f"FAILED {bare['error']}" if "error" in bare else
                                  f"{bare['seconds_to_first_forward']:.2f} s from its start to the forward"))
    failed = [r for r in rows if r.error]
    for r in failed:
        print(f"\n{r.workload} {r.tool} failed: {r.error}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"load_average_1min": load, "threads": args.threads, "limit": args.limit,
                                         "runs": [asdict(r) for r in rows], "importtime": imports}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
