"""GPU check: proctor's HF backend on CUDA (float32, bfloat16) against CPU float32 references, beside lm-eval.

Four steps, two machines (docs/benchmarks.md, "GPU check", has the exact commands):

    python benchmarks/gpu_check.py reference              # here, CPU: requests + float32 references -> bundle
    python benchmarks/gpu_check.py pack                   # here: .gpu_carry/part1, part2 (each fits one call)
    bash benchmarks/gpu_check.sh                          # there, once per part: `assemble`, then `check`
    python benchmarks/gpu_check.py check --device cpu     # the same check here (smoke test, small bundle)

`reference` renders, with proctor's own tasks, the requests of MMLU 5-shot MC (`mmlu:mc::olmes`, the
first items of each of the 57 subjects in turn: 500 items, 2,000 loglikelihood requests) and GSM8K
greedy (`gsm8k::olmes`, the first 100 test questions, 8-shot CoT, up to 512 new tokens), runs them on
this CPU in float32 through proctor's engine (empty result cache) and writes one gzipped JSON
"bundle": the requests themselves (the device needs no data and no task code), each choice's
sum_logits, each question's text and token count, the CPU's timings, the GGUF's sha256 and a digest of
the float32 weights.

`check` loads the model from the carried GGUF with proctor's own conversion (so the device's float32
weights are the CPU reference's own: the weight digest must match, else the float32 comparison is not
of the same model), runs the bundle's requests through proctor's HF backend in float32 and in
bfloat16, then through lm-evaluation-harness's `HFLM` on the same loaded models when lm-eval can be
imported, and compares every run with the CPU float32 reference:

- float32 must agree: max |Δ sum_logits| <= --tol (1e-3; expected ~1e-4), every changed MMLU prediction
  a near-tie (reference margin <= 2 x that item's |Δ|), and >= --min-text-agreement (0.95) of the
  GSM8K texts identical (greedy decoding may part at a near-tie). Exit status 1 otherwise.
- bfloat16 is another numeric model (weights rounded to 8 bits of mantissa): its agreement is
  reported, not required; only gross breakage (MMLU agreement < --bf16-floor, 0.5) fails.
- lm-eval rows are reported (agreement with the reference and with proctor, throughput), not required.

Throughput: MMLU items/s of the scoring call (`Engine.run` / `HFLM.loglikelihood`, tokenization
inside); GSM8K new tokens/s of the generate call, the new tokens counted the same way for both tools
(each text re-tokenized; proctor's own id count, stop tokens included, is in the JSON). Each model is
warmed up first (a few requests of their own, outside the timed calls: CUDA start-up and proctor's
one-time measurement of its "auto" batch budget are not in the rates).

`assemble` uses the standard library only: it copies the parts a call carried into a stash outside
the repository, which a warm machine keeps between calls, checks every file's sha256 and, once all
parts are there, rebuilds the GGUF; while a part is missing it says which and exits 3.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("PROCTOR_DATA_DIR", ROOT.parent / "shared" / "data"))
MODEL = "smollm2-135m"
MMLU_SPEC = "mmlu:mc::olmes"
GSM8K_SPEC = "gsm8k::olmes"
MAX_LENGTH = 2048
SEED = 1234
FORMAT = "proctor-gpu-check/1"
CARRY = ROOT / ".gpu_carry"
STASH = Path("/tmp/gpu_check")
BUNDLE = "bundle.json.gz"
MANIFEST = "manifest.json"
PARTS = ("part1", "part2")
MIB = 1 << 20
CALL_LIMIT = 64 * MIB        # what one `run` call may carry: the working tree and the carried paths together
INCOMPLETE = 3               # `assemble`'s exit status while a part is still missing
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


# ---------------------------------------------------------------- small helpers (standard library only)

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def read_json_gz(path: Path) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_json_gz(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(data, f, ensure_ascii=False)
    tmp.replace(path)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    tmp.replace(path)


def ignore_itself(folder: Path) -> None:
    """Give the carry folder a .gitignore of `*`: it never shows in `git status`, and `carry` may name it."""
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.is_file():
        ignore.write_text("# made by benchmarks/gpu_check.py: carried to the GPU machine, never committed\n*\n")


def mib(n: float) -> str:
    return f"{n / MIB:.1f} MiB"


# ---------------------------------------------------------------- reference (CPU): requests and float32 results

def mmlu_items(n: int, data_dir: Path) -> list[dict]:
    """The first items of each MMLU subject in turn, `n` in all (500: 9 from the first 44 subjects, 8 from the rest)."""
    from proctor.pipeline import plan
    from proctor.tasks.base import Instance

    if n <= 0:
        return []
    runs = plan([MMLU_SPEC], data_dir, math.ceil(n / 57)).tasks
    names = list(runs)
    counts = [n // len(names) + (i < n % len(names)) for i in range(len(names))]
    items = []
    for name, count in zip(names, counts):
        instances = list(runs[name].instances)[:count]
        if len(instances) < count:
            raise SystemExit(f"{name} has only {len(instances)} items, {count} asked")
        for inst in instances:
            if not isinstance(inst, Instance):
                raise SystemExit(f"{name}: expected multiple-choice instances, got {type(inst).__name__}")
            if not isinstance(inst.prompt, str) or inst.choice_prompts is not None or inst.uncond_requests:
                raise SystemExit(f"{inst.query_id}: expected one plain-text context and no unconditioned requests")
            items.append({"query_id": inst.query_id, "task": name, "context": inst.prompt,
                          "continuations": list(inst.continuations), "label": inst.label, "policy": inst.policy})
    return items


def gsm8k_items(n: int, data_dir: Path, max_gen_toks: Optional[int]) -> list[dict]:
    """The first `n` GSM8K test questions as `gsm8k::olmes` asks them (greedy); `max_gen_toks` shortens them."""
    from dataclasses import asdict

    from proctor.pipeline import plan
    from proctor.tasks.generation import GenerationInstance

    if n <= 0:
        return []
    run = plan([GSM8K_SPEC], data_dir, n).tasks[GSM8K_SPEC]
    if len(run.instances) < n:
        raise SystemExit(f"{GSM8K_SPEC} has only {len(run.instances)} items, {n} asked")
    items = []
    for inst in run.instances:
        if not isinstance(inst, GenerationInstance):
            raise SystemExit(f"{GSM8K_SPEC}: expected generation instances, got {type(inst).__name__}")
        request = asdict(inst.request)
        if not isinstance(request["context"], str) or request["do_sample"] or request["repeats"] != 1:
            raise SystemExit(f"{inst.query_id}: expected a plain-text greedy request")
        if max_gen_toks is not None:
            request["max_gen_toks"] = max_gen_toks
        request["stop"] = list(request["stop"])
        items.append({"query_id": inst.query_id, "request": request, "target": inst.target})
    return items


def loglikelihood_requests(items: list[dict]) -> list[Any]:
    from proctor.requests import Loglikelihood

    return [Loglikelihood(it["context"], c, it["policy"]) for it in items for c in it["continuations"]]


def generate_requests(items: list[dict]) -> list[Any]:
    from proctor.requests import Generate

    return [Generate(**{**it["request"], "stop": tuple(it["request"]["stop"])}) for it in items]


def predictions(items: list[dict], sums: list[float]) -> list[int]:
    """Each item's choice by acc_raw (the largest sum_logits; ties to the lowest index), as `mmlu:mc::olmes` scores."""
    out, at = [], 0
    for it in items:
        scores = sums[at:at + len(it["continuations"])]
        out.append(max(range(len(scores)), key=lambda i: (scores[i], -i)))
        at += len(scores)
    return out


