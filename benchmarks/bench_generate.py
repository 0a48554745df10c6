"""Generation throughput: proctor vs lm-evaluation-harness 0.4.13 vs vLLM (CPU), side by side.

    python benchmarks/bench_generate.py                       # full: 32 GSM8K questions, all workloads
    python benchmarks/bench_generate.py --items 2 --max-gen-toks 24 --lm-eval-batch-sizes 2 \\
        --workloads greedy n8 rss --rss-items 1               # quick check (a few minutes of model loads)
    python benchmarks/bench_generate.py --tools proctor lm_eval --json gen.json

Every tool gets the same model (SmolLM2-135M-Instruct, proctor's `smollm2-135m`: the
float32 transformers copy proctor converts once under ~/.cache/proctor/models), the same
prompt strings and the same decoding settings, all built once by proctor's own tasks from
the first `--items` questions of the GSM8K test split:

- `greedy`: `gsm8k::olmes` (8-shot CoT, greedy, max_gen_toks 512, stop "Question:", "</s>",
  "<|im_end|>", "\\n\\n"). Column "identical": texts equal to the first proctor row's.
- `n8`: `gsm8k::olmo3:n8:v2` (the same prompts, 8 samples each at temperature 0.6, top-p 0.6).
  Column "pass@1": mean over questions of the share of correct samples, scored by the task's
  own scorer (`GSM8KTask.score`: extract_last_number + gsm8k_match), with its standard error.
- `rss`: proctor only; the n8 settings on the first `--rss-items` prompts with 1, 8 and 64
  samples each, to show peak memory against samples per prompt.

`--max-gen-toks K` replaces every request's max_gen_toks (for quick checks). proctor opens
its runtime (`proctor.runtime.session`, batch size B) and runs `engine.generate(requests)` with
an empty temporary results cache
(so it really generates, and commits as `proctor run` does); lm-eval runs
`HFLM(pretrained=<the converted dir>, batch_size=B).generate_until(instances)` with one
Instance per sample (as its `repeats: 8` expands them) and gen_kwargs until / max_gen_toks /
do_sample / temperature / top_p; vLLM (only when installed; else its rows say "not
installed") runs `LLM(..., dtype="float32", enable_prefix_caching=True).generate` with
`SamplingParams(n=samples)` (the engine seeded once) and its own scheduling.

Each (tool, workload, setting) runs in its own child process: fresh model load, float32,
CPU, 2 threads (`torch.set_num_threads(2)`, OMP/MKL 2; vLLM's OpenMP threads bound to CPUs
0-1 unless VLLM_CPU_OMP_THREADS_BIND is set). The timed region ("wall s") is the one
generate call alone: model loading is outside it; tokenization, batching, decoding (and for
proctor its cache writes) are inside. Peak RSS is the child's VmHWM (plus its own
children's: vLLM's engine core) read at its end
(model load included). Sampled texts differ between tools (each has its own sampler and
random streams; lm-eval draws from torch's global generator, seeded 1234), so n8 compares
pass@1, not texts.

New tokens are counted from each tool's generated token ids where it returns them: proctor
(`Generation.num_tokens`, up to and including the stop/EOS token) and vLLM
(`CompletionOutput.token_ids`). lm-eval returns only texts, so its count is the re-tokenized
text (cut before the stop string, so about one token per sample fewer than an id count).
The JSON also holds every row's re-tokenized count (`text_tokens`) for an equal comparison,
and lm-eval's `decoded_positions`: rows x steps its batches ran. lm-eval's stop-string
criterion ends a batch only when every row has produced the same stop string (or EOS, or
max_gen_toks): finished rows keep decoding, which those positions count.

Tokenization: proctor's `::olmes` generation contexts are encoded without special tokens
(no BOS; proctor.engine.tokens). lm-eval's `tok_batch_encode` uses the tokenizer's default
special tokens and vLLM tokenizes a string prompt with them too; SmolLM2's tokenizer adds
none, so all three should see the same ids: each lm-eval and vLLM child checks its prompts
against proctor's and the report prints any that differ. lm-eval's sampling also applies
transformers' default top_k=50 (the model sets none), which top-p 0.6 makes rarely matter.

Before anything else the parent measures this machine's float32 matmul rate on 2 threads
(2048x2048x2048 and a decode-step shape 64x576x1536) and prints proctor's new tokens/s as a
share of the FLOP limit at 2 x parameters FLOP per new token (prompt prefill and attention
over the context are not counted, though they are in the wall time). A failed child shows
FAILED and the exit status is 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
MODEL = "smollm2-135m"
THREADS = 2
MAX_LENGTH = 2048   # proctor's default --max-length; lm-eval and vLLM get the same window
SEED = 1234         # proctor's default run seed; lm-eval's and vLLM's seeds derive from it
SPECS = {"greedy": "gsm8k::olmes", "n8": "gsm8k::olmo3:n8:v2"}
RSS_REPEATS = (1, 8, 64)
TOOLS = ("proctor", "lm_eval", "vllm")
WORKLOADS = ("greedy", "n8", "rss")
GIB = 1 << 30
# proctor's time to its first finished generation work, by the name its EngineStats uses
FIRST_STATS = ("gen_first_batch_seconds", "gen_first_done_seconds")


# ---------------------------------------------------------------- workloads (parent)

@dataclass
class Workload:
    """One list of Generate requests every tool of its rows is given."""

    name: str                    # greedy, n8 or rss
    label: str                   # what tells its variants apart in the setting column ("" if none)
    requests: list[Any]          # proctor.requests.Generate
    run: Optional[Any] = None    # the proctor TaskRun whose scorer reads the texts (None: not scored)

    @property
    def slug(self) -> str:
        return f"{self.name}-{self.label.replace(' ', '').replace('=', '')}" if self.label else self.name


def task_run(spec: str, items: int) -> Any:
    from proctor.pipeline import plan

    run = plan([spec], DATA_DIR, items).tasks[spec]
    if len(run.instances) < items:
        raise SystemExit(f"{spec} has only {len(run.instances)} items, {items} asked")
    return run


def build_workloads(names: list[str], items: int, rss_items: int, max_gen_toks: Optional[int]) -> list[Workload]:
    def requests(run: Any) -> list[Any]:
        found = [inst.request for inst in run.instances]
        return found if max_gen_toks is None else [replace(r, max_gen_toks=max_gen_toks) for r in found]

    runs = {name: task_run(SPECS[name], items) for name in ("greedy", "n8") if name in names}
    out = [Workload(name, "", requests(run), run) for name, run in runs.items()]
    if "rss" in names:
        sampled = requests(task_run(SPECS["n8"], rss_items))
        out += [Workload("rss", f"repeats={n}", [replace(r, repeats=n) for r in sampled]) for n in RSS_REPEATS]
    return out


def proctor_prompt_tokens(tokenizer: Any, requests: list[Any]) -> list[list[int]]:
    """The token ids proctor generates from (its OLMES policy: no special tokens, left-truncated)."""
    from proctor.engine import TokenizationPolicy

    policy = TokenizationPolicy(tokenizer, max_length=MAX_LENGTH)
    return [list(c.tokens) for c in policy.request_generation_contexts(requests)]


def write_workload(workload: Workload, model_dir: Path, tokenizer: Any, path: Path) -> None:
    path.write_text(json.dumps({
        "model_dir": str(model_dir),
        "requests": [asdict(r) for r in workload.requests],
        "prompt_tokens": proctor_prompt_tokens(tokenizer, workload.requests),
    }))


def converted_model_dir() -> Path:
    """The float32 transformers directory proctor loads `smollm2-135m` from (converted on first use)."""
    from proctor.backends.models import model_directory
    from proctor.backends.sources import resolve_source

    return model_directory(resolve_source(MODEL))[0]


# ---------------------------------------------------------------- child: one tool, one workload, one setting

@dataclass
class Generated:
    """What one tool's timed generate call gave back."""

    texts: list[list[str]]                 # per request, its samples' texts
    wall_s: float
    tokenizer: Any                         # the tool's own, to re-tokenize texts
    id_tokens: Optional[int] = None        # new tokens counted on the tool's output ids (None: not exposed)
    prompt_ids: Optional[list[list[int]]] = None   # the ids the tool generated from (None: proctor's own)
    extra: dict[str, Any] = field(default_factory=dict)


