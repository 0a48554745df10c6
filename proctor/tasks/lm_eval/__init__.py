"""lm-evaluation-harness 0.4.13 formats: the Open LLM Leaderboard settings as `::leaderboard`
specs, and lm-eval's own `gsm8k` as `gsm8k::lm_eval` (BBH's lm-eval format is `proctor.tasks.bbh`)."""
