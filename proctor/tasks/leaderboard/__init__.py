"""lm-evaluation-harness 0.4.13 formats (the Open LLM Leaderboard settings) as `::leaderboard` specs."""
