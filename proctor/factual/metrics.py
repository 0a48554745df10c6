"""ISS and KTS for one model: join the bank, its scored rows and its hidden states, then compute.

Refuses (UserError) hidden states extracted from another bank and scored rows that do not
cover every main-forward query, so the figures always describe one complete run, and
scored rows and hidden states made with different prompt formats (chat template or none).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from proctor.errors import UserError
from proctor.factual.bank import Bank
from proctor.factual.iss import compute_iss
from proctor.factual.kts import compute_kts
from proctor.factual.prompts import describe_template, template_key
from proctor.outputs.hidden_states import HiddenStateFiles


def scored_labels(scored: Sequence[Any], query_ids: Sequence[str], source: str) -> dict[str, str]:
    """query_id -> label for every given query; a scored file that misses any is an error."""
    labels = {}
    for line, row in enumerate(scored, start=1):
        if not isinstance(row, Mapping) or not isinstance(row.get("query_id"), str) or "label" not in row:
            raise UserError(f"{source} line {line} is not a scored row (query_id and label); "
                            "rerun `proctor factual score`")
        labels[row["query_id"]] = row["label"]
    missing = [q for q in query_ids if q not in labels]
    if missing:
        raise UserError(f"{source} has no label for {len(missing)} main-forward queries of the bank "
                        f"(first: {', '.join(missing[:3])}); score the generations of this bank first")
    return labels


def check_same_prompts(scored: Sequence[Any], hidden: HiddenStateFiles, source: str) -> None:
    """Scored rows and hidden states must come from prompts of one format (same chat template, or none)."""
    states = hidden.index.chat_template
    other = next((row.get("chat_template") for row in scored if isinstance(row, Mapping)
                  and template_key(row.get("chat_template")) != template_key(states)), states)
    if template_key(other) != template_key(states):
        raise UserError(f"{source} holds rows generated with {describe_template(other)}, but the hidden states "
                        f"were extracted with {describe_template(states)}; rerun both steps with the same "
                        "--chat-template setting")


def factual_metrics(bank: Bank, scored: Sequence[Any], hidden: HiddenStateFiles, *, model: str,
                    bootstrap: int = 1000, kts_layer: str = "mean", source: str = "scored rows") -> dict:
    """Compute ISS and KTS per condition, as one JSON-ready dict.

    ISS comes with its CI, layer profile, outcome split and ISS-rank; KTS in its main and
    abstain-as-incorrect variants.
    """
    if hidden.index.bank_version != bank.version:
        raise UserError(f"the hidden states were extracted from bank {hidden.index.bank_version[:12]}, not "
                        f"this bank ({bank.version[:12]}); rerun `proctor factual hidden` for this bank")
    rows = bank.main_forward_rows()
    if [row["query_id"] for row in rows] != list(hidden.index.query_ids):
        raise UserError("the hidden states' query order differs from the bank's main-forward queries; "
                        "rerun `proctor factual hidden` into a fresh directory")
    labels = scored_labels(scored, hidden.index.query_ids, source)
    check_same_prompts(scored, hidden, source)
    iss = compute_iss(rows, hidden.layers, labels, n_boot=bootstrap)
    kts = compute_kts(rows, hidden.layers, labels, layer=kts_layer)
    kts_abstain = compute_kts(rows, hidden.layers, labels, layer=kts_layer, abstain_as_incorrect=True)
    conditions = {
        name: {"iss": iss.conditions[name].to_dict(include_facts=False),
               "kts": kts.conditions[name].to_dict(include_facts=False) if name in kts.conditions else None}
        for name in iss.conditions
    }
    return {
        "model": model,
        "bank_version": bank.version,
        "layers": list(hidden.index.layers),
        "chat_template": hidden.index.chat_template,
        "conditions": conditions,
        "iss": iss.to_dict(),
        "kts": kts.to_dict(),
        "kts_abstain_as_incorrect": kts_abstain.to_dict(),
    }