def batch_size(text: str) -> Any:
    return int(text) if text.isdigit() else text


def load_requests(items: list[dict]) -> list[Any]:
    from proctor.requests import Generate

    return [Generate(**{**d, "stop": tuple(d["stop"])}) for d in items]


def run_proctor(requests: list[Any], batch: str, model_dir: Path) -> Generated:
    from proctor.engine import ResultCache
    from proctor.runtime import session

    with tempfile.TemporaryDirectory(prefix="proctor-bench-cache-") as tmp, \
            session(MODEL, device="cpu", dtype="float32", max_length=MAX_LENGTH, batch_size=batch_size(batch),
                    progress=False, seed=SEED, result_cache=ResultCache(Path(tmp) / "results.sqlite")) as runtime:
        t0 = time.perf_counter()
        results = runtime.engine.generate(requests)
        wall = time.perf_counter() - t0
        backend, stats = runtime.backend, runtime.engine.stats
    if stats.gen_cached:
        raise SystemExit("proctor's results cache was not empty")
    # every generation counter the engine keeps (gen_first_batch_seconds among them, where it has it)
    extra = {**{k: v for k, v in vars(stats).items() if k.startswith("gen_")},
             "parameters": sum(p.numel() for p in backend.model.parameters())}
    return Generated([[s.text for s in r.samples] for r in results], wall, backend.tokenizer,
                     id_tokens=stats.gen_tokens, extra=extra)


