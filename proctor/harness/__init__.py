"""lm-evaluation-harness's own tasks on proctor's engine (`lm_eval:<task>` specs), and proctor as an lm-eval model.

lm-eval is an optional dependency (`pip install 'proctor[lm-eval]'`), imported only when
such a spec is asked for.
"""
