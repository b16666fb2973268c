"""Docs that run (issue 19, item 9): every example of README.md and docs/*.md, verbatim, in order.

Each page runs on a fresh database (a clone of the installed template, as every test's ``dsn``):
its psql transcripts and ``sql`` scripts in one psql-like session, its Python blocks in one
interpreter namespace with ``$PYMEMDB_DSN`` set to that database. Printed output is compared with
what the page shows, volatile values masked. The convention (how a page marks a transcript, a
script, a Python block with its ``text`` output, a skip) and the masks are defined once, at the top
of tests/docs_runner.py. Skipped blocks are listed with their reasons in the test's output (``-s``)
and in the failure message.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from pymemdb import embedded
from tests import docs_bless, docs_reference, docs_runner
from tests.conftest import ROOT

PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
# pages not yet reproducible as printed: strict, so a page that starts passing must leave this list
NOT_YET: set[str] = set()


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="issue 19 item 9"))
                                  if p in NOT_YET else p for p in PAGES])
def test_page_examples_run_as_printed(page: str, dsn: str) -> None:
    report = docs_runner.run_page(page, (ROOT / page).read_text(encoding="utf-8"), dsn)
    skips = [f"  skipped {b.where} ({b.kind}): {b.skip}" for b in report.skipped]
    print(f"{page}: {report.ran} blocks run, {len(report.skipped)} skipped, {report.copied} copies not run",
          *skips, sep="\n")
    assert not report.failures, "\n\n".join(
        [f"{len(report.failures)} example(s) of {page} differ from what they print:",
         *map(docs_runner.describe, report.failures), *skips])


def test_examples_still_run_as_printed_a_year_on() -> None:
    """An example whose output depends on the day it runs passes p_now (or prints no such value).

    The page examples run again in a pytest of their own under libfaketime, 400 days on: the clock
    of that process and of the embedded server it starts. (A store example searched at now() for
    items written at a fixed p_now with a 30-day TTL: it would have failed from 2026-12-31.)
    """
    faketime = shutil.which("faketime")
    if faketime is None:
        if os.environ.get("CI") == "true":
            pytest.fail("faketime is missing (CI=true: .ci/run installs Debian's faketime)")
        pytest.skip("faketime is not installed (Debian: apt-get install faketime)")
    env = {k: v for k, v in os.environ.items() if k != "PYMEMDB_TEST_DSN"}  # its own server, its clock moved too
    with tempfile.TemporaryDirectory(prefix="pymemdb-docs-year-on-") as base:
        try:
            done = subprocess.run(
                [faketime, "-f", "+400d", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 f"--basetemp={base}", "tests/test_docs.py::test_page_examples_run_as_printed"],
                cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900)
        finally:  # a timeout kills that pytest, not the server it started (its session fixture's folder)
            for server in Path(base).glob("embedded*"):
                embedded.stop(server)
    assert done.returncode == 0, f"400 days on, the examples differ:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"


def test_convention_recognises_blocks() -> None:
    text = "\n".join(["```", "=> select 1 as n;", " n", "---", " 1", "```",
                      "<!-- docs-test: skip needs pg_cron -->", "```sql", "select cron.schedule();", "```",
                      "```python", "print(2)", "```", "```text", "2", "```"])
    blocks = docs_runner.parse("t.md", text)
    assert [b.kind for b in blocks] == ["transcript", "script", "python", "text"]
    assert blocks[1].skip == "needs pg_cron" and blocks[2].expected is blocks[3]
    copied = docs_runner.parse("r.md", "<!-- docs-test: copy of docs/vm.md#faults -->\n```\n=> select 1;\n```\n")
    assert copied[0].kind == "transcript" and copied[0].copy == "docs/vm.md#faults"
    assert docs_runner.matches([" id | at", "----+----", " 7 | 2026-01-01 10:00:00+00", "(1 row)"],
                               [" id |           at", "----+------------------------", " 7 | 2026-11-25 12:00:01.5+00"])
    assert docs_runner.matches(['{"a": 1, ...}'], ['{"a": 1, "b": 2}'])
    assert not docs_runner.matches([" 8"], [" 7"])


def test_reference_is_generated(dsn: str) -> None:
    """docs/reference.md is what tests/docs_reference.py makes of the current catalog and pages."""
    with psycopg.connect(dsn) as conn:
        expected, _ = docs_reference.generate(conn)
    actual = (ROOT / docs_reference.REFERENCE).read_text(encoding="utf-8")
    diff = list(difflib.unified_diff(actual.splitlines(), expected.splitlines(), "docs/reference.md", "generated",
                                     lineterm="", n=1))
    assert not diff, f"docs/reference.md is stale: regenerate it with {docs_reference.COMMAND}\n" + "\n".join(
        diff[:60])


def test_every_public_function_has_an_example(dsn: str) -> None:
    """Each public function is called in a transcript the docs test runs (its reference entry copies it)."""
    with psycopg.connect(dsn) as conn:
        _, functions = docs_reference.generate(conn)
    missing = sorted(f"{f.name} ({f.source})" for f in functions if f.example is None)
    assert not missing, (f"{len(missing)} public function(s) have no psql example in README.md or docs/*.md "
                         "(add a transcript to the concern page, then regenerate docs/reference.md): "
                         + ", ".join(missing))


def test_every_parameter_is_described(dsn: str) -> None:
    """Each parameter of each public function says what it means: in the function's source in sql/
    (``-- p_name: ...`` above it, or a trailing comment), a page's table, or the shared table of
    docs/sql-api.md (p_now, p_user_id, p_session_id)."""
    with psycopg.connect(dsn) as conn:
        _, functions = docs_reference.generate(conn)
    missing = sorted(f"{f.name}.{p.name} ({f.source})" for f in functions for p in f.params if not p.description)
    assert not missing, (f"{len(missing)} parameter(s) have no description (write `-- p_name: what it is` above "
                         "the function in sql/, then regenerate docs/reference.md): " + ", ".join(missing[:80]))


def test_copies_are_only_in_the_reference() -> None:
    """A copy mark skips a block: only the generated reference may use it (its copies run on their page)."""
    for page in PAGES:
        if page != docs_reference.REFERENCE:
            copies = [b.where for b in docs_runner.parse(page, (ROOT / page).read_text(encoding="utf-8")) if b.copy]
            assert not copies, f"docs-test copy marks outside {docs_reference.REFERENCE}: {copies}"


def test_bless_rewrites_only_the_outputs_that_changed(dsn: str) -> None:
    """tests.docs_bless: a step that still matches keeps its text (masks, abridgements); a stale one gets the output."""
    page = "\n".join(["# t", "", "```", "=> select now() as at, 1 as n;", "  at  | n", "------+---",
                      " 2020-01-01 00:00:00+00 | 1", "", "=> select 2 as n;", " n", "---", " 3", "```", "", "end"])
    blessed, changed = docs_bless.bless("t.md", page, dsn)
    assert changed == 1
    assert " 2020-01-01 00:00:00+00 | 1" in blessed and " 3\n" not in blessed and blessed.endswith("```\n\nend")
    assert "=> select 2 as n;\n n\n---\n 2\n(1 row)\n```" in blessed
    assert not docs_runner.run_page("t.md", blessed, dsn).failures
