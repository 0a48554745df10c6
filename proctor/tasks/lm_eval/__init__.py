"""lm-evaluation-harness 0.4.13 formats of the Open LLM Leaderboard (v1): the `::leaderboard` specs.

They are the seed's `slimpajama_dc::leaderboard` table, which runs without lm-eval installed;
every other lm-eval task runs as lm-eval's own (`lm_eval:<task>`, `proctor.harness`). BBH's
lm-eval format is `proctor.tasks.bbh` (OLMES's BBH builds on it).
"""
