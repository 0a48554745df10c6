"""The HTML report (`proctor.report.html`, laying out `proctor.report.analysis`): its sections
and charts from real small runs, its inlined data, that model text cannot break out of it,
that it loads nothing from the network, how it is written, and that a run of 10,000 items
renders."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

import pytest

import proctor
from proctor.outputs.run_dir import open_run
from proctor.outputs.records import GenerationRecord, QueryMetadata, RunConfig, SampleOutput
from proctor.report.analysis import NOT_SAVED, reliability, shared_prefix, task_family
from proctor.report.html import read_run_prompts, render_report, write_report
from run_records import choice_record, run_record, task_record
from tinylm import build_tiny_model

ALGEBRA, ANATOMY = "mmlu_abstract_algebra:mc::olmes", "mmlu_anatomy:mc::olmes"
GSM8K, C4 = "gsm8k::olmes", "c4_en::bpb"
CHOICE_SPECS = [ALGEBRA, ANATOMY, "socialiqa::olmes"]          # the suite: socialiqa MC and RC
HOSTILE = "</script><script>alert(1)</script><!-- <script>"


def make_run(model: Path, output: Path, specs: list[str], limit: int, data_dir: Path, *, save_requests: bool) -> Path:
    """A run of a tiny random model (a short window keeps it fast; its scores mean nothing)."""
    proctor.evaluate(str(model), tasks=specs, limit=limit, data_dir=data_dir, progress=False, max_length=600,
                     output=output, save_requests=save_requests, cache=False)
    return output


class Page(HTMLParser):
    """What a test needs of a report: every tag's attributes, the text of each script and of
    each table's body rows, the sections and the charts."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, Optional[str]]]] = []
        self.scripts: list[tuple[dict[str, Optional[str]], str]] = []
        self.rows: dict[str, int] = {}
        self._script: Optional[dict[str, Optional[str]]] = None
        self._tables: list[str] = []
        self._in_body = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "script":
            self._script = attributes
            self.scripts.append((attributes, ""))
        elif tag == "table":
            self._tables.append(attributes.get("id") or "")
            self.rows.setdefault(self._tables[-1], 0)
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._tables:
            self.rows[self._tables[-1]] += 1

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None
        elif tag == "table" and self._tables:
            self._tables.pop()
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data):
        if self._script is not None:
            attributes, text = self.scripts[-1]
            self.scripts[-1] = (attributes, text + data)

    def json(self, script_id: str):
        return json.loads(next(text for attrs, text in self.scripts if attrs.get("id") == script_id))

    def charts(self) -> list[str]:
        return [a["data-chart"] for tag, a in self.tags if tag == "div" and "chart" in (a.get("class") or "").split()]

    def sections(self) -> list[str]:
        return [a["id"] for tag, a in self.tags if tag == "section"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir, one_torch_thread):
    """A: choice tasks, the SocialIQA suite, GSM8K and C4, requests saved; B: the choice tasks
    with other weights, no requests saved."""
    root = tmp_path_factory.mktemp("report")
    a = make_run(build_tiny_model(root / "model-a", seed=0), root / "run-a", [*CHOICE_SPECS, GSM8K, C4], 3,
                 data_dir, save_requests=True)
    b = make_run(build_tiny_model(root / "model-b", seed=1), root / "run-b", CHOICE_SPECS, 3, data_dir,
                 save_requests=False)
    return a, b


@pytest.fixture(scope="module")
def pair_report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report.html"
    write_report(list(runs), out)
    return out, Page(out.read_text(encoding="utf-8"))


