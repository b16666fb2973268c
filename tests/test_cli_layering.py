"""The library and its presentation code stay apart (issue 19, item 1).

- ``import pymemdb`` and every library module (all of pymemdb/ but the CLI and
  the benchmarks) load without rich or typer: demos, scratch databases and
  tables live under cli/ (installed as ``pymemdb.cli``).
- Every package of the tree is in pyproject's package list, so a non-editable
  ``pip install .`` ships it (an editable install finds any folder and hides a
  forgotten one).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import ROOT

# Walk pymemdb/ (the CLI and the benchmarks are not there: pymemdb.cli is mapped
# from cli/, and pymemdb.bench renders rich tables) and import every module.
_IMPORT_ALL = """
import pkgutil, sys
import pymemdb

def walk(path, prefix):  # pkgutil.walk_packages would import pymemdb.bench to look inside it
    for info in pkgutil.iter_modules(path, prefix):
        if info.name in ("pymemdb.__main__", "pymemdb.bench", "pymemdb.cli"):
            continue
        module = __import__(info.name, fromlist=["_"])
        yield info.name
        if info.ispkg:
            yield from walk(module.__path__, info.name + ".")

names = list(walk(pymemdb.__path__, "pymemdb."))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("rich", "typer"))
print(len(names), " ".join(names))
print("presentation:", " ".join(loaded) or "none")
"""


def test_the_library_imports_without_rich_or_typer() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    modules, presentation = done.stdout.splitlines()
    count, *names = modules.split()
    assert int(count) >= 20 and "pymemdb.memories" in names and "pymemdb.integrations.langgraph" in names, modules
    assert presentation == "presentation: none", f"a library module imports rich or typer: {presentation}"


def test_every_package_of_the_tree_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {"pymemdb": "pymemdb", **config["package-dir"]}
    found = set()
    for package, folder in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if ".venv" in init.parts or "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert {"pymemdb.cli", "pymemdb.cli.demo"} <= listed
