"""Rewrite the outputs of a page's psql transcripts with what they print now (for the lead at merge).

    python -m tests.docs_bless docs/<page>.md [...]      # uses $PYMEMDB_DSN's server, a scratch database

Runs the page as tests/test_docs.py does (tests/docs_runner.py, on a fresh database cloned from a
template where the schema is installed) and, for every transcript step whose printed output no longer
matches, replaces it with the actual output. Steps that still match are kept as written (their masks,
``...`` abridgements and column layout stay). Review the result with ``git diff``: a blessed output is
only right when the change that altered it was meant. Python blocks and skipped blocks are not touched.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pymemdb.install import install
from tests import docs_runner

ROOT = Path(__file__).resolve().parent.parent


def bless(page: str, text: str, dsn: str) -> tuple[str, int]:
    """The page with its mismatching transcript outputs replaced; and how many steps changed."""
    report = docs_runner.run_page(page, text, dsn)
    failed = {(f.block.line, f.step) for f in report.failures if f.block.kind == "transcript"}
    changed = 0
    pieces: list[tuple[int, int, str]] = []
    for match in docs_runner.FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        if not any(key[0] == line for key in failed):
            continue
        indent, body = match.group(1), textwrap.dedent(match.group(3))
        out: list[str] = []
        for number, step in enumerate(docs_runner.steps(body)):
            out += (step.prompt + step.statement).splitlines()
            if (line, number) in failed:
                changed += 1
                out += report.outputs[(line, number)]
                out.append("")
            else:
                out += step.printed
        while out and not out[-1].strip():
            out.pop()
        new = "".join(f"{indent}{row}".rstrip() + "\n" for row in out)
        pieces.append((match.start(3), match.end(3), new))
    for start, end, new in reversed(pieces):
        text = text[:start] + new + text[end:]
    return text, changed


def main(dsn: str, page_paths: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        template = f"docs_bless_{uuid.uuid4().hex[:8]}"
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(template)))
        try:
            install(make_conninfo(dsn, dbname=template))
            for page in page_paths:
                name = f"{template}_{page.replace('/', '_').replace('.', '_')}"[:63]
                admin.execute(sql.SQL("create database {} template {}").format(sql.Identifier(name),
                                                                               sql.Identifier(template)))
                try:
                    path = ROOT / page
                    text, changed = bless(page, path.read_text(encoding="utf-8"), make_conninfo(dsn, dbname=name))
                    path.write_text(text, encoding="utf-8")
                    print(f"{page}: {changed} transcript output(s) rewritten")
                finally:
                    admin.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))
        finally:
            admin.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(template)))


if __name__ == "__main__":
    import os

    main(os.environ["PYMEMDB_DSN"], sys.argv[1:])