def test_a_report_of_two_runs_has_every_section_chart_and_table(pair_report, runs):
    out, page = pair_report
    a, b = proctor.read_run(runs[0]), proctor.read_run(runs[1])
    assert page.sections() == ["scores-section", "paired-section", "flips-section", "breakdown-section",
                               "calibration-section", "generation-section", "items-section", "runs-section"]
    assert page.charts() == ["scores", "paired", "breakdown:mmlu:mc::olmes", "breakdown:socialiqa:mc::olmes",
                             "breakdown:socialiqa:rc::olmes", "calibration", "finish-reasons"]
    charts = page.json("report-charts")
    assert set(charts["figures"]) == set(page.charts()) and charts["config"]["displaylogo"] is False
    assert page.rows["tasks"] == len(a.tasks) == 6
    assert page.rows["specs"] == 5 + 2                      # five specs, the suite's two members
    assert page.rows["paired"] == len(b.tasks) == 4          # the tasks both runs scored
    assert page.rows["generation"] == 1                      # GSM8K, in A only
    assert page.rows["provenance"] > 10
    data = page.json("report-data")
    assert data["runs"] == ["A", "B"] and len(data["items"]) == sum(len(t.records) for t in a.tasks.values())
    flipped = {(t, r.query_id) for t in b.tasks for r in a.tasks[t].records
               if r.metric_value(a.tasks[t].primary_metric)
               != next(x for x in b.tasks[t].records if x.query_id == r.query_id).metric_value(a.tasks[t].primary_metric)}
    assert {(data["tasks"][data["items"][i]["t"]]["name"], data["items"][i]["q"]) for i in data["flips"]} == flipped
    assert "flipped only" in out.read_text(encoding="utf-8")


def test_items_carry_their_prompts_choices_and_samples(pair_report):
    data = Page(pair_report[0].read_text(encoding="utf-8")).json("report-data")
    tasks = {t["name"]: t for t in data["tasks"]}
    assert all(t["saved"] for t in tasks.values())          # A saved its requests: every task has prompts
    algebra = next(i for i in data["items"] if data["tasks"][i["t"]]["name"] == ALGEBRA)
    prefix = tasks[ALGEBRA]["prefix"]
    assert prefix.startswith("The following are multiple choice questions") and "Question:" in algebra["x"]
    assert algebra["c"] == [" A", " B", " C", " D"] and algebra["gi"] in range(4)
    assert [len(r["lp"]) for r in algebra["r"]] == [4, 4]    # both runs' log-probabilities
    gsm = next(i for i in data["items"] if data["tasks"][i["t"]]["name"] == GSM8K)
    assert gsm["r"][1] is None and gsm["r"][0]["o"][0]["f"] in ("stop", "eos", "length")
    assert gsm["g"] and "e" in gsm["r"][0]["o"][0]             # the gold, and what GSM8K extracted
    c4 = next(i for i in data["items"] if data["tasks"][i["t"]]["name"] == C4)
    assert c4["g"] is None and c4["x"] and c4["r"][0]["tok"] > 0 and c4["r"][0]["s"] > 0   # its text, its bpb