def lm_eval_kwargs(request: Any) -> dict[str, Any]:
    return {"until": list(request.stop), "max_gen_toks": request.max_gen_toks, "do_sample": request.do_sample,
            "temperature": request.temperature, "top_p": request.top_p}


def count_decoded(lm: Any) -> list[int]:
    """Records rows x steps of every batch lm-eval decodes (its whole batch runs until all rows stop)."""
    counts: list[int] = []
    inner = lm._model_generate

    def counted(**kwargs: Any) -> Any:
        out = inner(**kwargs)
        counts.append(out.shape[0] * (out.shape[1] - kwargs["context"].shape[1]))
        return out

    lm._model_generate = counted
    return counts


def run_lm_eval(requests: list[Any], batch: str, model_dir: Path) -> Generated:
    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(model_dir), batch_size=batch_size(batch), device="cpu", dtype="float32",
              max_length=MAX_LENGTH)
    instances = [Instance(request_type="generate_until", doc={}, arguments=(r.context, lm_eval_kwargs(r)),
                          idx=i, metadata=("gsm8k", i, r.repeats))
                 for i, r in enumerate(requests) for _ in range(r.repeats)]
    decoded = count_decoded(lm)
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    flat = lm.generate_until(instances, disable_tqdm=True)
    wall = time.perf_counter() - t0
    texts, at = [], 0
    for r in requests:
        texts.append(flat[at:at + r.repeats])
        at += r.repeats
    # the ids generate_until feeds the model: its own batch encoding and left truncation
    prompt_ids = [lm.tok_batch_encode([r.context], left_truncate_len=MAX_LENGTH - r.max_gen_toks)[0][0].tolist()
                  for r in requests]
    return Generated(texts, wall, lm.tokenizer, prompt_ids=prompt_ids, extra={"decoded_positions": sum(decoded)})


