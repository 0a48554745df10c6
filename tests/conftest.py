import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """Real benchmark data: $PROCTOR_TEST_DATA, else ../shared/data beside the repo."""
    return Path(os.environ.get("PROCTOR_TEST_DATA", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if not (path / "mmlu").is_dir():
        pytest.fail(f"real test data not found at {path}; set PROCTOR_TEST_DATA")
    return path
