"""Every argument of every public function is checked: a wrong type or value is one `UserError`.

A Hypothesis property per function (`proctor.__all__`'s functions and the runtime's
`session` and `open_tokenizer`): from a call that fails late but cheaply (a model path that
does not exist, a run directory that is not there), one to three arguments are replaced by
values of every kind -- None, booleans, huge ints, floats (NaN too), bytes, text (NUL
characters too), lists, tuples, dicts, and objects whose `__fspath__` gives an int or bytes or
raises, whose `__repr__`, `__len__`, `__eq__` or `__bool__` raises. The call returns or raises
`UserError` naming the argument; never another exception. No model loads: each base call
stops at a check before any.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import proctor
from proctor.runtime import open_tokenizer, session
from run_records import choice_record, run_record, task_record

#: examples per function: 7 functions x EXAMPLES (100) in the full suite, the same ones every run
#: (derandomized); the fast tier (`-m "not slow"`, profile "dev") draws 5 per function;
#: PROCTOR_FUZZ_EXAMPLES=N draws N random ones per function (a deeper local run)
EXAMPLES = int(os.environ.get("PROCTOR_FUZZ_EXAMPLES", min(100, settings().max_examples)))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize="PROCTOR_FUZZ_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class FspathGives:
    def __init__(self, value: object) -> None:
        self.value = value

    def __fspath__(self):
        return self.value

    def __repr__(self) -> str:
        return f"FspathGives({self.value!r})"


class FspathRaises:
    def __fspath__(self):
        raise RuntimeError("__fspath__ of a hostile caller")


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("__repr__ of a hostile caller")

    __str__ = __repr__


class LenRaises(list):
    def __len__(self) -> int:
        raise RuntimeError("__len__ of a hostile caller")


class EqRaises(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__ of a hostile caller")

    __hash__ = str.__hash__


class BoolRaises:
    def __bool__(self) -> bool:
        raise RuntimeError("__bool__ of a hostile caller")


HOSTILE = [FspathGives(7), FspathGives(b"bytes"), FspathGives(None), FspathGives(""), FspathRaises(), ReprRaises(),
           LenRaises(["x"]), EqRaises("auto"), BoolRaises(), object(), Path(""), b"x", bytearray(b"x"), ...,
           print, type, float("nan"), float("inf"), -0.0, 2**64, -1, 0, 1, True, False, None, "", "\0", " ",
           # values some argument takes, in the wrong place
           "hf", "llamacpp", "openai", "vllm", "auto", "cpu", "float32", "mmlu_astronomy:mc::olmes", ("a", "b"), {}]

# text without "/", "~" or "." so that no drawn name is an existing path (the tests run in an empty directory)
names = st.text(st.characters(blacklist_characters="/~.\\", blacklist_categories=("Cs",)), max_size=8)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.binary(max_size=6), names)
values = st.one_of(scalars, st.sampled_from(HOSTILE), st.lists(st.one_of(scalars, st.sampled_from(HOSTILE)), max_size=3),
                   st.tuples(names, names), st.dictionaries(names, scalars, max_size=3),
                   st.builds(FspathGives, st.one_of(scalars, st.sampled_from(HOSTILE))))


class NotATask:
    """What a caller might decorate by mistake."""


def _a_run():
    spec = "mmlu_astronomy:mc::olmes"
    return run_record(task_record(spec, [choice_record(spec, i, 0, [-1.0, -2.0]) for i in range(2)], "choice"))


def call_evaluate(**kw):
    return proctor.evaluate(**kw)


def call_session(**kw):
    with session(**kw):
        pass


def call_task(**kw):
    register = proctor.task(**kw)
    with pytest.raises(proctor.UserError):  # not a Task subclass: refused with the arguments in its message
        register(NotATask)


#: function -> (how the property calls it, the base call's arguments: each fails late, at a UserError)
PUBLIC = {
    "evaluate": (call_evaluate, lambda: {"model": "./no-such-model", "tasks": ["mmlu_astronomy:mc::olmes"],
                                         "progress": False}),
    "read_run": (proctor.read_run, lambda: {"directory": "no-such-run"}),
    "write_run": (proctor.write_run, lambda: {"record": _a_run(), "directory": "run"}),
    "task": (call_task, lambda: {"spec": "fuzzed:mc"}),
    "include": (proctor.include, lambda: {"paths": ["no-such-task-file.yaml"]}),
    "session": (call_session, lambda: {"model": "./no-such-model"}),
    "open_tokenizer": (open_tokenizer, lambda: {"tokenizer": "./no-such-tokenizer"}),
    "load_model": (proctor.load_model, lambda: {"model": "./no-such-model"}),
}
TARGETS = {"evaluate": proctor.evaluate, "read_run": proctor.read_run, "write_run": proctor.write_run,
           "task": proctor.task, "include": proctor.include, "session": session, "open_tokenizer": open_tokenizer,
           "load_model": proctor.load_model}


def parameters(name: str) -> list[str]:
    return [p.name for p in inspect.signature(TARGETS[name]).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)] + (
        # session takes evaluate's keywords (but tasks)
        [p for p in parameters("evaluate") if p not in ("model", "tasks")] if name == "session" else [])


def test_every_public_function_is_fuzzed():
    public = {n for n in proctor.__all__ if callable(getattr(proctor, n)) and not isinstance(getattr(proctor, n), type)}
    assert public | {"session", "open_tokenizer"} == set(PUBLIC)


@pytest.fixture
def empty_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    return tmp_path


@pytest.mark.parametrize("name", list(PUBLIC))
def test_a_wrong_argument_is_one_user_error_naming_it(name, empty_place):
    call, base = PUBLIC[name]

    @SETTINGS
    @given(st.dictionaries(st.sampled_from(parameters(name)), values, min_size=1, max_size=3))
    def prop(replaced):
        try:
            call(**{**base(), **replaced})
        except proctor.UserError:
            pass
        except TypeError as e:  # only Python's own: an argument the function does not take, or a missing one
            assert "argument" in str(e) and ("unexpected keyword" in str(e) or "missing" in str(e)), e

    prop()


@pytest.mark.parametrize("call, says", [
    (lambda: proctor.evaluate("m", tasks=["x"], include=FspathGives(7)), "include (--include) must be a path"),
    (lambda: proctor.evaluate("m", tasks=["x"], data_dir=FspathGives(b"d")), "data_dir (--data-dir) must be a path"),
    (lambda: proctor.evaluate("m", tasks=["x"], chat_template=FspathRaises()), "chat_template must be True, False"),
    (lambda: proctor.evaluate("m", tasks=["x"], output=FspathGives(None)), "output (--output) must be a path"),
    (lambda: proctor.evaluate(FspathGives(7), tasks=["x"]), "model must be a hub id"),
    (lambda: call_session(model="m", chats="yes"), "session(): chats must be True or False, got 'yes'"),
    (lambda: call_session(model="m", result_cache="x"), "session(): result_cache must be a ResultCache or None"),
    (lambda: open_tokenizer(None), "open_tokenizer(): tokenizer must be a path"),
    (lambda: open_tokenizer(7), "open_tokenizer(): tokenizer must be a path"),
    (lambda: open_tokenizer(b"x"), "open_tokenizer(): tokenizer must be a path"),
    (lambda: open_tokenizer(["x"]), "open_tokenizer(): tokenizer must be a path"),
    (lambda: proctor.read_run(None), "read_run(): directory must be a path"),
    (lambda: proctor.write_run("record", "out"), "write_run(): record must be a RunRecord"),
    (lambda: proctor.write_run(_a_run(), "out", overwrite="yes"), "write_run(): overwrite must be True or False"),
    (lambda: proctor.task(7), "task(): spec must be a non-empty string"),
    (lambda: proctor.task("x:mc", num_shots=-1)(NotATask), "decorates a Task subclass"),
    (lambda: proctor.task("x:mc", split=b"test"), "task(): split must be a non-empty string"),
    (lambda: proctor.include(None), "include(): paths must be a path or a list of paths"),
    (lambda: proctor.evaluate("m", tasks=["x"], think_tags=LenRaises(["<a>", "</a>"])), "think_tags (--think-tags) must be"),
    (lambda: proctor.evaluate("m", tasks=["x"], limit=ReprRaises()), "got a ReprRaises object"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_arguments_that_escaped_as_python_errors(call, says, empty_place):
    with pytest.raises(proctor.UserError) as raised:
        call()
    assert says in str(raised.value)


# ---- paths that are there but are not what they must be: said as what they are ----------------


def _special(path: Path, kind: str) -> Path:
    if kind == "directory":
        path.mkdir()
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to(path.parent / "nowhere")
    return path


@pytest.mark.parametrize("kind, says", [("directory", "is a directory, not a .gguf file"),
                                        ("FIFO", "is a FIFO (named pipe), not a .gguf file or a model directory"),
                                        ("dangling link", "is a symbolic link to")])
def test_a_gguf_path_that_is_not_a_file_is_named_as_what_it_is(kind, says, tmp_path):
    from proctor.backends.sources import classify_source

    gguf = _special(tmp_path / "model.gguf", kind)
    with pytest.raises(proctor.UserError) as raised:
        classify_source(str(gguf))
    assert says in str(raised.value) and not str(raised.value).startswith("model directory")


@pytest.mark.parametrize("kind, says", [("directory", "is a directory, not a file"),
                                        ("FIFO", "is a FIFO (named pipe), not a file"),
                                        ("dangling link", "is a symbolic link to")])
def test_a_data_csv_that_is_not_a_file_is_named_as_what_it_is(kind, says, tmp_path):
    from proctor.data.local import mmlu

    (tmp_path / "mmlu" / "test").mkdir(parents=True)
    _special(tmp_path / "mmlu" / "test" / "astronomy_test.csv", kind)
    with pytest.raises(proctor.UserError) as raised:  # a FIFO is not opened: reading it would wait forever
        mmlu(tmp_path, "astronomy", "test")
    assert says in str(raised.value) and "not found" not in str(raised.value)