def run_vllm(requests: list[Any], batch: str, model_dir: Path) -> Generated:
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{THREADS - 1}")
    from vllm import LLM, SamplingParams

    from proctor.backends.vllm_backend import eos_token_ids

    # on CPU this fraction of the machine's memory is vLLM's key/value cache (its 0.92
    # default refuses to start when anything else holds memory)
    llm = LLM(model=str(model_dir), dtype="float32", enable_prefix_caching=True, max_model_len=MAX_LENGTH,
              seed=SEED, gpu_memory_utilization=0.3)
    tokenizer = llm.get_tokenizer()
    eos = sorted(eos_token_ids(tokenizer, model_dir))
    # no per-request seed: vLLM 0.32's CPU runner dies on seeded requests in large batches
    # ("CPU Generator does not use offset"); the engine seed above fixes the run
    params = [SamplingParams(n=r.repeats, temperature=r.temperature if r.do_sample else 0.0, top_p=r.top_p,
                             max_tokens=r.max_gen_toks, stop=list(r.stop), stop_token_ids=eos)
              for r in requests]
    t0 = time.perf_counter()
    outputs = llm.generate([r.context for r in requests], params, use_tqdm=False)
    wall = time.perf_counter() - t0
    return Generated([[c.text for c in o.outputs] for o in outputs], wall, tokenizer,
                     id_tokens=sum(len(c.token_ids) for o in outputs for c in o.outputs),
                     prompt_ids=[list(o.prompt_token_ids) for o in outputs])


RUNNERS: dict[str, Callable[[list[Any], str, Path], Generated]] = {
    "proctor": run_proctor, "lm_eval": run_lm_eval, "vllm": run_vllm,
}


def peak_rss_gib() -> float:
    """This process's VmHWM plus its live child processes' (vLLM's engine core runs in one)."""
    import psutil

    total = 0
    for pid in [os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))]:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")), 0)
    return total / GIB


def text_tokens(tokenizer: Any, texts: list[list[str]]) -> int:
    flat = [t for sample in texts for t in sample if t]
    return sum(len(ids) for ids in tokenizer(flat, add_special_tokens=False)["input_ids"]) if flat else 0


def run_child(tool: str, batch: str, workload_path: Path, out: Path) -> None:
    import torch

    torch.set_num_threads(THREADS)
    work = json.loads(workload_path.read_text())
    requests = load_requests(work["requests"])
    done = RUNNERS[tool](requests, batch, Path(work["model_dir"]))
    by_text = text_tokens(done.tokenizer, done.texts)
    record = {
        "new_tokens": by_text if done.id_tokens is None else done.id_tokens,
        "counted_on": "text" if done.id_tokens is None else "ids",
        "text_tokens": by_text, "wall_s": done.wall_s, "texts": done.texts, **done.extra,
    }
    if done.prompt_ids is not None:
        record["prompts_as_proctor"] = sum(a == b for a, b in zip(done.prompt_ids, work["prompt_tokens"]))
    record["peak_rss_gib"] = peak_rss_gib()
    out.write_text(json.dumps(record))


# ---------------------------------------------------------------- parent: jobs, children, report

@dataclass
class Job:
    tool: str
    workload: Workload
    batch: str                   # batch size as given ("-" for vLLM, which schedules itself)

    @property
    def setting(self) -> str:
        own = "own scheduler" if self.tool == "vllm" else f"batch {self.batch}"
        return f"{own}, {self.workload.label}" if self.workload.label else own


def jobs(workloads: list[Workload], tools: list[str], proctor_batches: list[str],
         lm_eval_batches: list[str]) -> list[Job]:
    batches = {"proctor": proctor_batches, "lm_eval": lm_eval_batches, "vllm": ["-"]}
    return [Job(tool, w, b) for w in workloads for tool in tools if tool == "proctor" or w.name != "rss"
            for b in batches[tool]]