def test_prompts_are_read_from_requests_jsonl_as_the_model_saw_them(tmp_path):
    run = run_record(task_record(ALGEBRA, [choice_record(ALGEBRA, i, 0, [-1.0, -2.0]) for i in range(3)], "choice"),
                     task_record(ANATOMY, [choice_record(ANATOMY, 0, 0, [-1.0, -2.0])], "choice"))
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]}
    rows = [
        {"query_id": f"{ALGEBRA}#0", "uncond": False, "idx": 0, "request": {"context": chat, "continuation": " 4"}},
        {"query_id": f"{ALGEBRA}#0", "uncond": False, "idx": 1, "request": {"context": chat, "continuation": " 5"}},
        {"query_id": f"{ALGEBRA}#0", "uncond": True, "idx": 0, "request": {"context": "Answer:", "continuation": " 4"}},
        {"query_id": f"{ALGEBRA}#1", "uncond": False, "idx": 0,
         "request": {"context": chat, "rendered_context": "<|user|>2 + 2?", "continuation": " 4"}},
    ]
    (tmp_path / "mmlu_abstract_algebra-mc-olmes").mkdir()
    (tmp_path / "mmlu_abstract_algebra-mc-olmes" / "requests.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "mmlu_anatomy-mc-olmes").mkdir()
    (tmp_path / "mmlu_anatomy-mc-olmes" / "requests.jsonl").write_text("{not json\n")
    (tmp_path / "metrics.json").write_text("{}")  # requests files of one's own: no manifest vouches for them
    prompts = read_run_prompts(open_run(tmp_path, allow_edited=True), run)
    assert set(prompts) == {ALGEBRA}                            # an unreadable file: as if not saved
    assert prompts[ALGEBRA][f"{ALGEBRA}#0"].context == "[system]\nBe brief.\n\n[user]\n2 + 2?"
    assert prompts[ALGEBRA][f"{ALGEBRA}#0"].choices == (" 4", " 5")   # the unconditional request left out
    assert prompts[ALGEBRA][f"{ALGEBRA}#1"].context == "<|user|>2 + 2?"
    data = Page(render_report([run], ["r"], prompts=prompts)).json("report-data")
    assert [i["x"] for i in data["items"][:3]] == ["[system]\nBe brief.\n\n[user]\n2 + 2?", "<|user|>2 + 2?", None]


def test_a_run_without_saved_requests_says_how_to_save_them(runs, tmp_path):
    write_report([runs[1]], tmp_path / "b.html")
    page = Page((tmp_path / "b.html").read_text(encoding="utf-8"))
    data = page.json("report-data")
    assert not any(t["saved"] for t in data["tasks"]) and data["notSaved"] == NOT_SAVED
    assert "--save-requests" in NOT_SAVED
    assert "paired-section" not in page.sections() and "flips-section" not in page.sections()
    assert "generation-section" not in page.sections() and data["flips"] is None


def test_the_report_loads_nothing_from_the_network(pair_report):
    out, page = pair_report
    for tag, attributes in page.tags:
        for name, value in attributes.items():
            if name in ("src", "href", "action", "srcset", "poster", "data") and value:
                assert not re.match(r"\s*(https?:)?//", value), (tag, name, value)
    policy = next(a["content"] for tag, a in page.tags if a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in policy and "http" not in policy
    executable = [a for a, _ in page.scripts if a.get("type") != "application/json"]
    assert len(executable) == 2 and not any("src" in a for a in executable)   # plotly.js (packed) and page.js
    assert sum("Plotly" in text for _, text in page.scripts) >= 1


def test_hostile_model_text_stays_inert_data(tmp_path):
    records = [GenerationRecord(f"{GSM8K}#0", 0, 0, {"exact_match": 0.0},
                                (SampleOutput(HOSTILE + " \u2028 & \ud800", 5, "length", {"extracted": HOSTILE}),),
                                HOSTILE)]
    task = task_record(GSM8K, records, "generation")
    task = dataclasses.replace(task, sidecar=(QueryMetadata(f"{GSM8K}#0", "gsm8k", None, None, False, HOSTILE,
                                                            HOSTILE, GSM8K, 0),))
    run = run_record(task)
    text = render_report([run], [f"run {HOSTILE}"])
    assert HOSTILE not in text and "alert(1)</script>" not in text
    page = Page(text)
    assert len(page.scripts) == 4                             # two JSON blocks, two scripts: no injected one
    item = page.json("report-data")["items"][0]
    assert item["g"] == HOSTILE and item["r"][0]["o"][0]["text"].startswith(HOSTILE)
    assert item["r"][0]["o"][0]["e"] == HOSTILE


def test_written_atomically_and_never_over_a_file_proctor_did_not_write(runs, tmp_path):
    out = tmp_path / "report.html"
    out.write_text("my notes\n")
    with pytest.raises(proctor.UserError, match="proctor did not write it"):
        write_report([runs[1]], out)
    assert out.read_text() == "my notes\n"
    own = tmp_path / "own.html"
    write_report([runs[1]], own)
    first = own.read_bytes()
    with pytest.raises(proctor.UserError, match="overwrite"):
        write_report([runs[1]], own)
    assert own.read_bytes() == first
    write_report([runs[0], runs[1]], own, overwrite=True)
    assert own.read_bytes() != first and b"paired-section" in own.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own.html", "report.html"]   # no manifest beside them
    own.write_text(own.read_text(encoding="utf-8") + "<!-- edited -->", encoding="utf-8")
    with pytest.raises(proctor.UserError, match="changed since"):
        write_report([runs[1]], own, overwrite=True)


def test_bad_inputs_are_user_errors(runs, tmp_path):
    with pytest.raises(proctor.UserError, match="not a finished run directory"):
        write_report([tmp_path], tmp_path / "r.html")
    with pytest.raises(proctor.UserError, match="cluster by"):
        write_report([runs[1]], tmp_path / "r.html", cluster_by="colour")
    with pytest.raises(proctor.UserError, match="at least one"):
        write_report([], tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_cluster_by_is_named_beside_the_intervals(runs, tmp_path):
    write_report([runs[0]], tmp_path / "r.html", cluster_by="subject")
    assert "as are documents sharing a subject)" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_a_series_of_runs_gets_score_curves():
    def run(seed: int):
        return run_record(task_record(ALGEBRA, [choice_record(ALGEBRA, i, (i + seed) % 2, [-1.0, -2.0])
                                                for i in range(6)], "choice"))

    page = Page(render_report([run(0), run(1), run(2)], ["s0", "s1", "s2"]))
    assert "curves" in page.charts() and "curves-section" in page.sections()
    curves = page.json("report-charts")["figures"]["curves"]
    assert curves["data"][0]["x"] == ["A: s0", "B: s1", "C: s2"]


@pytest.mark.skipif("labels" not in {f.name for f in dataclasses.fields(RunConfig)}, reason="no run labels yet")
def test_curves_follow_the_step_label():
    def run(step: str, seed: int):
        record = run_record(task_record(ALGEBRA, [choice_record(ALGEBRA, i, (i + seed) % 2, [-1.0, -2.0])
                                                  for i in range(6)], "choice"))
        return dataclasses.replace(record, run_config=dataclasses.replace(record.run_config, labels={"step": step}))

    page = Page(render_report([run("2000", 0), run("500", 1)], ["late", "early"]))
    curves = page.json("report-charts")["figures"]["curves"]
    assert curves["data"][0]["x"] == [500.0, 2000.0]


def test_ten_thousand_items_render_as_data_not_dom(tmp_path):
    records = [choice_record(ALGEBRA, i, i % 4, [-1.0 - (i % 3), -2.0, -1.5, -3.0], label=i % 3) for i in range(10_000)]
    task = task_record(ALGEBRA, records, "choice")
    task = dataclasses.replace(task, sidecar=tuple(dataclasses.replace(row, subject=f"s{i % 7}")
                                                   for i, row in enumerate(task.sidecar)))
    text = render_report([run_record(task), run_record(task)], ["one", "two"])
    page = Page(text)
    data = page.json("report-data")
    assert len(data["items"]) == 10_000 and data["flips"] == []
    assert page.rows["items"] == 0 and "flips" not in page.rows   # rows are built by the page's script
    assert len(page.charts()) < 10                            # one figure per chart, none per item
    assert len(text) < 12_000_000


def test_helpers():
    assert task_family(task_record(ANATOMY, [], "choice")) == "mmlu:mc::olmes"
    assert task_family(task_record(GSM8K, [], "generation")) == "gsm8k::olmes"
    bins, ece = reliability([(0.95, True), (0.95, True), (0.55, False), (0.55, True)])
    assert [(b.n, b.correct) for b in bins] == [(2, 1), (2, 2)]
    assert ece == pytest.approx(0.5 * abs(0.5 - 0.55) + 0.5 * abs(1.0 - 0.95))
    shared = "Instructions\n\nQ: 1 + 1\nA: 2\n\n" * 4
    assert shared_prefix([shared + "Q: 2 + 2", shared + "Q: 3 + 3"]) == shared
    assert shared_prefix(["short\nQ: a", "short\nQ: b"]) == ""
