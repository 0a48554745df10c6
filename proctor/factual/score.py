"""Score generations against the bank: the seed's scored rows and the summaries per group.

Generations are validated first (`validate_generations`); a file with any problem is never
scored, so a partial or mismatched run cannot pass for a complete one. A generation's
`chat_template` record (a chat-formatted run) is carried onto its scored row.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from proctor.errors import UserError
from proctor.factual.prompts import condition_of
from proctor.factual.scorer import popqa_match, score_response, summarise
from proctor.factual.validate import ValidationReport, validate_generations

#: bank fields copied onto every scored row, in the seed's order
CARRIED = ("fact_id", "relation", "condition_family", "language", "target_slot", "answer_type",
           "answer_granularity", "answer_in_subject_surface", "use_for_main_forward",
           "use_for_reverse_analysis", "use_for_recognition_analysis")
GROUPS = ("condition_family", "condition", "relation", "language")


def check_generations(bank: Sequence[Mapping], generations: Sequence[Any], source: str) -> ValidationReport:
    """Validate generation rows; raise one UserError listing every problem when any was found."""
    report = validate_generations(bank, generations)
    if not report.ok:
        problems = "\n  ".join(report.lines())
        raise UserError(f"{source} cannot be scored against this bank ({report.rows} rows):\n  {problems}\n"
                        "fix the generations (or regenerate them with `proctor factual generate`) and rerun")
    return report


def scored_row(row: Mapping, gen: Mapping, model: Optional[str]) -> dict:
    """Build the seed's scored row for one generation (plus `popqa_match`, the secondary rule)."""
    raw = gen["raw_response"]
    score = score_response(raw, row["aliases"], row.get("distractors", ()), row["language"],
                           gen.get("finish_reason"))
    out = {"query_id": row["query_id"], "model": gen.get("model", model)}
    out.update({name: row[name] for name in CARRIED})
    out.update({
        "raw_response": raw,
        "span": score.span,
        "flags": list(score.flags),
        "label": score.label,
        "matched_alias": score.matched_alias,
        "scorer": score.scorer,
        "needs_manual_review": score.needs_manual_review,
        "popqa_match": popqa_match(raw, row["aliases"]),
    })
    if gen.get("chat_template") is not None:  # seed-protocol rows keep the seed's fields only
        out["chat_template"] = gen["chat_template"]
    return out


def score_generations(bank: Sequence[Mapping], generations: Sequence[Any], *, model: Optional[str] = None,
                      source: str = "generations") -> list[dict]:
    """Scored rows in bank order; raises UserError when the generations do not validate."""
    check_generations(bank, generations, source)
    by_id = {gen["query_id"]: gen for gen in generations}
    return [scored_row(row, by_id[row["query_id"]], model) for row in bank]


def summaries(scored: Sequence[Mapping]) -> dict:
    """`summarise` overall and per condition family, condition, relation and language."""
    from proctor.factual.scorer import Score

    def as_score(r: Mapping) -> tuple:
        return Score(r["span"], r["label"], r["scorer"], r["matched_alias"], r["flags"],
                     r["needs_manual_review"]), r["popqa_match"]

    out: dict = {"overall": summarise(as_score(r) for r in scored)}
    for group in GROUPS:
        keyed: dict[str, list] = {}
        for r in scored:
            key = condition_of(r) if group == "condition" else r[group]
            keyed.setdefault(key, []).append(as_score(r))
        out[group] = {key: summarise(items) for key, items in sorted(keyed.items())}
    return out
