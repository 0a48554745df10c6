"""SocialIQA: the xlarge seeded sample, duplicate native ids, reasoning types."""

import gzip
import json
import random
from collections import Counter

import pytest

from proctor.tasks.reasoning_types import REASONING_TYPES, agent_name, reasoning_type
from proctor.tasks.registry import resolve


def raw_docs(data_dir):
    base = data_dir / "social_i_qa" / "socialiqa-train-dev"
    dev = [json.loads(line) for line in (base / "dev.jsonl").read_text().splitlines()]
    with gzip.open(base / "train.jsonl.gz", "rt", encoding="utf-8") as f:
        train = [json.loads(line) for line in f]
    return dev, train


def test_xlarge_is_the_seeded_sample(data_dir):
    dev, train = raw_docs(data_dir)
    assert (len(dev), len(train)) == (1954, 33410)
    docs = [("validation", i) for i in range(len(dev))] + [("train", i) for i in range(len(train))]
    expected = random.Random(1234).sample(docs, 10000)
    assert expected[:5] == [("train", 26929), ("train", 5703), ("validation", 490),
                            ("train", 3986), ("train", 334)]

    task = resolve("socialiqa:mc::xlarge")[0]
    got = [(d["split"], d["native_id"]) for d in task.docs(data_dir)]
    assert got == expected
    instances = task.instances(data_dir)
    assert len(instances) == 10000
    assert [i.doc_id for i in instances] == list(range(10000))
    split, idx = expected[2]
    assert instances[2].prompt.endswith(dev[idx]["context"] + " " + dev[idx]["question"] + "\n"
                                        f" A. {dev[idx]['answerA']}\n B. {dev[idx]['answerB']}\n"
                                        f" C. {dev[idx]['answerC']}\nAnswer:")


def test_xlarge_duplicates_and_query_ids(data_dir):
    task = resolve("socialiqa:mc::xlarge")[0]
    instances = task.instances(data_dir)
    counts = Counter(i.native_id for i in instances)
    repeated = {n for n, c in counts.items() if c > 1}
    # each repeated id occurs once per split, so extra copies == distinct repeated ids == 167
    assert len(repeated) == 167 and sum(c - 1 for c in counts.values() if c > 1) == 167
    ids, dups = task.query_ids(data_dir)
    assert dups == 167
    assert len(set(i.query_id for i in instances)) == 10000
    dup = next(i for i in instances if i.native_id in repeated)
    assert dup.query_id == f"socialiqa:mc::xlarge#{dup.native_id}@{dup.doc_id}"


def test_limit_is_prefix_of_the_spec_list(data_dir):
    task = resolve("socialiqa:mc::xlarge")[0]
    full = task.instances(data_dir)
    head = task.instances(data_dir, limit=7)
    assert head == full[:7]


@pytest.mark.parametrize("bad", [0, -3])
def test_bad_limit(data_dir, bad):
    from proctor.errors import UserError
    with pytest.raises(UserError, match="--limit must be a positive integer"):
        resolve("socialiqa:mc::olmes")[0].instances(data_dir, limit=bad)


def test_olmes_specs_sample_1000_validation(data_dir):
    for spec in ("socialiqa:mc::olmes", "socialiqa:rc::olmes"):
        docs = resolve(spec)[0].docs(data_dir)
        assert len(docs) == 1000 and {d["split"] for d in docs} == {"validation"}
    expected = random.Random(1234).sample(list(range(1954)), 1000)[:3]
    assert [d["native_id"] for d in resolve("socialiqa:mc::olmes")[0].docs(data_dir)[:3]] == expected


@pytest.mark.parametrize("question,context,expected", [
    ("How would Others feel as a result?", "Cameron decided to have a barbecue.", "oReact"),
    ("What will Quinn want to do next?", "Quinn wanted to help me clean my room.", "xWant"),
    ("How would you describe Jan?", "Jan needed to give out jobs.", "xAttr"),
    ("What will Others want to do next?", "Jan needed to give out jobs.", "oWant"),
    ("How would Jan feel afterwards?", "Their cat kept escaping, so Jan placed an obstacle.", "xReact"),
    ("Why did Jan do this?", "Jan used Sasha's language.", "xIntent"),
    ("What does Tracy need to do before this?", "Tracy didn't go home.", "xNeed"),
    ("What will happen to Austin?", "Austin made the announcement.", "xEffect"),
    ("What will happen to Others?", "Alex took money.", "oEffect"),
    ("How would Kai feel as a result?", "Aubrey gave it to Kai's friend.", "oReact"),
    ("What will Addison want to do next?", "Remy gave Addison a glass of wine.", "oWant"),
    ("What did Skylar do?", "Skylar made hot chocolate.", None),
])
def test_reasoning_type_wording(question, context, expected):
    assert reasoning_type(question, context) == expected


def test_agent_name():
    assert agent_name("After school, Riley explained the rules to Jan.") == "riley"
    assert agent_name("remy had a good talk with aubrey") == "remy"


def test_reasoning_type_coverage_on_all_rows(data_dir):
    dev, train = raw_docs(data_dir)
    types = Counter(reasoning_type(r["question"], r["context"]) for r in dev + train)
    assert set(types) - {None} == set(REASONING_TYPES)
    assert types[None] / (len(dev) + len(train)) < 0.006  # 151 of 35,364 at the time of writing



def test_questions_of_one_context_are_one_cluster(data_dir):
    """SocialIQA declares its context passage a cluster: one cluster per context, and back."""
    task = resolve("socialiqa:mc::xlarge")[0]
    contexts_of, clusters_of = {}, {}
    docs = [numbered.doc for numbered in task.numbered_docs(data_dir)]
    for doc in docs:
        cluster = task.doc_metadata(doc)["cluster"]
        clusters_of.setdefault(doc["context"], set()).add(cluster)
        contexts_of.setdefault(cluster, set()).add(doc["context"])
    assert all(len(c) == 1 for c in clusters_of.values()) and all(len(c) == 1 for c in contexts_of.values())
    assert len(contexts_of) < len(docs)   # some contexts carry several questions
