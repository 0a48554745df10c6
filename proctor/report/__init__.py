"""What a run looks like to a person: terminal tables and the HTML report.

The tables are `terminal`'s; the report is `html`'s, which lays out what `analysis`
computes from the runs' records.
"""

from proctor.report.terminal import (
    print_agreement,
    print_results,
    print_task_table,
    wide_console,
)

__all__ = ["print_agreement", "print_results", "print_task_table", "wide_console"]