def per_item(items: list[dict], flat: list[Any]) -> list[list[Any]]:
    out, at = [], 0
    for it in items:
        out.append(flat[at:at + len(it["continuations"])])
        at += len(it["continuations"])
    return out


def hf_model(rt: Any) -> Any:
    """The transformers model of a runtime's HF backend."""
    return rt.backend.model


def weights_digest(model: Any) -> str:
    """sha256 over the parameters (sorted names, dtypes, shapes, bytes): equal only for bit-identical weights."""
    import torch

    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        t = p.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def token_digest(tokenizer: Any, item: dict) -> str:
    """A short digest of an item's token ids (context, then each continuation): the tokenizer's own check."""
    texts = [item["context"], *item["continuations"]] if "continuations" in item else [item["request"]["context"]]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def same_tokens(tokenizer: Any, items: list[dict]) -> int:
    """How many items the tokenizer splits into the same ids as the CPU reference's did."""
    return sum(token_digest(tokenizer, it) == it["ref"]["tokens"] for it in items)


def exact_match(text: str, target: str) -> bool:
    from proctor.metrics.answers import extract_last_number, gsm8k_match

    return bool(gsm8k_match(extract_last_number(text), target))


def versions() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                           "cpu_count": os.cpu_count()}
    for name in ("torch", "transformers", "proctor", "gguf", "lm_eval", "accelerate", "numpy", "tokenizers"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    try:
        from proctor.version import VERSION

        out["proctor_source"] = VERSION
    except ImportError:
        pass
    try:
        out["git_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                           text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out["git_commit"] = None
    return out


def cmd_reference(args: argparse.Namespace) -> int:
    import torch

    from proctor.backends.sources import resolve_source
    from proctor.engine import ResultCache
    from proctor.runtime import session

    started = time.perf_counter()
    source = resolve_source(args.model)
    if source.kind != "gguf":
        raise SystemExit(f"--model must name a GGUF file or alias (the device rebuilds the float32 model from it); "
                         f"{args.model!r} is a {source.kind}")
    mmlu = mmlu_items(args.items_mmlu, args.data_dir)
    gsm8k = gsm8k_items(args.items_gsm8k, args.data_dir, args.max_gen_toks)
    print(f"rendered {len(mmlu)} MMLU items, {len(gsm8k)} GSM8K questions; scoring on the CPU in float32 "
          f"({torch.get_num_threads()} threads)", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-ref-") as tmp, \
            session(args.model, device="cpu", dtype="float32", max_length=MAX_LENGTH, batch_size=args.batch_size,
                    progress=False, seed=SEED, result_cache=ResultCache(Path(tmp) / "results.sqlite")) as rt:
        digest = weights_digest(hf_model(rt))
        t0 = time.perf_counter()
        scored = rt.engine.run(loglikelihood_requests(mmlu)) if mmlu else []
        mmlu_wall = time.perf_counter() - t0
        tokens_run = rt.engine.stats.tokens_run
        t0 = time.perf_counter()
        generated = rt.engine.generate(generate_requests(gsm8k)) if gsm8k else []
        gsm8k_wall = time.perf_counter() - t0
        gen_tokens = rt.engine.stats.gen_tokens
        tokenizer = rt.backend.tokenizer
    for it, results in zip(mmlu, per_item(mmlu, scored)):
        it["ref"] = {"sum_logits": [r.sum_logits for r in results], "num_tokens": [r.num_tokens for r in results],
                     "is_greedy": [bool(r.is_greedy) for r in results], "tokens": token_digest(tokenizer, it)}
    for it, result in zip(gsm8k, generated):
        s = result.samples[0]
        it["ref"] = {"text": s.text, "num_tokens": s.num_tokens, "finish_reason": s.finish_reason,
                     "tokens": token_digest(tokenizer, it)}
    texts = [it["ref"]["text"] for it in gsm8k]
    bundle = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {**versions(), "torch_threads": torch.get_num_threads()},
        "model": {"name": args.model, "gguf_file": Path(source.location).name, "gguf_sha256": source.digest,
                  "gguf_size": Path(source.location).stat().st_size, "weights_sha256_float32": digest},
        "settings": {"max_length": MAX_LENGTH, "seed": SEED, "batch_size": args.batch_size,
                     "max_gen_toks_override": args.max_gen_toks, "mmlu_spec": MMLU_SPEC, "gsm8k_spec": GSM8K_SPEC},
        "reference": {
            "device": "cpu", "dtype": "float32",
            "mmlu": {"wall_s": mmlu_wall, "tokens_run": tokens_run, "items": len(mmlu)},
            "gsm8k": {"wall_s": gsm8k_wall, "gen_tokens": gen_tokens, "text_tokens": text_tokens(tokenizer, texts),
                      "items": len(gsm8k)},
        },
        "mmlu": mmlu,
        "gsm8k": gsm8k,
    }
    if args.out.resolve().parent == CARRY.resolve():
        ignore_itself(CARRY)
    write_json_gz(args.out, bundle)
    print(f"wrote {args.out} ({mib(args.out.stat().st_size)}) in {time.perf_counter() - started:.0f} s: "
          f"MMLU {mmlu_wall:.1f} s, GSM8K {gsm8k_wall:.1f} s ({gen_tokens} new tokens)")
    return 0


# ---------------------------------------------------------------- pack (here): the carry folder

def tree_bytes() -> int:
    """Bytes of the working tree that travels with every call: tracked plus untracked-not-ignored files."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = ROOT / os.fsdecode(name)
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def download_wheels(target: Path, with_lm_eval: bool) -> list[Path]:
    """pip-download the pure-Python wheels the device lacks, pinned to the versions installed here."""
    import importlib.metadata as md

    names = [f"gguf=={md.version('gguf')}"]
    if with_lm_eval:
        names.append(f"lm_eval=={md.version('lm_eval')}")
    target.mkdir(parents=True, exist_ok=True)
    platforms = [x for p in WHEEL_PLATFORMS for x in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                    "3.12", "--implementation", "cp", *platforms, "-d", str(target), *names], check=True)
    found = []
    for spec in names:
        name, version = spec.split("==")
        hits = sorted(target.glob(f"{name}-{version}-*.whl"))
        if not hits:
            raise SystemExit(f"pip download left no wheel of {spec} in {target}")
        found.append(hits[0])
    return found


def cmd_pack(args: argparse.Namespace) -> int:
    from proctor.backends.sources import resolve_source

    bundle = read_json_gz(args.bundle)
    if bundle.get("format") != FORMAT:
        raise SystemExit(f"{args.bundle} is not a {FORMAT} bundle")
    gguf = Path(resolve_source(bundle["model"]["name"]).location)
    gguf_sha = sha256_file(gguf)
    if gguf_sha != bundle["model"]["gguf_sha256"]:
        raise SystemExit(f"{gguf} is not the GGUF the bundle's references were computed with (sha256 differs)")
    if args.wheels:
        wheels = [w for w in sorted(args.wheels.glob("*.whl"))
                  if w.name.startswith("gguf-") or (args.lm_eval and w.name.startswith("lm_eval-"))]
    else:
        wheels = download_wheels(args.carry / ".download", args.lm_eval)
    if not any(w.name.startswith("gguf-") for w in wheels):
        raise SystemExit("no gguf wheel: the device needs it to read the GGUF file")
    gguf_wheel = [w for w in wheels if w.name.startswith("gguf-")]
    other_wheels = [w for w in wheels if not w.name.startswith("gguf-")]
    tree = tree_bytes()
    size = gguf.stat().st_size
    first_extra = sum(w.stat().st_size for w in gguf_wheel)
    second_extra = sum(w.stat().st_size for w in other_wheels) + args.bundle.stat().st_size
    # split the GGUF so that both calls carry about as much
    cut = (size + first_extra + second_extra) // 2 - first_extra
    cut = min(max(cut, 1), size - 1)
    calls = {"part1": tree + first_extra + cut + 8192, "part2": tree + second_extra + (size - cut) + 8192}
    for part, total in calls.items():
        if total > CALL_LIMIT - args.margin_mib * MIB:
            raise SystemExit(f"{part} would make a call of {mib(total)} (working tree {mib(tree)}), over "
                             f"{mib(CALL_LIMIT)} less the margin of {args.margin_mib} MiB; pack without --lm-eval, "
                             "or make the working tree smaller")
    ignore_itself(args.carry)
    for part in PARTS:  # the bundle itself (`reference --out`) may lie in the carry folder: it stays
        shutil.rmtree(args.carry / part, ignore_errors=True)
        (args.carry / part).mkdir(parents=True)
    files: list[dict] = []
    with gguf.open("rb") as f:
        for i, (part, length) in enumerate((("part1", cut), ("part2", size - cut))):
            name = f"{gguf.name}.{i + 1}of2"
            (args.carry / part / name).write_bytes(f.read(length))
            files.append({"part": part, "name": name, "role": "gguf", "index": i})
    for w in gguf_wheel:
        shutil.copy2(w, args.carry / "part1" / w.name)
        files.append({"part": "part1", "name": w.name, "role": "wheel"})
    for w in other_wheels:
        shutil.copy2(w, args.carry / "part2" / w.name)
        files.append({"part": "part2", "name": w.name, "role": "wheel"})
    shutil.copy2(args.bundle, args.carry / "part2" / BUNDLE)
    files.append({"part": "part2", "name": BUNDLE, "role": "bundle"})
    for entry in files:
        path = args.carry / entry["part"] / entry["name"]
        entry.update(size=path.stat().st_size, sha256=sha256_file(path))
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "gguf": {"name": gguf.name, "sha256": gguf_sha, "size": size}, "files": files,
                "bundle": {"mmlu": len(bundle["mmlu"]), "gsm8k": len(bundle["gsm8k"]),
                           "created": bundle["created"]}}
    for part in PARTS:
        write_json(args.carry / part / MANIFEST, manifest)
    shutil.rmtree(args.carry / ".download", ignore_errors=True)
    print(f"{args.carry}: working tree {mib(tree)} travels with each call (64 MiB a call in all)")
    for part in PARTS:
        here = sorted((args.carry / part).iterdir())
        carried = sum(p.stat().st_size for p in here)
        print(f"  {part}: {mib(carried)} carried, {mib(carried + tree)} in the call: "
              + ", ".join(f"{p.name} ({mib(p.stat().st_size)})" for p in here))
    print(f"wheels: {', '.join(w.name for w in wheels)}; lm-eval {'carried' if other_wheels else 'not carried'}")
    rel = args.carry.resolve().relative_to(ROOT) if args.carry.resolve().is_relative_to(ROOT) else args.carry
    print("run them back to back (the machine keeps the first part only while warm, 30 s after a call):\n"
          f"  run(command=\"bash benchmarks/gpu_check.sh\", carry=[\"{rel}/part1\"], timeout_s=600)\n"
          f"  run(command=\"bash benchmarks/gpu_check.sh\", carry=[\"{rel}/part2\"], timeout_s=600)")
    return 0


# ---------------------------------------------------------------- assemble (device, standard library only)

def cmd_assemble(args: argparse.Namespace) -> int:
    """Stash what this call carried; rebuild the GGUF once every part is there (exit 3 while one is missing)."""
    carried = [p for p in PARTS if (args.carry / p / MANIFEST).is_file()]
    manifests = {p: json.loads((args.carry / p / MANIFEST).read_text()) for p in carried}
    if len({json.dumps(m, sort_keys=True) for m in manifests.values()}) > 1:
        raise SystemExit("the carried parts come from two different `pack` runs; pack again and carry both anew")
    stash_manifest = args.stash / MANIFEST
    manifest = next(iter(manifests.values()), None)
    if manifest is None:
        if not stash_manifest.is_file():
            print(f"assemble: this call carried no part ({args.carry}/part1 or part2) and none is stashed in "
                  f"{args.stash}; carry one (see docs/benchmarks.md, GPU check)")
            return INCOMPLETE
        manifest = json.loads(stash_manifest.read_text())
    elif stash_manifest.is_file() and json.loads(stash_manifest.read_text()) != manifest:
        print(f"assemble: {args.stash} holds parts of another pack; starting over")
        shutil.rmtree(args.stash / "parts", ignore_errors=True)
        (args.stash / manifest["gguf"]["name"]).unlink(missing_ok=True)
    args.stash.mkdir(parents=True, exist_ok=True)
    write_json(stash_manifest, manifest)
    have, missing = [], set()
    for entry in manifest["files"]:
        stashed = args.stash / "parts" / entry["part"] / entry["name"]
        if stashed.is_file() and stashed.stat().st_size == entry["size"] and sha256_file(stashed) == entry["sha256"]:
            have.append(entry)
            continue
        source = args.carry / entry["part"] / entry["name"]
        if source.is_file():
            if sha256_file(source) != entry["sha256"]:
                raise SystemExit(f"{source}: sha256 differs from the manifest's (damaged in transit?)")
            stashed.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, stashed.with_name(stashed.name + ".tmp"))
            stashed.with_name(stashed.name + ".tmp").replace(stashed)
            have.append(entry)
        else:
            missing.add(entry["part"])
    print(f"assemble: this call carried {', '.join(carried) or 'nothing'}; stashed in {args.stash}: "
          f"{', '.join(sorted({e['part'] for e in have})) or 'nothing'}")
    if missing:
        print(f"assemble: still missing {', '.join(sorted(missing))}. Call again at once (the machine keeps the "
              f"stash only while it is warm: 30 s after a call) with carry=[\".gpu_carry/{sorted(missing)[0]}\"] "
              "and the same command")
        return INCOMPLETE
    gguf = args.stash / manifest["gguf"]["name"]
    if not (gguf.is_file() and gguf.stat().st_size == manifest["gguf"]["size"]):
        pieces = sorted((e for e in manifest["files"] if e["role"] == "gguf"), key=lambda e: e["index"])
        tmp = gguf.with_name(gguf.name + ".tmp")
        with tmp.open("wb") as out:
            for e in pieces:
                with (args.stash / "parts" / e["part"] / e["name"]).open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
        tmp.replace(gguf)
    if sha256_file(gguf) != manifest["gguf"]["sha256"]:
        gguf.unlink()
        raise SystemExit(f"{gguf}: the rebuilt GGUF's sha256 differs from the manifest's")
    wheels = args.stash / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir()
    for e in manifest["files"]:
        if e["role"] == "wheel":
            shutil.copyfile(args.stash / "parts" / e["part"] / e["name"], wheels / e["name"])
        if e["role"] == "bundle":
            shutil.copyfile(args.stash / "parts" / e["part"] / e["name"], args.stash / BUNDLE)
    print(f"assemble: complete: {gguf} (sha256 {manifest['gguf']['sha256'][:16]}... checked), "
          f"wheels: {', '.join(sorted(p.name for p in wheels.iterdir()))}, {args.stash / BUNDLE}")
    return 0


# ---------------------------------------------------------------- check (device): run and compare

def text_tokens(tokenizer: Any, texts: list[str]) -> int:
    """Tokens of the texts re-tokenized, as bench_generate counts every tool's (its directory travels too)."""
    import bench_generate

    return bench_generate.text_tokens(tokenizer, [[t] for t in texts])


class Clock:
    """Wall time of a call on `device`, the device synchronized on both sides."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def timed(self, call: Callable[[], Any]) -> tuple[Any, float]:
        self.sync()
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = call()
        self.sync()
        return out, time.perf_counter() - t0

    def peak_gib(self) -> Optional[float]:
        if not self.cuda:
            return None
        import torch

        return torch.cuda.max_memory_allocated() / (1 << 30)


def compare_mmlu(items: list[dict], sums: list[float]) -> dict[str, Any]:
    """Agreement of one run's sum_logits and predictions with the CPU float32 reference's."""
    ref_sums = [s for it in items for s in it["ref"]["sum_logits"]]
    ref_pred = predictions(items, ref_sums)
    pred = predictions(items, sums)
    deltas = [abs(a - b) for a, b in zip(sums, ref_sums)]
    item_delta = [max(d) for d in per_item(items, deltas)]
    changed = []
    for i, (it, a, b) in enumerate(zip(items, pred, ref_pred)):
        if a != b:
            ref = it["ref"]["sum_logits"]
            margin = abs(ref[a] - ref[b])
            changed.append({"query_id": it["query_id"], "ref": b, "got": a, "ref_margin": margin,
                            "item_max_delta": item_delta[i], "near_tie": margin <= 2 * item_delta[i]})
    return {
        "items": len(items), "same_predictions": sum(a == b for a, b in zip(pred, ref_pred)),
        "max_abs_delta_sum_logits": max(deltas, default=0.0),
        "mean_abs_delta_sum_logits": sum(deltas) / len(deltas) if deltas else 0.0,
        "accuracy": sum(p == it["label"] for p, it in zip(pred, items)) / len(items) if items else None,
        "changed": changed, "predictions": pred,
    }


def compare_gsm8k(items: list[dict], texts: list[str]) -> dict[str, Any]:
    ref = [it["ref"]["text"] for it in items]
    return {
        "items": len(items), "identical_texts": sum(a == b for a, b in zip(texts, ref)),
        "differing": [it["query_id"] for it, a, b in zip(items, texts, ref) if a != b],
        "exact_match": sum(exact_match(t, it["target"]) for t, it in zip(texts, items)) / len(items) if items else None,
    }


def proctor_warmup(rt: Any, items: list[dict], gen_items: list[dict]) -> None:
    """A few requests of their own (other keys than the timed ones): CUDA start-up, the auto batch budget."""
    from proctor.requests import Generate, Loglikelihood

    if items:
        rt.engine.run([Loglikelihood("Warm-up. " + items[0]["context"], c, items[0]["policy"])
                       for c in items[0]["continuations"]])
    if gen_items:
        rt.engine.generate([Generate("Warm-up. " + gen_items[0]["request"]["context"], max_gen_toks=8,
                                     stop=tuple(gen_items[0]["request"]["stop"]))])


def run_proctor(rt: Any, clock: Clock, mmlu: list[dict], gsm8k: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    proctor_warmup(rt, mmlu, gsm8k)
    if mmlu:
        results, wall = clock.timed(lambda: rt.engine.run(loglikelihood_requests(mmlu)))
        stats = rt.engine.stats
        sums = [r.sum_logits for r in results]
        out["mmlu"] = {"wall_s": wall, "items_per_s": len(mmlu) / wall, "tokens_run": stats.tokens_run,
                       "batches_run": stats.batches_run, "peak_gib": clock.peak_gib(),
                       **compare_mmlu(mmlu, sums), "sum_logits": per_item(mmlu, sums)}
    if gsm8k:
        before = rt.engine.stats.gen_tokens
        results, wall = clock.timed(lambda: rt.engine.generate(generate_requests(gsm8k)))
        samples = [r.samples[0] for r in results]
        texts = [s.text for s in samples]
        new = text_tokens(rt.backend.tokenizer, texts)
        out["gsm8k"] = {"wall_s": wall, "text_tokens": new, "new_tokens_per_s": new / wall,
                        "id_tokens": rt.engine.stats.gen_tokens - before, "peak_gib": clock.peak_gib(),
                        **compare_gsm8k(gsm8k, texts), "texts": texts,
                        "num_tokens": [s.num_tokens for s in samples],
                        "finish_reasons": [s.finish_reason for s in samples]}
    return out


def run_lm_eval(rt: Any, clock: Clock, mmlu: list[dict], gsm8k: list[dict], batch_size: int,
                proctor_row: dict[str, Any]) -> dict[str, Any]:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=rt.backend.model, tokenizer=rt.backend.tokenizer, batch_size=batch_size,
              max_length=MAX_LENGTH)
    out: dict[str, Any] = {"batch_size": batch_size}
    if mmlu:
        pairs = [(it["context"], c) for it in mmlu for c in it["continuations"]]
        lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=("Warm-up. " + pairs[0][0],
                                                                                     pairs[0][1]), idx=0)],
                         disable_tqdm=True)
        requests = [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i) for i, p in enumerate(pairs)]
        results, wall = clock.timed(lambda: lm.loglikelihood(requests, disable_tqdm=True))
        sums = [float(ll) for ll, _ in results]
        row = {"wall_s": wall, "items_per_s": len(mmlu) / wall, "peak_gib": clock.peak_gib(),
               **compare_mmlu(mmlu, sums)}
        if "mmlu" in proctor_row:
            theirs = proctor_row["mmlu"]
            row["same_as_proctor"] = sum(a == b for a, b in zip(row["predictions"], theirs["predictions"]))
            flat = [s for item in theirs["sum_logits"] for s in item]
            row["max_abs_delta_vs_proctor"] = max((abs(a - b) for a, b in zip(sums, flat)), default=0.0)
        out["mmlu"] = row
    if gsm8k:
        def kwargs(r: dict) -> dict[str, Any]:
            return {"until": list(r["stop"]), "max_gen_toks": r["max_gen_toks"], "do_sample": r["do_sample"],
                    "temperature": r["temperature"], "top_p": r["top_p"]}

        first = gsm8k[0]["request"]
        lm.generate_until([Instance(request_type="generate_until", doc={}, idx=0, metadata=("gsm8k", 0, 1),
                                    arguments=("Warm-up. " + first["context"], {**kwargs(first), "max_gen_toks": 8}))],
                          disable_tqdm=True)
        instances = [Instance(request_type="generate_until", doc={}, arguments=(it["request"]["context"],
                                                                                kwargs(it["request"])),
                              idx=i, metadata=("gsm8k", i, 1)) for i, it in enumerate(gsm8k)]
        texts, wall = clock.timed(lambda: lm.generate_until(instances, disable_tqdm=True))
        new = text_tokens(rt.backend.tokenizer, texts)
        row = {"wall_s": wall, "text_tokens": new, "new_tokens_per_s": new / wall, "peak_gib": clock.peak_gib(),
               **compare_gsm8k(gsm8k, texts), "texts": texts}
        if "gsm8k" in proctor_row:
            row["same_as_proctor"] = sum(a == b for a, b in zip(texts, proctor_row["gsm8k"]["texts"]))
        out["gsm8k"] = row
    return out


def lm_eval_version() -> Optional[str]:
    import importlib.metadata as md
    import importlib.util

    if importlib.util.find_spec("lm_eval") is None:
        return None
    try:
        return md.version("lm_eval")
    except md.PackageNotFoundError:
        return "unknown"


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(report: dict[str, Any]) -> list[str]:
    ref = report["reference"]
    n_mmlu, n_gsm = report["items"]["mmlu"], report["items"]["gsm8k"]
    head = ["tool", "dtype", "MMLU items/s", "same pred", "max |Δ sum_logits|", "acc",
            "GSM8K new tok/s", "identical texts", "EM", "wall s"]
    rows = []
    m, g = ref.get("mmlu", {}), ref.get("gsm8k", {})
    m_rate = m["items"] / m["wall_s"] if m.get("wall_s") else None
    g_rate = g["text_tokens"] / g["wall_s"] if g.get("wall_s") else None
    rows.append(["CPU reference", "float32", fmt(m_rate, ".1f"), "ref", "ref", fmt(ref.get("mmlu_accuracy"), ".3f"),
                 fmt(g_rate, ".1f"), "ref", fmt(ref.get("gsm8k_exact_match"), ".3f"),
                 fmt((m.get("wall_s") or 0) + (g.get("wall_s") or 0), ".1f")])
    for key, run in report["runs"].items():
        tool, dtype = key.split("/")
        if "error" in run or "skipped" in run:
            rows.append([tool, dtype, "FAILED" if "error" in run else "skipped"] + ["-"] * 7)
            continue
        mm, gg = run.get("mmlu"), run.get("gsm8k")
        wall = (mm or {}).get("wall_s", 0) + (gg or {}).get("wall_s", 0)
        rows.append([tool, dtype,
                     fmt(mm and mm["items_per_s"], ".1f"), f"{mm['same_predictions']}/{mm['items']}" if mm else "-",
                     fmt(mm and mm["max_abs_delta_sum_logits"], ".1e"), fmt(mm and mm["accuracy"], ".3f"),
                     fmt(gg and gg["new_tokens_per_s"], ".1f"),
                     f"{gg['identical_texts']}/{gg['items']}" if gg else "-",
                     fmt(gg and gg["exact_match"], ".3f"), f"{wall:.1f}"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    out = [f"MMLU 5-shot MC ({MMLU_SPEC}): {n_mmlu} items; GSM8K greedy ({GSM8K_SPEC}): {n_gsm} questions; "
           f"agreement is with the CPU float32 reference", line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    if "note" in ref:
        out.append(f"CPU reference: {ref['note']} ({m.get('items')} MMLU items, {g.get('items')} GSM8K questions)")
    for key, run in report["runs"].items():
        for task in ("mmlu", "gsm8k"):
            r = run.get(task) or {}
            if "same_as_proctor" in r:
                n = r["items"]
                extra = f", max |Δ sum_logits| {r['max_abs_delta_vs_proctor']:.1e}" if task == "mmlu" else ""
                out.append(f"{key} {task}: same as proctor {key.split('/')[1]}: {r['same_as_proctor']}/{n}{extra}")
        if "error" in run:
            out.append(f"{key}: FAILED: {run['error'].strip().splitlines()[-1]}")
        if "skipped" in run:
            out.append(f"{key}: skipped: {run['skipped']}")
    return out


def verdict(report: dict[str, Any], args: argparse.Namespace) -> tuple[bool, list[str]]:
    lines, ok = [], True
    f32 = report["runs"].get("proctor/float32")
    ref_digest = report["model"]["weights_sha256_float32"]
    if f32 is None:
        return True, ["float32 not run (--dtypes): nothing judged"]
    if "error" in f32:
        return False, ["FAIL proctor float32 raised an error"]
    same_weights = f32.get("weights_sha256") == ref_digest
    lines.append(f"{'ok  ' if same_weights else 'FAIL'} float32 weights on {args.device} are the CPU reference's "
                 f"(sha256 {str(f32.get('weights_sha256'))[:16]}... vs {ref_digest[:16]}...)")
    ok &= same_weights
    n = report["items"]["mmlu"] + report["items"]["gsm8k"]
    same_ids = f32.get("same_token_ids") == n
    lines.append(f"{'ok  ' if same_ids else 'FAIL'} the tokenizer splits {f32.get('same_token_ids')}/{n} items' texts "
                 "into the CPU reference's token ids")
    ok &= same_ids
    if "mmlu" in f32:
        m = f32["mmlu"]
        good = m["max_abs_delta_sum_logits"] <= args.tol
        lines.append(f"{'ok  ' if good else 'FAIL'} float32 max |Δ sum_logits| {m['max_abs_delta_sum_logits']:.2e} "
                     f"<= {args.tol:g} (mean {m['mean_abs_delta_sum_logits']:.1e})")
        ties = all(c["near_tie"] for c in m["changed"])
        changed = ("none changed" if not m["changed"] else "every changed one a near-tie" if ties
                   else "some changed ones are no near-ties")
        lines.append(f"{'ok  ' if ties else 'FAIL'} float32 MMLU predictions {m['same_predictions']}/{m['items']} "
                     f"the same ({changed})")
        ok &= good and ties
    if "gsm8k" in f32:
        g = f32["gsm8k"]
        share = g["identical_texts"] / g["items"]
        good = share >= args.min_text_agreement
        lines.append(f"{'ok  ' if good else 'FAIL'} float32 GSM8K texts {g['identical_texts']}/{g['items']} identical "
                     f"(>= {args.min_text_agreement:.0%} required)")
        ok &= good
    b16 = report["runs"].get("proctor/bfloat16")
    if b16 is not None and "error" in b16:
        lines.append("FAIL proctor bfloat16 raised an error")
        ok = False
    elif b16 is not None and "mmlu" in b16:
        m = b16["mmlu"]
        share = m["same_predictions"] / m["items"]
        good = share >= args.bf16_floor
        lines.append(f"{'ok  ' if good else 'FAIL'} bfloat16 MMLU agreement {share:.1%} (reported; only < "
                     f"{args.bf16_floor:.0%} fails), max |Δ sum_logits| {m['max_abs_delta_sum_logits']:.2e}")
        ok &= good
    if b16 is not None and "gsm8k" in b16:
        g = b16["gsm8k"]
        lines.append(f"info bfloat16 GSM8K texts {g['identical_texts']}/{g['items']} identical to float32 CPU's "
                     "(reported, not judged)")
    return ok, lines


def cmd_check(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    import torch

    from proctor.engine import ResultCache
    from proctor.runtime import session

    bundle = read_json_gz(args.bundle)
    if bundle.get("format") != FORMAT:
        raise SystemExit(f"{args.bundle} is not a {FORMAT} bundle")
    mmlu = bundle["mmlu"][:args.items_mmlu] if args.items_mmlu is not None else bundle["mmlu"]
    gsm8k = bundle["gsm8k"][:args.items_gsm8k] if args.items_gsm8k is not None else bundle["gsm8k"]
    model = args.model or str(args.stash / bundle["model"]["gguf_file"])
    lm_version = None if args.no_lm_eval else lm_eval_version()
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    import proctor

    env = {**versions(), "device": args.device, "device_name": device_name, "proctor_imported_from":
           str(Path(proctor.__file__).parent), "lm_eval_carried": lm_version is not None,
           "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
           "float32_matmul_precision": torch.get_float32_matmul_precision()}
    print(f"gpu_check: {device_name} ({args.device}); torch {env['torch']}, transformers {env['transformers']}, "
          f"proctor from {env['proctor_imported_from']}; lm-eval "
          f"{lm_version or ('not run (--no-lm-eval)' if args.no_lm_eval else 'not carried (not importable)')}; "
          f"TF32 matmul {env['allow_tf32_matmul']}", flush=True)
    ref = dict(bundle["reference"])
    ref["mmlu_accuracy"] = (sum(p == it["label"] for p, it in zip(
        predictions(mmlu, [s for it in mmlu for s in it["ref"]["sum_logits"]]), mmlu)) / len(mmlu)) if mmlu else None
    ref["gsm8k_exact_match"] = (sum(exact_match(it["ref"]["text"], it["target"]) for it in gsm8k) / len(gsm8k)
                                if gsm8k else None)
    if len(mmlu) < len(bundle["mmlu"]) or len(gsm8k) < len(bundle["gsm8k"]):
        ref["note"] = "the CPU timings are of the whole bundle"
    report: dict[str, Any] = {"format": FORMAT, "environment": env, "model": bundle["model"],
                              "bundle": {"created": bundle["created"], "host": bundle["host"],
                                         "settings": bundle["settings"]},
                              "items": {"mmlu": len(mmlu), "gsm8k": len(gsm8k)}, "reference": ref, "runs": {},
                              "settings": {"batch_size": args.batch_size, "lm_eval_batch_size": args.lm_eval_batch_size,
                                           "tol": args.tol, "min_text_agreement": args.min_text_agreement,
                                           "bf16_floor": args.bf16_floor, "budget_s": args.budget_s}}

    def save() -> None:
        write_json(args.out, report)

    clock = Clock(args.device)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-check-")))
        runtimes: dict[str, Any] = {}
        for dtype in dtypes:
            key = f"proctor/{dtype}"
            print(f"{key}: loading, then {len(mmlu)} MMLU items and {len(gsm8k)} GSM8K questions ...", flush=True)
            try:
                t0 = time.perf_counter()
                rt = stack.enter_context(session(model, device=args.device, dtype=dtype, max_length=MAX_LENGTH,
                                                 batch_size=args.batch_size, progress=False, seed=SEED,
                                                 result_cache=ResultCache(tmp / f"results-{dtype}.sqlite")))
                runtimes[dtype] = rt
                row: dict[str, Any] = {"load_s": time.perf_counter() - t0}
                row["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32  # as the loaded model left it
                row["same_token_ids"] = same_tokens(rt.backend.tokenizer, mmlu + gsm8k)
                if dtype == "float32":
                    row["weights_sha256"] = weights_digest(hf_model(rt))
                row.update(run_proctor(rt, clock, mmlu, gsm8k))
                report["runs"][key] = row
            except Exception:  # a failure of one run is reported; the others still run
                report["runs"][key] = {"error": traceback.format_exc()}
                print(report["runs"][key]["error"], file=sys.stderr, flush=True)
            save()
            print(f"{key}: done at {time.perf_counter() - started:.0f} s", flush=True)
        for dtype in dtypes:
            key = f"lm-eval/{dtype}"
            if args.no_lm_eval:
                continue
            if lm_version is None:
                report["runs"][key] = {"skipped": "lm-eval was not carried (not importable)"}
            elif dtype not in runtimes:
                report["runs"][key] = {"skipped": f"proctor could not load the {dtype} model"}
            elif time.perf_counter() - started > args.budget_s:
                report["runs"][key] = {"skipped": f"time budget of {args.budget_s} s spent"}
            else:
                print(f"{key}: HFLM on the same loaded model, batch {args.lm_eval_batch_size} ...", flush=True)
                try:
                    report["runs"][key] = run_lm_eval(runtimes[dtype], clock, mmlu, gsm8k, args.lm_eval_batch_size,
                                                      report["runs"].get(f"proctor/{dtype}", {}))
                except Exception:
                    report["runs"][key] = {"error": traceback.format_exc()}
                    print(report["runs"][key]["error"], file=sys.stderr, flush=True)
                print(f"{key}: done at {time.perf_counter() - started:.0f} s", flush=True)
            save()
    ok, lines = verdict(report, args)
    report["passed"] = ok
    report["verdict"] = lines
    report["total_s"] = time.perf_counter() - started
    save()
    print()
    print("\n".join(table(report)))
    print("items/s: the scoring call alone; new tok/s: generated texts re-tokenized (the same count for both tools), "
          "generate call alone; models warmed up first")
    print("\n".join(lines))
    print(f"{'PASSED' if ok else 'FAILED'} in {report['total_s']:.0f} s; wrote {args.out}")
    return 0 if ok else 1


# ---------------------------------------------------------------- command line

def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("reference", help="here, CPU: render the requests and compute float32 references")
    r.add_argument("--items-mmlu", type=int, default=500, help="MMLU items, over the 57 subjects in turn")
    r.add_argument("--items-gsm8k", type=int, default=100, help="first GSM8K test questions")
    r.add_argument("--max-gen-toks", type=int, help="shorten every GSM8K request (smoke tests only; the bundle "
                                                    "records it, and the device runs the same requests)")
    r.add_argument("--batch-size", default="auto")
    r.add_argument("--model", default=MODEL, help="a GGUF file or alias (the device rebuilds float32 from it)")
    r.add_argument("--data-dir", type=Path, default=DATA_DIR)
    r.add_argument("--out", type=Path, default=CARRY / BUNDLE)

    k = sub.add_parser("pack", help="here: split the GGUF and gather wheels and bundle into two carried parts")
    k.add_argument("--bundle", type=Path, default=CARRY / BUNDLE)
    k.add_argument("--carry", type=Path, default=CARRY)
    k.add_argument("--wheels", type=Path, help="take the wheels from this folder instead of pip-downloading them")
    k.add_argument("--no-lm-eval", dest="lm_eval", action="store_false", help="carry no lm-eval wheel")
    k.add_argument("--margin-mib", type=float, default=2.0, help="room to leave in each call under 64 MiB")

    a = sub.add_parser("assemble", help="device: stash the carried parts; rebuild the GGUF when all are there")
    a.add_argument("--carry", type=Path, default=CARRY)
    a.add_argument("--stash", type=Path, default=STASH)

    c = sub.add_parser("check", help="device: proctor (and lm-eval) against the references")
    c.add_argument("--stash", type=Path, default=STASH)
    c.add_argument("--bundle", type=Path, help="default: <stash>/bundle.json.gz")
    c.add_argument("--model", help="default: the GGUF rebuilt in <stash>")
    c.add_argument("--device", default="cuda")
    c.add_argument("--dtypes", default="float32,bfloat16")
    c.add_argument("--items-mmlu", type=int, help="only the bundle's first N MMLU items")
    c.add_argument("--items-gsm8k", type=int, help="only the bundle's first N GSM8K questions")
    c.add_argument("--batch-size", default="auto", help="proctor's")
    c.add_argument("--lm-eval-batch-size", type=int, default=32)
    c.add_argument("--no-lm-eval", action="store_true")
    c.add_argument("--tol", type=float, default=1e-3, help="float32: max |Δ sum_logits| allowed")
    c.add_argument("--min-text-agreement", type=float, default=0.95, help="float32: GSM8K texts identical")
    c.add_argument("--bf16-floor", type=float, default=0.5, help="bfloat16: MMLU agreement below this fails")
    c.add_argument("--budget-s", type=float, default=420, help="start no lm-eval run after this many seconds")
    c.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_check.json")
    args = p.parse_args(argv)
    if getattr(args, "batch_size", None) not in (None, "auto"):
        args.batch_size = int(args.batch_size)
    if args.command == "check" and args.bundle is None:
        args.bundle = args.stash / BUNDLE
    return {"reference": cmd_reference, "pack": cmd_pack, "assemble": cmd_assemble, "check": cmd_check}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
