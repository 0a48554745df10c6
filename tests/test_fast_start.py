"""`proctor --help` and `proctor tasks` answer without importing torch or transformers."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from proctor.cli import main
try:
    main({args!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "transformers", "datasets", "pyarrow") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["tasks"], ["tasks", "mmlu_stem"]])
def test_light_commands_import_no_heavy_library(args):
    done = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="
