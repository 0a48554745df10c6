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

from collections import Counter
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence

from proctor.harness.library import lm_eval_version

lm_eval_version()  # one line naming the install command when lm-eval is missing

from lm_eval.api.model import LM  # noqa: E402
from lm_eval.utils import simple_parse_args_string  # noqa: E402

from proctor.backends.options import backend_fields  # noqa: E402
from proctor.engine.chat import ChatTemplate, render  # noqa: E402
from proctor.errors import UserError  # noqa: E402
from proctor.harness.task import as_request, lm_eval_response  # noqa: E402
from proctor.requests import Chat, Generate, Message, Request  # noqa: E402
from proctor.runtime import Runtime, session  # noqa: E402
from proctor.version import VERSION  # noqa: E402

#: `proctor.evaluate`'s options that say how the model runs (with every backend's own); the
#: others (limit, num_fewshot, gen_kwargs, output, ...) would do nothing here: lm-eval sets those
RUN_OPTIONS = ("backend", "batch_size", "max_length", "chat_template", "deterministic", "seed", "cache", "progress")
#: what lm-eval's command line passes when the user gave no --batch_size / --device
LM_EVAL_DEFAULTS = {"batch_size": 1, "device": "cuda:0"}


def model_options() -> list[str]:
    """Return the keywords ProctorLM takes besides `model`."""
    return sorted({*RUN_OPTIONS, *backend_fields()})


def lm_eval_settings(additional_config: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """Return proctor's options for lm-eval's own `batch_size` and `device`, where the user chose them.

    lm-eval's command line always passes them, its defaults (1, cuda:0) included, and those
    are no one's choice: they leave the engine's batches and proctor's device (cuda when
    there is one). `auto` is the engine's token budget anyway; `max_batch_size` has no
    proctor meaning.
    """
    out: dict[str, Any] = {}
    batch_size = (additional_config or {}).get("batch_size")
    if isinstance(batch_size, str) and batch_size.isdigit():  # the command line's is text
        batch_size = int(batch_size)
    if isinstance(batch_size, int) and batch_size != LM_EVAL_DEFAULTS["batch_size"]:
        out["batch_size"] = batch_size
    device = (additional_config or {}).get("device")
    if device and device != LM_EVAL_DEFAULTS["device"]:
        out["device"] = device
    return out


def lm_requests(instances: Sequence[Any], kind: str) -> list[Request]:
    """Return each instance's proctor request (`as_request`), aligned with `instances`.

    lm-eval's evaluator hands a generation over once per repeat (the same instance, `repeats`
    times) and wants one text each, so a generation asks for as many samples as it is handed
    over: lm-eval's `repeats` for an evaluator's call (the bridge's request: one cache entry).
    """
    requests = [as_request(i, f"{kind} request {n}") for n, i in enumerate(instances)]
    copies = Counter(_one_text(r) for r in requests)
    return [replace(r, repeats=copies[_one_text(r)]) if isinstance(r, Generate) else r for r in requests]


def _one_text(request: Request) -> str:
    return replace(request, repeats=1).key if isinstance(request, Generate) else request.key


class ProctorLM(LM):
    """An lm-eval model whose requests proctor's engine computes (any backend, the result cache).

    Keywords are `proctor.evaluate`'s model options (`backend`, `batch_size`, `max_length`,
    `dtype`, `device`, `cache`, `chat_template`, ...; `model_options()`). Close it (or use it
    as a context manager) to release the model and the cache.
    """

    def __init__(self, model: Any = "smollm2-135m", **keywords: Any) -> None:
        super().__init__()
        unknown = sorted(set(keywords) - set(model_options()))
        if unknown:
            raise UserError(f"ProctorLM does not take {', '.join(unknown)}; it takes proctor's model options: "
                            f"model, {', '.join(model_options())}")
        self._stack = ExitStack()
        self._runtime: Runtime = self._stack.enter_context(session(model, **keywords))
        self._template: Optional[ChatTemplate] = None

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: Optional[dict] = None) -> "ProctorLM":
        """Build from lm-eval's `--model_args` text (proctor's model options, e.g. `model=...,backend=vllm`).

        lm-eval's own `--batch_size N` and `--device D` count where they are not its defaults
        (`lm_eval_settings`); `batch_size=` and `device=` in --model_args come first.
        """
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: Mapping[str, Any],
                            additional_config: Optional[dict] = None) -> "ProctorLM":
        """Build from a dict of model arguments (lm-eval's `model_args` given as a dict; objects kept)."""
        return cls(**{**lm_eval_settings(additional_config), **arg_dict})

    # ---- the three request types ---------------------------------------------------------

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Return (sum of log-probabilities, is greedy) of each continuation."""
        return self._compute(requests, "loglikelihood")

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Return each text's total log-probability (lm-eval's rolling windows)."""
        return self._compute(requests, "loglikelihood_rolling")

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Return each request's generated text (greedy unless its gen_kwargs ask for sampling).

        The copies of one request (lm-eval's repeats) get different samples when sampling.
        """
        return self._compute(requests, "generate_until")

    def _compute(self, instances: Sequence[Any], kind: str) -> list:
        requests = lm_requests(instances, kind)
        results = self._runtime.engine.results(list({r.key: r for r in requests}.values()))
        handed: Counter[str] = Counter()  # a generation's k-th copy gets its k-th sample
        out = []
        for instance, request in zip(instances, requests):
            responses = lm_eval_response(request, results[request.key])
            response = responses[handed[request.key] % len(responses)]
            handed[request.key] += 1
            out.append(response)
            self.cache_hook.add_partial(kind, instance.args, response)
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

    @property
    def tokenizer(self) -> Any:
        """The backend's tokenizer (lm-eval records its special tokens beside the results)."""
        return self._runtime.backend.tokenizer

    @property
    def max_length(self) -> int:
        """The model's context window in tokens, as the engine uses it."""
        return int(self._runtime.backend.max_length)

    def get_model_info(self) -> dict[str, Any]:
        """Return what lm-eval records about the model in its results' config: proctor's model and backend."""
        return {"proctor_version": VERSION, "proctor_model": self._runtime.model.name,
                "proctor_backend": self._runtime.backend_name, "proctor_backend_config": self._runtime.backend_config()}

    # ---- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the model and close the result cache."""
        self._stack.close()

    def __enter__(self) -> "ProctorLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

