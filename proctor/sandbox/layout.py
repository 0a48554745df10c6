"""What of the host a sandbox's root holds: the interpreter's own files, found once.

`root_layout()` asks the interpreter for its stdlib and `ldd` for the shared libraries
of the executable and of every extension module in the stdlib (lib-dynload), so that
any stdlib module a program imports can load. Never site-packages, the project, /etc
or a home directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache


def outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """Return the real paths, without those lying under another of them."""
    dirs = sorted({os.path.realpath(p) for p in paths})
    return tuple(d for d in dirs if not any(d.startswith(k + "/") for k in dirs if k != d))


@dataclass(frozen=True)
class RootLayout:
    """What of the host the sandbox's own root holds, each read-only at its host path."""

    dirs: tuple[str, ...]     # the stdlib and lib-dynload
    files: tuple[str, ...]    # the interpreter and every shared library it or lib-dynload loads
    hidden: tuple[str, ...]   # dirs under `dirs` covered by an empty tmpfs (site-packages)

    def as_job(self) -> dict:
        """Return the layout as a runner's job carries it: lists of paths."""
        return {"dirs": list(self.dirs), "files": list(self.files), "hidden": list(self.hidden)}


_PATHS_PROBE = """
import json, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"sys_path": sys.path, "stdlib": [paths["stdlib"], paths["platstdlib"]],
                  "site": [paths["purelib"], paths["platlib"]]}))
"""


def _shared_libraries(binaries: list[str]) -> set[str]:
    """Every library `ldd` resolves for `binaries`, by the path the loader opens."""
    if not binaries or not shutil.which("ldd"):
        return set()
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True,
                         env={"PATH": os.defpath, "LC_ALL": "C"}).stdout
    libs = set()
    for line in out.splitlines():
        if not line.startswith(("\t", " ")):
            continue   # a "file:" header
        target = line.split("=>", 1)[1] if "=>" in line else line
        path = target.strip().split(" (", 1)[0].strip()
        if path.startswith("/") and os.path.isfile(path):
            libs.add(path)
    return libs


@lru_cache(maxsize=1)
def root_layout() -> RootLayout:
    """Find the interpreter's files: its executable and shared libraries, the stdlib and lib-dynload.

    Never site-packages (nor the project, /etc, /root, ...).
    """
    out = subprocess.run([sys.executable, "-I", "-c", _PATHS_PROBE], capture_output=True, text=True,
                         check=True, env={"PATH": os.defpath})
    probe = json.loads(out.stdout)
    stdlib = {os.path.realpath(p) for p in probe["stdlib"] if os.path.isdir(p)}
    on_path = {os.path.realpath(p) for p in probe["sys_path"] if os.path.isdir(p)}
    dirs = outermost(stdlib | {p for p in on_path if any(p.startswith(d + "/") for d in stdlib)})
    site = {os.path.realpath(p) for p in probe["site"] if os.path.isdir(p)}
    hidden = tuple(sorted(p for p in site if any(p.startswith(d + "/") for d in dirs)))
    extensions = []
    for d in dirs:
        for top, subdirs, names in os.walk(d):
            subdirs[:] = [s for s in subdirs if os.path.join(top, s) not in hidden]
            extensions += [os.path.join(top, n) for n in names if n.endswith(".so")]
    files = {sys.executable, os.path.realpath(sys.executable),
             *_shared_libraries([os.path.realpath(sys.executable), *extensions])}
    files = {f for f in files if not any(f.startswith(d + "/") for d in dirs)}
    return RootLayout(dirs, tuple(sorted(files)), hidden)
