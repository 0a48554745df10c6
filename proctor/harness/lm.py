"""proctor as an lm-eval model: `ProctorLM`, an `lm_eval.api.model.LM` that computes on proctor's engine.

An lm-eval user's own script runs on proctor's engine, backends and result cache with one
change::

    from proctor.harness.lm import ProctorLM
    lm_eval.simple_evaluate(model=ProctorLM(model="smollm2-135m"), tasks=["arc_easy"])

and lm-eval's command line through `proctor lm-eval` (`proctor.harness.cli`), which registers
the model under the name `proctor`::

    proctor lm-eval run --model proctor --model_args model=smollm2-135m,backend=vllm --tasks arc_easy

Every call's instances become proctor requests exactly as the bridge makes them
(`proctor.harness.task.as_request`: lm-eval's tokenization policy, HFLM's reading of
gen_kwargs) and are computed in one engine call, so duplicates are computed once, batches
are the engine's, and results come from (and go to) the result cache.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Optional, Sequence

from proctor.harness.library import lm_eval_version

lm_eval_version()  # one line naming the install command when lm-eval is missing

from lm_eval.api.model import LM  # noqa: E402
from lm_eval.utils import simple_parse_args_string  # noqa: E402

from proctor.engine.chat import ChatTemplate, render  # noqa: E402
from proctor.errors import UserError  # noqa: E402
from proctor.harness.task import as_request, lm_eval_response  # noqa: E402
from proctor.options import all_fields  # noqa: E402
from proctor.requests import Chat, Message  # noqa: E402
from proctor.runtime import Runtime, session  # noqa: E402


class ProctorLM(LM):
    """An lm-eval model whose requests proctor's engine computes (any backend, the result cache).

    Keywords are `proctor.evaluate`'s model options (`backend`, `batch_size`, `max_length`,
    `dtype`, `device`, `cache`, `chat_template`, ...). Close it (or use it as a context manager)
    to release the model and the cache.
    """

    def __init__(self, model: Any = "smollm2-135m", **keywords: Any) -> None:
        super().__init__()
        known = set(all_fields()) - {"tasks", "model"}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise UserError(f"ProctorLM does not take {', '.join(unknown)}; it takes proctor's model options: "
                            f"{', '.join(sorted(known))}")
        self._stack = ExitStack()
        self._runtime: Runtime = self._stack.enter_context(session(model, **keywords))
        self._template: Optional[ChatTemplate] = None
        self._rank, self._world_size = 0, 1

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: Optional[dict] = None) -> "ProctorLM":
        """Build from lm-eval's `--model_args` text (proctor's model options, e.g. `model=...,backend=vllm`).

        lm-eval's own `--batch_size` and `--device` are not used: their defaults (1, cuda:0) are
        not choices a user made. proctor's engine sizes its batches and picks the device;
        `batch_size=N` and `device=...` in --model_args set them.
        """
        return cls(**simple_parse_args_string(arg_string))

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: Optional[dict] = None) -> "ProctorLM":
        """Build from a dict of model arguments (lm-eval's `model_args` given as a dict)."""
        return cls.create_from_arg_string(",".join(f"{k}={v}" for k, v in arg_dict.items()), additional_config)

    # ---- the three request types ---------------------------------------------------------

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Return (sum of log-probabilities, is greedy) of each continuation."""
        return [r[0] for r in self._compute(requests, "loglikelihood")]

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Return each text's total log-probability (lm-eval's rolling windows)."""
        return [r[0] for r in self._compute(requests, "loglikelihood_rolling")]

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Return each request's generated text (greedy unless its gen_kwargs ask for sampling)."""
        return [r[0] for r in self._compute(requests, "generate_until")]

    def _compute(self, instances: Sequence[Any], kind: str) -> list[list]:
        requests = [as_request(i, f"{kind} request {n}") for n, i in enumerate(instances)]
        results = self._runtime.engine.results(list({r.key: r for r in requests}.values()))
        out = []
        for instance, request in zip(instances, requests):
            response = lm_eval_response(request, results[request.key])
            out.append(response)
            self.cache_hook.add_partial(kind, instance.args, response[0])
        return out

    # ---- chat ------------------------------------------------------------------------------

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """Render messages as HFLM does.

        The tokenizer's template (or `chat_template`'s file), the system role dropped when the
        template refuses it, the last message continued when there is no generation prompt.
        """
        chat = Chat(tuple(Message(m["role"], m["content"]) for m in chat_history),
                    continue_final=not add_generation_prompt)
        return render(chat, self._chat_template(), self._runtime.backend.tokenizer, drop_system_on_error=True)

    def _chat_template(self) -> ChatTemplate:
        if self._template is None:
            self._template = ChatTemplate.resolve(self._runtime.options.template_file, self._runtime.backend.tokenizer)
        return self._template

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer's name, as lm-eval fingerprints request caches with it."""
        return str(getattr(self._runtime.backend.tokenizer, "name_or_path", "")).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> Optional[str]:
        """Return the chat template's source (lm-eval records it beside the results)."""
        return self._chat_template().source if chat_template else None

    # ---- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the model and close the result cache."""
        self._stack.close()

    def __enter__(self) -> "ProctorLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

