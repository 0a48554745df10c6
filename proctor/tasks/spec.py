"""Spec strings: `task:format::variant` (e.g. `mmlu_stem:mc::olmes`)."""

from __future__ import annotations

from typing import Optional

from proctor.errors import UserError


def parse_spec(spec: str) -> tuple[str, Optional[str], Optional[str]]:
    """Split a spec into (task, format, variant); format/variant are None when absent.

    The variant is everything after `::` and may itself hold colons (`gsm8k::olmo3:n8:v2`), and
    so may the format before it (OLMES's `arc_easy:rc:bpb::olmes`: format `rc:bpb`).
    """
    text = spec.strip()
    left, sep, variant = text.partition("::")
    task, _, fmt = left.partition(":")
    parts = fmt.split(":") if fmt else []
    if not task or (sep and not variant) or (len(parts) > 1 and not sep) or "" in parts:
        raise UserError(f"malformed task spec {spec!r}; expected task:format::variant, "
                        "e.g. mmlu_stem:mc::olmes")
    return task, fmt or None, variant or None


def spec_format(spec: str) -> Optional[str]:
    """Return a spec's format (`mc`, `rc`, ...: its first part, `rc` of `rc:bpb`), or None when it has none."""
    fmt = parse_spec(spec)[1]
    return None if fmt is None else fmt.split(":")[0]
