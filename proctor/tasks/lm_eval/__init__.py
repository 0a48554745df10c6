"""lm-evaluation-harness 0.4.13 formats: the Open LLM Leaderboard settings, and lm-eval's own gsm8k.

The leaderboard settings are the `::leaderboard` specs, and lm-eval's own `gsm8k` is `gsm8k::lm_eval`
(BBH's lm-eval format is `proctor.tasks.bbh`).
"""
