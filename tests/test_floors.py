"""The dependency floors pyproject.toml declares are the ones .ci/run tests.

A ``>=`` floor nobody installs drifts: ``langgraph-checkpoint>=4.0`` allowed
releases the savers could not import, ``typer>=0.12`` releases the CLI could
not start on. .ci/run installs .ci/floors.txt in a second virtual environment
and runs the tests of the code that leans on those libraries; this test keeps
that file pinned to exactly the floors pyproject.toml declares.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# what the floor run installs: the package and the extras its tests need (the bench's
# baseline saver and the optional local embedding model are not part of it)
EXTRAS = ("test", "langgraph", "mcp")


def _floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [*project["dependencies"], *(r for extra in EXTRAS for r in project["optional-dependencies"][extra])]
    floors: dict[str, Version] = {}
    for text in declared:
        requirement = Requirement(text)
        lows = [s.version for s in requirement.specifier if s.operator == ">="]
        assert len(lows) == 1, f"{text}: one '>=' floor, so that .ci/floors.txt can pin it"
        name = canonicalize_name(requirement.name)
        floor = Version(lows[0])
        assert floors.setdefault(name, floor) == floor, f"{name}: two floors in pyproject.toml"
        for extra in sorted(requirement.extras):  # psycopg[binary]: psycopg-binary of the same release
            floors[canonicalize_name(f"{name}-{extra}")] = floor
    return floors


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pin = re.fullmatch(r"([A-Za-z0-9._-]+)==([0-9][0-9A-Za-z.]*)", line)
            assert pin, f"{line!r}: one 'name==version' a line"
            pins[canonicalize_name(pin[1])] = Version(pin[2])
    return pins


def test_floors_txt_pins_every_declared_floor() -> None:
    assert _pins() == _floors()


def test_the_floor_run_is_in_ci() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "-c .ci/floors.txt" in ci
