"""Terminal tables for the factual probe: behaviour per condition, then ISS and KTS."""

from __future__ import annotations

import math
from typing import Mapping, Optional

from rich.console import Console
from rich.table import Table

from proctor.factual.prompts import protocol_note
from proctor.factual.scorer import LABELS
from proctor.report import wide_console


def _fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _share(count: int, n: int, width: int) -> str:
    """"0.794  (81)": the share of n, then the count padded to `width` digits so columns line up."""
    return f"{_fmt(count / n if n else None)} {f'({count})':>{width + 2}}"


def print_summary(summary: Mapping, console: Optional[Console] = None) -> None:
    """Every label's share of rows, accuracy given attempted and the PopQA rule, per condition."""
    console = console or wide_console()
    # no outer edge and two-line headers keep nine columns of 4-digit counts inside 120 columns
    table = Table(title=f"Factual recall: {summary.get('model', '')}", title_justify="left", show_edge=False,
                  caption="label columns: share of rows (count); accuracy = correct", caption_justify="left")
    table.add_column("condition", no_wrap=True)
    for column in ("n", *LABELS, "acc |\nattempted", "PopQA\nrule"):
        table.add_column(column, justify="right")
    rows = [*summary["condition"].items(), ("all", summary["overall"])]
    width = len(str(summary["overall"]["n"]))
    for name, s in rows:
        shares = [_share(s["counts"][label], s["n"], width) for label in LABELS]
        table.add_row(name, str(s["n"]), *shares, _fmt(s["accuracy_given_attempted"]), _fmt(s["popqa_accuracy"]))
    console.print(table)
    print_protocol(summary.get("chat_template"), console)


def print_protocol(record: object, console: Optional[Console] = None) -> None:
    """Print the protocol difference of a chat-formatted run (nothing for the seed's protocol)."""
    note = protocol_note(record)
    if note is not None:
        (console or wide_console()).print(note, soft_wrap=True, markup=False, highlight=False)


def _metric_table(title: str, columns: tuple[str, ...]) -> Table:
    """Numbers never wrap; the last column, why a figure is undefined, wraps to the width left."""
    table = Table(title=title, title_justify="left", show_edge=False)
    for column in columns:
        table.add_column(column, justify="left" if column == "condition" else "right", no_wrap=True)
    table.add_column("why undefined", overflow="fold")
    return table


def _why(entry: Mapping, figure: str) -> str:
    """Return the recorded reason a figure is undefined; blank when it is defined."""
    if entry[figure] is not None:
        return ""
    return entry.get("reason") or "no reason recorded"


def print_metrics(result: Mapping, console: Optional[Console] = None) -> None:
    """Print ISS (with its CI and ISS-rank), then KTS (with A0, A0→c, Ac), per condition.

    An undefined figure's row says why.
    """
    console = console or wide_console()
    model = result.get("model", "")
    iss_table = _metric_table(f"ISS: {model}", ("condition", "facts", "ISS", "95% CI", "ISS-rank"))
    kts_table = _metric_table(f"KTS: {model}", ("condition", "facts", "KTS", "A0", "A0→c", "Ac", "KTS-gap",
                                                "KTS_beh"))
    for condition, m in result["conditions"].items():
        iss, kts = m["iss"], m.get("kts")
        ci = f"[{_fmt(iss['ci_low'])}, {_fmt(iss['ci_high'])}]"
        iss_table.add_row(condition, str(iss["n_facts"]), _fmt(iss["iss"]), ci, _fmt(iss["iss_rank"]),
                          _why(iss, "iss"))
        if kts is None:
            kts_table.add_row(condition, "—", *["—"] * 6, "KTS was not computed for this condition")
            continue
        kts_table.add_row(condition, str(kts["n_facts"]), _fmt(kts["kts"]), _fmt(kts["a0"]), _fmt(kts["a0_to_c"]),
                          _fmt(kts["ac"]), _fmt(kts["kts_gap"]), _fmt(kts["kts_beh"]), _why(kts, "kts"))
    console.print(iss_table)
    console.print(kts_table)
    print_protocol(result.get("chat_template"), console)
