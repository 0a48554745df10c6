"""The seed's count verification (olmes-evaluation-protocol.txt, "Count Verification").

Checks, against the documented tables: item counts and the sidecar `benchmark` of each
of the four specs (GSM8K included), per MMLU subject counts, query_id uniqueness,
SocialIQA reasoning-type coverage, and that `data_attribution::olmo3` runs those four.
Mismatches are errors; duplicate native ids (SocialIQA xlarge: 167) are warnings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from proctor.tasks.base import Work, assign_query_ids
from proctor.tasks.reasoning_types import REASONING_TYPES
from proctor.tasks.registry import resolve
from proctor.tasks.seed_suites import DATA_ATTRIBUTION

# The seed's Benchmark Parameters table: item count and sidecar `benchmark` of each spec.
BENCHMARK_COUNTS: dict[str, int] = {
    "socialiqa:mc::xlarge": 10000,
    "mmlu_social_sciences:mc::olmes": 3077,
    "gsm8k::olmo3:n8:v2": 1319,
    "mmlu_stem:mc::olmes": 3018,
}
SEED_BENCHMARKS: dict[str, str] = {
    "socialiqa:mc::xlarge": "socialiqa",
    "mmlu_social_sciences:mc::olmes": "mmlu_social_science",
    "gsm8k::olmo3:n8:v2": "gsm8k",
    "mmlu_stem:mc::olmes": "mmlu_stem",
}

# The seed's MMLU Subject Breakdown tables.
SUBJECT_COUNTS: dict[str, int] = {
    "econometrics": 114, "high_school_geography": 198,
    "high_school_government_and_politics": 193, "high_school_macroeconomics": 390,
    "high_school_microeconomics": 238, "high_school_psychology": 545, "human_sexuality": 131,
    "professional_psychology": 612, "public_relations": 110, "security_studies": 245,
    "sociology": 201, "us_foreign_policy": 100,
    "abstract_algebra": 100, "astronomy": 152, "college_biology": 144, "college_chemistry": 100,
    "college_computer_science": 100, "college_mathematics": 100, "college_physics": 102,
    "computer_security": 100, "conceptual_physics": 235, "electrical_engineering": 145,
    "elementary_mathematics": 378, "high_school_biology": 310, "high_school_chemistry": 203,
    "high_school_computer_science": 100, "high_school_mathematics": 270,
    "high_school_physics": 151, "high_school_statistics": 216, "machine_learning": 112,
}
SEED_DUPLICATES = {"socialiqa:mc::xlarge": 167}


@dataclass(frozen=True)
class Check:
    """One comparison of a documented value with the one the data gives."""

    name: str
    expected: Union[int, str]
    actual: Union[int, str]

    @property
    def ok(self) -> bool:
        """Whether the data gives the documented value."""
        return self.expected == self.actual


@dataclass
class VerifyReport:
    """Every check made, with the errors (failed checks among them) and warnings found."""

    checks: list[Check] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reasoning_types: dict[str, int] = field(default_factory=dict)  # socialiqa xlarge sample

    @property
    def ok(self) -> bool:
        """Whether verification found no errors."""
        return not self.errors

    def check(self, name: str, expected: Union[int, str], actual: Union[int, str]) -> None:
        """Record a check, and an error when `actual` is not `expected`."""
        c = Check(name, expected, actual)
        self.checks.append(c)
        if not c.ok:
            self.errors.append(f"{name}: expected {expected}, found {actual}")


def _instances(spec: str, data_dir: Optional[Path]) -> dict[str, Sequence[Work]]:
    return {t.config.name: t.instances(data_dir) for t in resolve(spec)}


def verify(data_dir: Optional[Path]) -> VerifyReport:
    """Check the data behind the seed's four specs against its documented tables."""
    report = VerifyReport()
    for spec, expected in BENCHMARK_COUNTS.items():
        by_task = _instances(spec, data_dir)
        instances = [i for insts in by_task.values() for i in insts]
        report.check(f"{spec} items", expected, len(instances))
        qids = [i.query_id for i in instances]
        report.check(f"{spec} unique query_ids", len(qids), len(set(qids)))
        benchmarks = sorted({str(i.metadata.get("benchmark")) for i in instances})
        report.check(f"{spec} benchmark", SEED_BENCHMARKS[spec], ",".join(benchmarks))
        for task, insts in by_task.items():
            _, dups = assign_query_ids(task, [i.native_id for i in insts])
            if dups:
                report.warnings.append(f"{task}: {dups} duplicate native ids (same native_id at "
                                       "several doc_ids); query ids disambiguate them by doc_id")
            if task in SEED_DUPLICATES:
                report.check(f"{task} duplicate native ids", SEED_DUPLICATES[task], dups)
            subject = insts[0].metadata.get("subject") if insts else None
            if subject in SUBJECT_COUNTS:
                report.check(f"mmlu {subject} items", SUBJECT_COUNTS[subject], len(insts))
        if spec.startswith("socialiqa"):
            types = Counter(i.metadata.get("reasoning_type") for i in instances)
            report.reasoning_types = {t: types.get(t, 0) for t in REASONING_TYPES}
            missing = [t for t in REASONING_TYPES if not types.get(t)]
            if missing:
                report.errors.append(f"{spec}: no questions of reasoning type {', '.join(missing)}")
            if types.get(None):
                report.warnings.append(
                    f"{spec}: {types[None]} of {len(instances)} questions "
                    f"({100 * types[None] / len(instances):.2f}%) match no ATOMIC wording "
                    "(reasoning_type null)")
    # the seed's one command runs exactly these specs: so does its suite
    report.check(f"{DATA_ATTRIBUTION.name} members", ", ".join(sorted(BENCHMARK_COUNTS)),
                 ", ".join(sorted(DATA_ATTRIBUTION.members)))
    return report


def format_report(report: VerifyReport) -> str:
    """Render the report as text: one line per check, the reasoning types, warnings, errors and totals."""
    lines = []
    for c in report.checks:
        lines.append(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.actual}"
                     + ("" if c.ok else f" (expected {c.expected})"))
    if report.reasoning_types:
        total = sum(report.reasoning_types.values())
        lines.append(f"socialiqa reasoning types ({total} classified): " + ", ".join(
            f"{t} {n}" for t, n in report.reasoning_types.items()))
    lines += [f"warning: {w}" for w in report.warnings]
    lines += [f"error: {e}" for e in report.errors]
    lines.append(f"{len(report.checks)} checks, {len(report.errors)} errors, "
                 f"{len(report.warnings)} warnings")
    return "\n".join(lines)