def matmul_gflops(threads: int = THREADS) -> dict[str, float]:
    """Float32 matmul rate (GFLOP/s) on `threads` threads: square, and one decode step's MLP shape.

    Best of several short trials, so a moment of contention from other processes does not
    lower the rate (which would flatter the utilisation).
    """
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for name, (m, k, n) in {"2048x2048x2048": (2048, 2048, 2048), "64x576x1536": (64, 576, 1536)}.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.matmul(a, b)
        best = 0.0
        for _ in range(5):
            reps, t0 = 0, time.perf_counter()
            while reps == 0 or time.perf_counter() - t0 < 0.2:
                torch.matmul(a, b)
                reps += 1
            best = max(best, 2 * m * k * n * reps / (time.perf_counter() - t0))
        rates[name] = best / 1e9
    return rates


def spawn(job: Job, workload_file: Path, scratch: Path, index: int) -> dict[str, Any]:
    row: dict[str, Any] = {"tool": job.tool, "workload": job.workload.name, "setting": job.setting}
    print(f"{job.tool:8} {job.workload.name:7} {job.setting:28}", end="", flush=True)
    if job.tool == "vllm" and importlib.util.find_spec("vllm") is None:
        print("  not installed", flush=True)
        return {**row, "skipped": "not installed"}
    out = scratch / f"{index}-{job.tool}-{job.workload.slug}.json"
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", job.tool, job.batch, str(workload_file), str(out)],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print("  FAILED", flush=True)
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return {**row, "error": f"exit {proc.returncode}: {tail}"}
    record = json.loads(out.read_text())
    print(f"  {record['wall_s']:7.1f} s generating, {time.perf_counter() - started:6.1f} s in all", flush=True)
    return {**row, **record}


def score(workload: Workload, texts: list[list[str]]) -> dict[str, float]:
    """The workload's primary metric over questions, by its task's own scorer (GSM8K answer extraction and match)."""
    from proctor.metrics import MeanStat
    from proctor.requests import Generation, GenerateResult

    run = workload.run
    metric = run.config.primary_metric
    values = [run.task.score(inst, GenerateResult(tuple(Generation(t, 0, "stop") for t in samples))).metrics[metric]
              for inst, samples in zip(run.instances, texts)]
    stat = MeanStat.of(values)
    return {"metric": metric, "mean": stat.mean, "stderr": stat.stderr}


def annotate(rows: list[dict], workloads: list[Workload]) -> None:
    """Adds each finished row's score and, for greedy, how many texts match the first proctor row's."""
    by_slug = {w.slug: w for w in workloads}
    done = [r for r in rows if "texts" in r]
    for row in done:
        if by_slug[row["slug"]].run is not None:
            row["score"] = score(by_slug[row["slug"]], row["texts"])
    greedy = [r for r in done if r["workload"] == "greedy"]
    reference = next((r for r in greedy if r["tool"] == "proctor"), None)
    for row in greedy:
        if row is reference:
            row["identical"] = "reference"
        elif reference is not None:
            same = sum(a == b for a, b in zip(reference["texts"], row["texts"]))
            row["identical"] = f"{same}/{len(row['texts'])}"


def last_cell(row: dict) -> str:
    if row["workload"] == "greedy":
        return row.get("identical", "-")
    if "score" in row:
        return f"{row['score']['mean']:.3f} ± {row['score']['stderr']:.3f}"
    return "-"


