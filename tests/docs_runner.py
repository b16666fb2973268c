"""Run the examples of a Markdown page and compare their output (issue 19, item 9).

How a page marks its blocks (the docs-test convention):

- **Transcript**: a fenced block (no language, ``sql`` or ``psql``) whose first line starts with a psql
  prompt (``=> ``, ``=# ``, ``alice=> ``, ``mydb=# ``). Each prompt line starts a statement; indented lines
  after it continue the statement until a line ends with ``;`` or a meta-command (``\\gset``). The lines up
  to the next prompt are what psql printed. Meta-commands understood: ``\\x`` (expanded on/off),
  ``\\pset format aligned|unaligned``, ``\\gset`` (sets ``:name`` variables for later statements).
- **Script**: a ```` ```sql ```` block without prompts. Its statements run; their output is not shown, so
  it is not compared, but an error fails the page.
- **Python**: a ```` ```python ```` block. The blocks of a page run in order in one namespace, with
  ``$PYMEMDB_DSN`` naming the page's database. When the next fenced block is ```` ```text ````, what the
  Python block printed is compared with it.
- **Skip**: ``<!-- docs-test: skip <reason> -->`` on the line before a block. The test lists every skip
  with its reason. Keep them rare: a shell command that starts servers, a pg_cron schedule, Citus.
- **Copy**: ``<!-- docs-test: copy of PAGE#anchor -->`` on the line before a transcript: a verbatim copy
  of a transcript that runs in PAGE (docs/reference.md copies its examples so; tests/docs_reference.py
  writes them and tests/test_docs.py checks they are still what it writes). Not run again here.
- Anything else (signatures, diagrams, ``bash``, ``json``) is prose, not run.

Every transcript and script runs in one psql-like session per page (autocommit, as psql), on a fresh
database with the schema installed, in page order, interleaved with the Python blocks.

The page's database is called ``mydb``: its real (random) name is printed as ``mydb``.

Comparison (``matches``): both sides are normalised (whitespace runs collapse, blank lines and psql's
``(N rows)`` footers are dropped, the ``---+---`` rule of a table becomes ``---``, so column widths do not
matter) and the volatile values of ``MASKS`` are replaced by their names on both sides. In the page, ``...``
stands for any text within a line, and a line of its own ``...`` for any number of lines: use it to abridge
long documents, not to hide wrong values. Errors print as psql's ``ERROR:``/``DETAIL:``/``HINT:`` lines
(no ``CONTEXT:``, as with ``\\set SHOW_CONTEXT never``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import itertools
import os
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

# -- the masks: volatile values, replaced by their name on both sides before comparing ---------------------
MASKS: list[tuple[str, str]] = [
    ("<uuid>", r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
    ("<uuid>", r"\b[0-9a-f]{8}-\.\.\."),  # a uuid abridged in the page: "2aa645f9-..."
    # a timestamp as PostgreSQL prints it (text) or Python does (isoformat / repr of datetime)
    ("<timestamp>", r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:[+-]\d\d(?::\d\d)?|Z)?"),
    ("<timestamp>", r"datetime\.datetime\([^)]*\)"),
    ("<duration>", r"\b\d+(?:\.\d+)? ?ms\b"),  # "12.3 ms"
    ("<duration>", r"\b\d\d:\d\d:\d\d\.\d+\b"),  # an interval with fractional seconds
    ("<stamp>", r"\b\d+\.\d+\.<uuid>"),  # a LangGraph checkpoint stamp: version.xmin.checkpoint id
    ("<token>", r"\bpmdb_[0-9a-f]{7,}"),  # an MCP bearer token or its prefix
]

PROMPT = re.compile(r"^(?:[A-Za-z_][\w-]*)?=[>#] ")
FENCE = re.compile(r"^([ \t]*)```([\w-]*)[ \t]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)  # also in a list
SKIP = re.compile(r"<!--[ \t]*docs-test:[ \t]*skip[ \t]+([^\n]*?)[ \t]*-->\s*\Z")
COPY = re.compile(r"<!--[ \t]*docs-test:[ \t]*copy of[ \t]+(\S+)[ \t]*-->\s*\Z")
RULE = re.compile(r"^[-+]+$")
FOOTER = re.compile(r"^\(\d+ rows?\)$")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    kind: str  # transcript | script | python | text | prose
    body: str
    skip: str | None = None
    expected: Block | None = None  # the ```text block after a python block
    copy: str | None = None  # PAGE#anchor where the block runs (a copy)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(page: str, text: str) -> list[Block]:
    """The fenced blocks of a page, classified by the convention above."""
    blocks: list[Block] = []
    for match in FENCE.finditer(text):
        lang, body = match.group(2), textwrap.dedent(match.group(3))
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()]
        skip = SKIP.search(before[-400:])
        copy = COPY.search(before[-400:])
        if lang in ("", "sql", "psql") and PROMPT.match(body.lstrip("\n")):
            kind = "transcript"
        elif lang == "sql":
            kind = "script"
        elif lang in ("python", "text"):
            kind = lang
        else:
            kind = "prose"
        blocks.append(Block(page, line, kind, body, skip.group(1) if skip else None,
                            copy=copy.group(1) if copy else None))
    for previous, block in itertools.pairwise(blocks):
        if previous.kind == "python" and block.kind == "text":
            previous.expected = block
    return blocks


# -- transcripts ----------------------------------------------------------------------------------------------
@dataclass
class Step:
    statement: str
    prompt: str = "=> "
    printed: list[str] = field(default_factory=list)


def steps(body: str) -> list[Step]:
    """A transcript as (statement, printed lines) pairs."""
    result: list[Step] = []
    open_statement = False
    for raw in body.splitlines():
        prompt = PROMPT.match(raw)
        if prompt:
            result.append(Step(raw[prompt.end():], prompt.group()))
            open_statement = not _complete(result[-1].statement)
        elif open_statement:
            result[-1].statement += "\n" + raw
            open_statement = not _complete(result[-1].statement)
        elif result:
            result[-1].printed.append(raw)
    return result


def _complete(statement: str) -> bool:
    stripped = re.sub(r"--[^\n']*$", "", statement.rstrip()).rstrip()
    return stripped.endswith(";") or stripped.startswith("\\") or bool(re.search(r"\\g\w*$", stripped))


def split_statements(script: str) -> list[str]:
    """Split SQL at top-level semicolons, as psql does (quotes, dollar quotes, comments, parentheses)."""
    out: list[str] = []
    start = i = depth = 0
    n = len(script)
    while i < n:
        ch = script[i]
        if ch == "-" and script.startswith("--", i):
            i = script.find("\n", i)
            i = n if i < 0 else i
        elif ch in "'\"":
            i = script.find(ch, i + 1)
            i = n if i < 0 else i
        elif ch == "$" and (tag := re.match(r"\$(?:[A-Za-z_]\w*)?\$", script[i:])):
            end = script.find(tag.group(), i + len(tag.group()))
            i = n if end < 0 else end + len(tag.group()) - 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == ";" and depth == 0:
            out.append(script[start:i + 1])
            start = i + 1
        i += 1
    out.append(script[start:])
    return [s for s in out if re.sub(r"--[^\n]*", "", s).strip()]


def _psql_value(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode()


_NUMERIC_OIDS = {20, 21, 23, 26, 700, 701, 1700}


class Session:
    """A psql-like session: autocommit, aligned output, psql's error lines."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.dbname = self.conn.info.dbname
        self.notices: list[str] = []
        self.conn.add_notice_handler(lambda d: self.notices.append(f"{d.severity}:  {d.message_primary}"))
        self.expanded = False
        self.unaligned = False
        self.variables: dict[str, str] = {}

    def close(self) -> None:
        self.conn.close()

    def run(self, statement: str) -> list[str]:
        text = statement.strip()
        meta = re.fullmatch(r"\\(\w+)\s*(.*?);?", text, flags=re.DOTALL)
        if meta:
            return self._meta(meta.group(1), meta.group(2).split())
        gset = re.search(r"\\gset\s*$", text)
        if gset:
            text = text[: gset.start()]
        gx = re.search(r"\\gx\s*$", text)
        expanded = self.expanded
        if gx:
            text = text[: gx.start()]
            self.expanded = True
        for name, value in self.variables.items():
            text = text.replace(f":'{name}'", "'" + value.replace("'", "''") + "'").replace(f":{name}", value)
        out: list[str] = []
        for one in split_statements(text):
            out += self._one(one, bool(gset))
        self.expanded = expanded
        return [line.replace(self.dbname, "mydb") for text in out for line in text.split("\n")]

    def _one(self, text: str, gset: bool) -> list[str]:
        out: list[str] = []
        self.notices.clear()
        try:
            with self.conn.cursor(binary=False) as cur:
                cur.execute(text.encode())
                out += self.notices
                self.notices.clear()
                result = cur.pgresult
                if cur.description is not None and result is not None:
                    names = [c.name for c in cur.description]
                    oids = [c.type_code for c in cur.description]
                    rows = [[_psql_value(result.get_value(r, c)) for c in range(result.nfields)]
                            for r in range(result.ntuples)]
                    if gset:
                        self.variables.update(zip(names, rows[0], strict=True))
                    else:
                        out += self._table(names, oids, rows)
        except psycopg.Error as error:
            out += self.notices
            diag = error.diag
            out.append(f"ERROR:  {diag.message_primary or error}")
            if diag.message_detail:
                out += [f"DETAIL:  {line}" for line in [diag.message_detail]]
            if diag.message_hint:
                out.append(f"HINT:  {diag.message_hint}")
        return out

    def _meta(self, command: str, args: list[str]) -> list[str]:
        if command == "x":
            self.expanded = (args[0] == "on") if args else not self.expanded
            return [f"Expanded display is {'on' if self.expanded else 'off'}."]
        if command == "pset" and args[:1] == ["format"]:
            self.unaligned = args[1] == "unaligned"
            return [f"Output format is {args[1]}."]
        raise ValueError(f"unsupported psql meta-command \\{command} (mark the block <!-- docs-test: skip ... -->)")

    def _table(self, names: list[str], oids: list[int], rows: list[list[str]]) -> list[str]:
        if self.unaligned:
            if len(names) == 1:
                return [row[0] for row in rows]
            return ["|".join(names)] + ["|".join(row) for row in rows]
        if self.expanded:
            width = max(map(len, names))
            out = []
            for number, row in enumerate(rows, 1):
                out.append(f"-[ RECORD {number} ]")
                out += [f"{name.ljust(width)} | {value}" for name, value in zip(names, row, strict=True)]
            return out
        widths = [max([len(n)] + [len(line) for row in rows for line in row[i].split("\n")])
                  for i, n in enumerate(names)]
        out = [" " + " | ".join(n.center(w) for n, w in zip(names, widths, strict=True)).rstrip()]
        out.append("-" + "-+-".join("-" * w for w in widths) + "-")
        for row in rows:
            split = [value.split("\n") for value in row]
            for i in range(max(len(lines) for lines in split)):
                cells = []
                for lines, w, oid in zip(split, widths, oids, strict=True):
                    v = lines[i] if i < len(lines) else ""
                    cells.append((v.rjust(w) if oid in _NUMERIC_OIDS else v.ljust(w))
                                 + ("+" if i < len(lines) - 1 else " "))
                out.append((" " + "| ".join(cells)).rstrip())
        out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
        return out


