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


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for the module: with tiny matrices more threads only add
    synchronisation, and they spin on a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
