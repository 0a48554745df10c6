"""Entry point of `python -m proctor`: run the command-line interface."""

import os
import sys

# `python -m proctor` puts the current directory first on sys.path, so a `proctor/` there
# that is not this package (a data directory, another checkout) would shadow it: drop that
# entry and any modules imported from it, then import this package's CLI.
_home = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_loaded = sys.modules.get("proctor")
if _loaded is not None and os.path.dirname(os.path.abspath(getattr(_loaded, "__file__", None) or "/")) != \
        os.path.join(_home, "proctor"):
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.getcwd()] + [_home]
    for _name in [m for m in sys.modules if m == "proctor" or m.startswith("proctor.")]:
        del sys.modules[_name]

from proctor.cli import run  # noqa: E402

# vLLM's CPU build starts its engine by spawn, which imports this module again as __mp_main__
if __name__ == "__main__":
    run()
