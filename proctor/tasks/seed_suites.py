"""The two seed protocols as one spec each.

`slimpajama_dc::leaderboard` — the table of SlimPajama-DC (Shen et al. 2023,
arXiv:2309.10818; seed lm-eval-harness-benchmarks.txt): its six benchmarks in
lm-evaluation-harness formats with the Open LLM Leaderboard (v1) shots — ARC-Challenge
25-shot (acc_norm), HellaSwag 10-shot (acc_norm), MMLU 5-shot (acc), TruthfulQA 0-shot
(mc2; a 6-example primer in every prompt), BIG-bench 0-shot (acc) and HumanEval 0-shot
(greedy pass@1) — the Average over those six (MMLU counts once) and RRGS over the 57
MMLU subjects. MMLU is the leaderboard's mean of the 57 subject accuracies (`macro`), not
lm-eval 0.4's size-weighted group mean. "BigBench" is the nine BIG-bench multiple-choice
tasks proctor has (0-shot, as the seed's 0/5/10/25 shots say), not BIG-Bench-Hard
(3-shot CoT; `bbh:cot::lm_eval`).

`data_attribution::olmo3` — the seed olmes-evaluation-protocol.txt: its one command runs
exactly `socialiqa:mc::xlarge`, `mmlu_social_sciences:mc::olmes`, `mmlu_stem:mc::olmes`
and `gsm8k::olmo3:n8:v2`. The name reads task::variant like every spec: the task is the
seed's protocol (the data-attribution evaluation), the variant the OLMo 3 settings it
matches; no format, since its members mix MC and generation. Accuracy and pass@1 are
not one scale, so it reports each member's own primary score and no overall mean.
"""

from __future__ import annotations

from proctor.tasks.suite import Suite

MMLU_LEADERBOARD = "mmlu::leaderboard"

SLIMPAJAMA_DC = Suite(
    name="slimpajama_dc::leaderboard",
    members=("arc_challenge::leaderboard", "hellaswag::leaderboard", MMLU_LEADERBOARD,
             "truthfulqa_mc2::leaderboard", "bigbench::leaderboard", "humaneval::greedy"),
    aggregations=("member_mean", "rrgs"),
    primary="member_mean",
    member_aggregation=((MMLU_LEADERBOARD, "macro"),),
)

DATA_ATTRIBUTION = Suite(
    name="data_attribution::olmo3",
    members=("socialiqa:mc::xlarge", "mmlu_social_sciences:mc::olmes", "mmlu_stem:mc::olmes",
             "gsm8k::olmo3:n8:v2"),
    aggregations=(),
    primary=None,
)
