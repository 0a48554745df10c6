"""What a suite is: named members, the aggregations it reports, and its headline one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: what a suite can report over its members (computed in proctor.scores):
#: macro = unweighted mean of the leaf tasks' primary scores; micro = mean over all leaf docs;
#: member_mean = unweighted mean of the direct members' scores (a member suite counts once);
#: rrgs = RRGS over the leaf tasks that are MMLU subjects;
#: mc_or_rc = the better of two members' scores, [MC, RC] in that order, MC on a tie (OLMES's
#: `<task>::olmes`, allenai/olmes oe_eval/tasks/aggregate_tasks.py);
#: size_weighted = lm-eval's `weight_by_size` group score: the direct members' scores weighted by
#: their document counts, with lm-eval's pooled standard error (`pooled_sample_stderr`)
AGGREGATIONS = ("macro", "micro", "member_mean", "rrgs", "mc_or_rc", "size_weighted")


@dataclass(frozen=True)
class Suite:
    """A named group of specs, the aggregations it reports and which one is its headline.

    `primary` None: the members' metrics are not comparable (accuracy beside pass@1), so
    the suite reports each member's own score and no overall number.
    """

    name: str
    members: tuple[str, ...]                  # direct members (task specs or suites)
    aggregations: tuple[str, ...] = ("macro", "micro")
    primary: Optional[str] = "macro"
    #: (member suite, aggregation) where a member suite is scored by other than its primary
    member_aggregation: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        unknown = [a for a in self.aggregations if a not in AGGREGATIONS]
        if unknown or (self.primary is not None and self.primary not in self.aggregations):
            raise ValueError(f"suite {self.name}: aggregations {self.aggregations}, primary "
                             f"{self.primary!r}; known: {AGGREGATIONS}")
        if "mc_or_rc" in self.aggregations and len(self.members) != 2:
            raise ValueError(f"suite {self.name}: mc_or_rc picks between two members (MC, RC), "
                             f"not {len(self.members)}")

    def aggregation_of(self, member: str) -> Optional[str]:
        """Return the aggregation a member suite is scored by here (None: its own primary)."""
        return dict(self.member_aggregation).get(member)