def table(rows: list[dict]) -> list[str]:
    lines = ["| tool | workload | setting | new tok/s | wall s | peak RSS GiB | identical/pass@1 |",
             "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        head = f"| {r['tool']} | {r['workload']} | {r['setting']} |"
        if "skipped" in r or "error" in r:
            lines.append(f"{head} {r.get('skipped', 'FAILED')} | - | - | - |")
        else:
            lines.append(f"{head} {r['new_tokens'] / r['wall_s']:.1f} | {r['wall_s']:.1f} | "
                         f"{r['peak_rss_gib']:.2f} | {last_cell(r)} |")
    return lines


def notes(rows: list[dict], gflops: dict[str, float]) -> list[str]:
    out = []
    for r in rows:
        if "new_tokens" not in r:
            continue
        name = f"{r['tool']} {r['workload']} {r['setting']}"
        if r["tool"] == "proctor":
            per_token = 2 * r["parameters"]
            shares = ", ".join(f"{r['new_tokens'] / r['wall_s'] * per_token / (g * 1e9):.1%} of {shape} "
                               f"({g * 1e9 / per_token:.0f} tok/s)" for shape, g in gflops.items())
            firsts = "".join(f"; {k} {r[k]:.1f}" for k in FIRST_STATS if r.get(k) is not None)
            out.append(f"{name}: {r['new_tokens']} new tokens; FLOP limit at 2 x {r['parameters'] / 1e6:.1f}M "
                       f"params/token: {shares}{firsts}")
        else:
            line = f"{name}: {r['new_tokens']} new tokens (counted on {r['counted_on']}), {r['text_tokens']} re-tokenized"
            if "prompts_as_proctor" in r:
                line += f"; prompts tokenized as proctor's: {r['prompts_as_proctor']}/{len(r['texts'])}"
            if "decoded_positions" in r:
                line += f"; decoded positions {r['decoded_positions']}"
            out.append(line)
    return out


def report(rows: list[dict], gflops: dict[str, float], args: argparse.Namespace) -> None:
    gen = "each spec's own" if args.max_gen_toks is None else str(args.max_gen_toks)
    print(f"\nSmolLM2-135M-Instruct, float32, CPU, {THREADS} threads ({os.cpu_count()} CPUs); {args.items} GSM8K "
          f"questions (rss: {args.rss_items}); max_gen_toks {gen}\n")
    print("\n".join(table(rows)))
    print("\nmatmul float32, %d threads: %s" % (THREADS, ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in gflops.items())))
    print("\n".join(notes(rows, gflops)))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=32, help="first N questions of the GSM8K test split")
    p.add_argument("--rss-items", type=int, default=4, help="prompts of the rss workload")
    p.add_argument("--max-gen-toks", type=int, help="override every request's max_gen_toks (quick checks)")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    p.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    p.add_argument("--proctor-batch-sizes", nargs="+", default=["auto"], help="'auto' or sample rows per batch")
    p.add_argument("--lm-eval-batch-sizes", nargs="+", default=["8", "32"])
    p.add_argument("--json", type=Path, help="write every row (without texts) here")
    p.add_argument("--child", nargs=4, metavar=("TOOL", "BATCH", "WORKLOAD", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        tool, batch, workload, out = args.child
        run_child(tool, batch, Path(workload), Path(out))
        return 0

    gflops = matmul_gflops()
    from transformers import AutoTokenizer

    model_dir = converted_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    workloads = build_workloads(args.workloads, args.items, args.rss_items, args.max_gen_toks)
    rows = []
    with tempfile.TemporaryDirectory(prefix="proctor-bench-gen-") as tmp:
        scratch = Path(tmp)
        files = {w.slug: scratch / f"workload-{w.slug}.json" for w in workloads}
        for w in workloads:
            write_workload(w, model_dir, tokenizer, files[w.slug])
        for i, job in enumerate(jobs(workloads, args.tools, args.proctor_batch_sizes, args.lm_eval_batch_sizes)):
            rows.append({**spawn(job, files[job.workload.slug], scratch, i), "slug": job.workload.slug})
    annotate(rows, workloads)
    report(rows, gflops, args)
    for r in rows:
        if "error" in r:
            print(f"\n{r['tool']} {r['workload']} {r['setting']} failed: {r['error']}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({
            "matmul_gflops": gflops, "items": args.items, "rss_items": args.rss_items, "threads": THREADS,
            "max_gen_toks": args.max_gen_toks, "rows": [{k: v for k, v in r.items() if k not in ("texts", "slug")} for r in rows],
        }, indent=2))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