# -- comparison -------------------------------------------------------------------------------------------------
def mask(text: str) -> str:
    for name, pattern in MASKS:
        text = re.sub(pattern, name, text)
    return text


def normalise(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        line = " ".join(line.split())
        line = line[:-1].rstrip() if line.endswith("+") and not RULE.match(line.replace(" ", "")) else line
        if not line or FOOTER.match(line):
            continue
        if RULE.match(line.replace(" ", "")) and "-" in line:
            line = "---"
        elif line.startswith("-[ RECORD"):
            line = re.sub(r"\s*\]-[-+]*$", " ]", line)
        out.append(mask(line))
    return out


def matches(printed: list[str], actual: list[str]) -> bool:
    expected, got = normalise(printed), normalise(actual)
    pattern = []
    for line in expected:
        if line == "...":
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(r"\.\.\.".join(map(re.escape, line.split("..."))).replace(r"\.\.\.", "[^\n]*?") + "\n")
    return re.fullmatch("".join(pattern), "".join(line + "\n" for line in got)) is not None


# -- a page ---------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    block: Block
    statement: str
    printed: list[str]
    actual: list[str]
    step: int = -1  # the step of a transcript


@dataclass
class Report:
    ran: int = 0
    skipped: list[Block] = field(default_factory=list)
    copied: int = 0  # copies of blocks that run on another page
    outputs: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # (block line, step): what it printed
    failures: list[Outcome] = field(default_factory=list)


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_page(page: str, text: str, dsn: str, namespace: dict[str, Any] | None = None) -> Report:
    """Run every transcript, script and Python block of a page in order; collect the mismatches."""
    report = Report()
    session = Session(dsn)
    namespace = namespace if namespace is not None else {"__name__": "__docs__"}
    try:
        with _environ(PYMEMDB_DSN=dsn):
            for block in parse(page, text):
                if block.kind in ("prose", "text"):
                    continue
                if block.copy is not None:
                    report.copied += 1
                    continue
                if block.skip is not None:
                    report.skipped.append(block)
                    continue
                report.ran += 1
                if block.kind == "transcript":
                    for number, step in enumerate(steps(block.body)):
                        try:
                            actual = session.run(step.statement)
                        except ValueError as error:
                            actual = [f"docs-test: {error}"]
                        report.outputs[(block.line, number)] = actual
                        if not matches(step.printed, actual):
                            report.failures.append(Outcome(block, step.statement, step.printed, actual, number))
                elif block.kind == "script":
                    actual = [line for line in session.run(block.body) if line.startswith("ERROR")]
                    if actual:
                        report.failures.append(Outcome(block, block.body, [], actual))
                else:
                    printed = io.StringIO()
                    raised = False
                    try:
                        with contextlib.redirect_stdout(printed):
                            code = compile(block.body, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                                           dont_inherit=True)
                            result = eval(code, namespace)
                            if inspect.iscoroutine(result):
                                asyncio.run(result)
                    except Exception as error:
                        printed.write(f"{type(error).__name__}: {error}\n")
                        raised = True
                    actual = printed.getvalue().splitlines()
                    expected = block.expected.body.splitlines() if block.expected else None
                    if raised or (expected is not None and not matches(expected, actual)):
                        report.failures.append(Outcome(block, "(python)", expected or [], actual))
    finally:
        session.close()
    return report


def describe(outcome: Outcome) -> str:
    return "\n".join([f"--- {outcome.block.where}", *(f"=> {outcome.statement}".splitlines()), "--- the page prints:",
                      *outcome.printed, "--- it prints:", *outcome.actual])
