"""What a run looks like to a person: terminal tables (`terminal`) and the HTML report (`html`,
which lays out what `analysis` computes from the runs' records)."""

from proctor.report.terminal import (
    print_agreement,
    print_results,
    print_task_table,
    wide_console,
)

__all__ = ["print_agreement", "print_results", "print_task_table", "wide_console"]
