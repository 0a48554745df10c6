"""Importing the transformers backend skips scikit-learn and scipy, and transformers loses no name for it."""

import importlib.util
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None or importlib.util.find_spec("scipy") is None,
    reason="needs scikit-learn and scipy installed (the packages the import skips)")

# Run in a fresh interpreter: this one may have imported either package already.
_CHECK = r"""
import json, re, sys, types
import proctor.backends.hf  # the transformers backend, as `proctor run` imports it
from proctor.backends.tokenizers import load_tokenizer  # noqa: F401
skipped = [name for name in ("sklearn", "scipy") if name in sys.modules]
# every name a loaded transformers module imports from either package at its top level
# (under `if is_..._available():`) must be there, as without proctor
pattern = re.compile(r"^    from (sklearn|scipy)[\w.]* import ([\w, ]+)$", re.M)
missing, deferred = [], []
for module_name, module in list(sys.modules.items()):
    # plain modules only: reading a lazy one (a model package) would import what it names
    if not module_name.startswith("transformers.") or type(module) is not types.ModuleType:
        continue
    origin = getattr(module.__spec__, "origin", None)
    if not origin or not origin.endswith(".py"):
        continue
    source = open(origin, encoding="utf-8").read()
    for _, names in pattern.findall(source):
        for name in (n.strip() for n in names.split(",")):
            (deferred if hasattr(module, name) else missing).append(f"{module_name}.{name}")
from transformers.generation import candidate_generator
from transformers.loss import loss_for_object_detection
import numpy as np
roc = candidate_generator.roc_curve([0, 1, 1], [0.1, 0.4, 0.8])
cost = np.array([[4.0, 1.0], [2.0, 0.0]])
rows, cols = loss_for_object_detection.linear_sum_assignment(cost)
from sklearn.metrics import roc_curve
from scipy.optimize import linear_sum_assignment
same = (all(np.array_equal(a, b) for a, b in zip(roc, roc_curve([0, 1, 1], [0.1, 0.4, 0.8])))
        and all(np.array_equal(a, b) for a, b in zip((rows, cols), linear_sum_assignment(cost))))
print(json.dumps({"imported": skipped, "missing": missing, "deferred": deferred, "same": bool(same)}))
"""


def test_the_backend_imports_without_sklearn_or_scipy_and_their_names_still_work():
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["imported"] == []
    assert found["missing"] == []
    assert "transformers.generation.candidate_generator.roc_curve" in found["deferred"]
    assert found["same"]


def test_sklearn_stays_importable_after_the_backend():
    code = ("import proctor.backends.hf, sys; import sklearn.metrics, scipy.optimize; "
            "print(sys.modules['sklearn'] is not None and sys.modules['scipy'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
