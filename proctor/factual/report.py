"""Terminal tables for the factual probe: behaviour per condition, then ISS and KTS."""

from __future__ import annotations

import math
from typing import Mapping, Optional

from rich.console import Console
from rich.table import Table

from proctor.factual.prompts import protocol_note
from proctor.report import wide_console


def _fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def print_summary(summary: Mapping, console: Optional[Console] = None) -> None:
    """Accuracy, abstain rate, accuracy given attempted and the PopQA rule, per condition."""
    console = console or wide_console()
    table = Table(title=f"Factual recall: {summary.get('model', '')}", title_justify="left")
    for column in ("condition", "n", "accuracy", "abstain", "acc | attempted", "ambiguous", "PopQA rule"):
        table.add_column(column, justify="left" if column == "condition" else "right")
    rows = [*summary["condition"].items(), ("all", summary["overall"])]
    for name, s in rows:
        ambiguous = s["counts"]["ambiguous"] / s["n"] if s["n"] else None
        table.add_row(name, str(s["n"]), _fmt(s["accuracy"]), _fmt(s["abstain_rate"]),
                      _fmt(s["accuracy_given_attempted"]), _fmt(ambiguous), _fmt(s["popqa_accuracy"]))
    console.print(table)
    print_protocol(summary.get("chat_template"), console)


def print_protocol(record: object, console: Optional[Console] = None) -> None:
    """The protocol difference of a chat-formatted run (nothing for the seed's protocol)."""
    note = protocol_note(record)
    if note is not None:
        (console or wide_console()).print(note, soft_wrap=True, markup=False, highlight=False)


def print_metrics(result: Mapping, console: Optional[Console] = None) -> None:
    """ISS (with its CI and ISS-rank) and KTS (with A0, A0→c, Ac) per condition; why a KTS is undefined."""
    console = console or wide_console()
    table = Table(title=f"ISS and KTS: {result.get('model', '')}", title_justify="left")
    for column in ("condition", "facts", "ISS", "95% CI", "ISS-rank", "KTS", "A0", "A0→c", "Ac",
                   "KTS-gap", "KTS_beh"):
        table.add_column(column, justify="left" if column == "condition" else "right", no_wrap=True)
    notes = []
    for condition, m in result["conditions"].items():
        iss, kts = m["iss"], m.get("kts") or {}
        ci = f"[{_fmt(iss['ci_low'])}, {_fmt(iss['ci_high'])}]"
        if kts.get("reason"):
            notes.append(f"{condition}: KTS undefined: {kts['reason']}")
        table.add_row(condition, str(iss["n_facts"]), _fmt(iss["iss"]), ci, _fmt(iss["iss_rank"]),
                      _fmt(kts.get("kts")), _fmt(kts.get("a0")), _fmt(kts.get("a0_to_c")), _fmt(kts.get("ac")),
                      _fmt(kts.get("kts_gap")), _fmt(kts.get("kts_beh")))
    console.print(table)
    for note in notes:
        console.print(note, soft_wrap=True)
    print_protocol(result.get("chat_template"), console)
