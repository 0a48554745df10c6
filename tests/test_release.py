"""scripts/release.sh on a throwaway git repository laid out like this one."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    (repo / "scripts").mkdir(parents=True)
    (repo / "proctor").mkdir()
    shutil.copy(REPO / "scripts" / "release.sh", repo / "scripts" / "release.sh")
    (repo / "proctor" / "version.py").write_text('VERSION = "0.1.0"\n')
    (repo / "CHANGELOG.md").write_text(
        "# Changelog\n\n## Unreleased\n\n### Added\n- Phonebook.\n\n## v0.1.0 - 2026-01-01\n\n- First.\n"
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "t")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "init")
    git(repo, "tag", "-a", "v0.1.0", "-m", "v0.1.0")
    return repo


def release(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/release.sh"], cwd=repo, capture_output=True, text=True)


def bump(repo: Path, version: str) -> None:
    (repo / "proctor" / "version.py").write_text(f'VERSION = "{version}"\n')


def test_release_commits_changelog_and_version_then_tags(project: Path):
    bump(project, "0.2.0")
    done = release(project)
    assert done.returncode == 0, done.stderr
    assert "no 'origin' remote" in done.stdout
    assert git(project, "tag", "--list", "v0.2.0").strip() == "v0.2.0"
    assert git(project, "log", "-1", "--format=%s").strip() == "Release v0.2.0"
    assert set(git(project, "show", "--name-only", "--format=", "HEAD").split()) == {
        "CHANGELOG.md", "proctor/version.py"}
    assert git(project, "status", "--porcelain") == ""
    log = (project / "CHANGELOG.md").read_text()
    # a fresh, empty Unreleased section above the release's own section, which keeps the notes
    assert re.search(r"## Unreleased\n\n## v0\.2\.0 - \d{4}-\d{2}-\d{2}\n\n### Added\n- Phonebook\.\n", log)
    assert log.count("## v0.1.0") == 1


def test_release_refuses_an_existing_tag(project: Path):
    done = release(project)  # VERSION is still 0.1.0, already tagged
    assert done.returncode != 0
    assert "tag v0.1.0 already exists; bump VERSION" in done.stderr
    assert git(project, "log", "-1", "--format=%s").strip() == "init"


def test_release_refuses_other_uncommitted_changes(project: Path):
    bump(project, "0.2.0")
    (project / "scripts" / "release.sh").write_text((project / "scripts" / "release.sh").read_text() + "\n")
    done = release(project)
    assert done.returncode != 0 and "uncommitted changes besides" in done.stderr
    assert git(project, "tag", "--list", "v0.2.0") == ""


def test_release_refuses_an_empty_unreleased_section(project: Path):
    (project / "CHANGELOG.md").write_text("# Changelog\n\n## Unreleased\n\n## v0.1.0 - 2026-01-01\n- First.\n")
    git(project, "commit", "-qam", "empty")
    bump(project, "0.2.0")
    done = release(project)
    assert done.returncode != 0 and "'## Unreleased' section of CHANGELOG.md is empty" in done.stderr
    assert git(project, "tag", "--list", "v0.2.0") == ""


def test_release_refuses_a_malformed_version(project: Path):
    bump(project, "two")
    done = release(project)
    assert done.returncode != 0 and "is not a version like 1.2.3" in done.stderr


def test_package_version_comes_from_version_file():
    import proctor
    from proctor.version import VERSION

    assert proctor.__version__ == VERSION
    assert 'attr = "proctor.version.VERSION"' in (REPO / "pyproject.toml").read_text()
