"""docs/reference.md: one entry per public function of schema memori, generated (issue 19, item 9).

Regenerate after changing a function or a page's examples (one command, any database where
`pymemdb init` ran)::

    python -m tests.docs_reference "$PYMEMDB_DSN" > docs/reference.md

Where each part of an entry comes from, so that none can drift:

- name, parameters (name, type, default), result and its columns: the catalog (pg_proc, pg_type);
- purpose: the function's ``comment on function``;
- concern (the section): the sql/ file that defines the function, sections in file (band) order,
  titled by the file's first comment line;
- parameter descriptions: only what is written of a parameter, in the function's source in sql/ (a
  header comment line ``-- p_name: ...`` with its indented continuation lines, or a trailing
  ``-- ...`` on the parameter's line), else in a ``| parameter | meaning |`` table of a page under
  a heading that is the function's name, else in the shared table of docs/sql-api.md ("Parameters many
  functions share": p_now, p_user_id, p_session_id); no text is invented, and the column is left out when
  no parameter of the function has one (tests/test_docs.py requires one for every parameter);
- the example: the first statement that calls ``memori.<name>(`` in a psql transcript of README.md
  or docs/*.md that the docs test runs (not skipped), with what it prints, copied verbatim with a
  link to the section it comes from. The docs test verifies it there, in its page's order and setup;
  in reference.md the copy carries ``<!-- docs-test: copy of PAGE#anchor -->`` and is not run again.
  A statement that prints rows is preferred to one that prints nothing or an error.

tests/test_docs.py fails when reference.md differs from what this module generates from the current
catalog and pages, and when a public function has no example.
"""

from __future__ import annotations

import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests import docs_runner

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = "docs/reference.md"
COMMAND = 'python -m tests.docs_reference "$PYMEMDB_DSN" > docs/reference.md'

QUERY = """
select p.proname, p.oid::regprocedure::text, pg_get_function_arguments(p.oid),
       coalesce(pg_get_function_result(p.oid), 'procedure'), coalesce(obj_description(p.oid, 'pg_proc'), ''),
       coalesce((select array_agg(array[a.name, format_type(a.type, null)] order by a.n)
                   from unnest(p.proallargtypes, p.proargmodes, p.proargnames) with ordinality a(type, mode, name, n)
                  where a.mode in ('o', 'b', 't')),
                (select array_agg(array[att.attname::text, format_type(att.atttypid, att.atttypmod)]
                                  order by att.attnum)
                   from pg_type t join pg_attribute att on att.attrelid = t.typrelid
                  where t.oid = p.prorettype and t.typtype = 'c' and att.attnum > 0 and not att.attisdropped),
                '{}')
  from pg_proc p
 where p.pronamespace = 'memori'::regnamespace and p.proname !~ '^_' and p.prokind in ('f', 'p')
 order by p.proname, pg_get_function_arguments(p.oid)
"""


@dataclass
class Param:
    name: str
    type: str
    default: str | None
    description: str = ""


@dataclass
class Function:
    name: str
    identity: str  # memori.name(types)
    params: list[Param]
    result: str
    purpose: str
    columns: list[tuple[str, str]]  # of a composite or table result
    source: str = ""  # sql/NNN-*.sql
    position: int = 0  # of its create statement in the source
    example: Example | None = None


@dataclass
class Example:
    page: str
    heading: str
    anchor: str
    statement: str
    printed: list[str]


@dataclass
class Concern:
    source: str
    title: str
    functions: list[Function] = field(default_factory=list)


# -- the catalog -------------------------------------------------------------------------------------------------
def _split_args(text: str) -> list[str]:
    """pg_get_function_arguments split at top-level commas (defaults may hold commas in quotes or brackets)."""
    out, depth, quote, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "'":
            quote = not quote
        elif not quote and ch in "([":
            depth += 1
        elif not quote and ch in ")]":
            depth -= 1
        elif not quote and depth == 0 and ch == ",":
            out.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*out, tail] if tail else out


def _param(arg: str) -> Param | None:
    mode = re.match(r"(IN|OUT|INOUT|VARIADIC) ", arg)
    if mode and mode.group(1) == "OUT":
        return None
    arg = arg[mode.end():] if mode else arg
    declared, _, default = arg.partition(" DEFAULT ")
    name, _, type_ = declared.partition(" ")
    return Param(name, type_, default or None)


def public_functions(conn: psycopg.Connection) -> list[Function]:
    functions = []
    for name, identity, args, result, purpose, columns in conn.execute(QUERY).fetchall():
        params = [p for p in map(_param, _split_args(args)) if p]
        functions.append(Function(name, identity, params, result, purpose, [(c[0], c[1]) for c in columns]))
    return functions


# -- the sources: which file defines a function, what its header says of its parameters --------------------------
CREATE = re.compile(r"^create (?:or replace )?(?:function|procedure) memori\.(\w+)\s*\(", re.MULTILINE | re.IGNORECASE)


def _title(sql: str) -> str:
    lines = []
    for line in sql.splitlines():
        if not line.startswith("-- ") or line.strip() == "--":
            break
        lines.append(line[3:].strip())
        if lines[-1].endswith("."):
            break
    title = re.sub(r"^pymemdb SQL API(?:, [^:]*)?: ", "", " ".join(lines)).rstrip(".")
    return title[:1].upper() + title[1:]


def _header(sql: str, start: int) -> list[str]:
    """The comment lines above a create statement (up to the ruler), ``drop function`` statements (of one
    line or several) skipped."""
    lines = sql[:start].splitlines()
    header: list[str] = []
    i = len(lines) - 1
    while i >= 0:
        line = lines[i]
        if line.startswith("--") and set(line) != {"-"}:
            header.insert(0, line)
            i -= 1
            continue
        first = i  # the first line of the statement that ends here, if it is a drop
        while first > 0 and lines[first - 1].strip() and not lines[first - 1].startswith("--") \
                and not lines[first - 1].rstrip().endswith(";") and not lines[first].startswith("drop "):
            first -= 1
        if not lines[first].startswith("drop "):
            break
        i = first - 1
    return header


def _descriptions(sql: str, match: re.Match[str]) -> dict[str, str]:
    """Parameter descriptions from the source: ``-- p_x: text`` header lines, trailing comments in the list."""
    found: dict[str, str] = {}
    current = None
    for line in _header(sql, match.start())[1:]:
        head = re.match(r"--\s(p_\w+):\s*(.*)", line)
        if head:
            current = head.group(1)
            found[current] = head.group(2).strip()
        elif current and re.match(r"--\s{2,}\S", line):
            found[current] += " " + line[2:].strip()
        else:
            current = None
    depth, i = 1, match.end()
    while depth and i < len(sql):
        depth += {"(": 1, ")": -1}.get(sql[i], 0)
        i += 1
    for line in sql[match.end():i].splitlines():
        trailing = re.match(r"\s*(p_\w+)\s(?:[^-]|-(?!-))*--\s*(.+)", line)  # a default may be negative
        if trailing:
            found.setdefault(trailing.group(1), trailing.group(2).strip())
    return found


def attach_sources(functions: list[Function], root: Path = ROOT) -> list[Concern]:
    """Set each function's source file and parameter descriptions; the concerns in band (file) order."""
    by_name = {f.name: f for f in functions}
    concerns: dict[str, Concern] = {}
    for path in sorted((root / "sql").glob("*.sql")):
        sql = path.read_text(encoding="utf-8")
        for match in CREATE.finditer(sql):
            function = by_name.get(match.group(1))
            if function is None:
                continue
            function.source, function.position = f"sql/{path.name}", match.start()  # the last file wins
            descriptions = _descriptions(sql, match)
            for param in function.params:
                param.description = descriptions.get(param.name, "")
        concerns[f"sql/{path.name}"] = Concern(f"sql/{path.name}", _title(sql))
    for function in sorted(functions, key=lambda f: f.position):
        concerns.setdefault(function.source, Concern(function.source, "Defined outside sql/")).functions.append(
            function)
    return [c for c in concerns.values() if c.functions]


# -- the examples: harvested from the pages the docs test runs ------------------------------------------------
def pages(root: Path = ROOT) -> list[str]:
    """The pages the docs test runs, in its order (reference.md excluded: it only copies)."""
    docs = sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))
    return ["README.md", *(p for p in docs if p != REFERENCE)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _headings(text: str) -> list[tuple[int, str, str]]:
    """(line, heading, anchor) of the page's headings outside fenced blocks."""
    fenced = [(text.count("\n", 0, m.start()) + 1, text.count("\n", 0, m.end()) + 1)
              for m in docs_runner.FENCE.finditer(text)]
    seen: dict[str, int] = {}
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        heading = re.match(r"#{1,6} (.+)", line)
        if not heading or any(a <= number <= b for a, b in fenced):
            continue
        anchor = slug(heading.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        out.append((number, heading.group(1).strip(), f"{anchor}-{count}" if count else anchor))
    return out


CALL = re.compile(r"\bmemori\.(\w+)\s*\(")


def _rank(name: str, heading: str, printed: list[str]) -> tuple[int, int]:
    """Lower is better: a statement that prints rows, then one that prints nothing, then an error;
    among those, one in the function's own section (its name in the heading) first."""
    output = 2 if any(line.startswith("ERROR:") for line in printed) else 0 if any(s.strip() for s in printed) else 1
    return output, 0 if name in heading else 1


VARIABLE = re.compile(r"(?<!:):'?([A-Za-z_]\w*)")  # a psql variable (:name or :'name'), not a ::cast


def harvest(root: Path = ROOT) -> dict[str, Example]:
    """For each function called in a run transcript: its best example (see _rank), the first of its rank.

    A statement that uses psql variables is shown after the ``\\gset`` statements that set them."""
    best: dict[str, tuple[tuple[int, int], Example]] = {}
    for page in pages(root):
        text = (root / page).read_text(encoding="utf-8")
        headings = _headings(text)
        gsets: list[str] = []  # the page's \gset statements so far, with their prompts
        for block in docs_runner.parse(page, text):
            if block.kind != "transcript" or block.skip is not None or block.copy is not None:
                continue
            _, heading, anchor = max([h for h in headings if h[0] < block.line], default=(0, page, ""))
            for step in docs_runner.steps(block.body):
                shown = step.prompt + step.statement
                setters = [g for name in dict.fromkeys(VARIABLE.findall(step.statement))
                           for g in [next((g for g in reversed(gsets) if re.search(rf"\b{name}\b", g)), None)] if g]
                for name in dict.fromkeys(CALL.findall(step.statement)):
                    rank = _rank(name, heading, step.printed)
                    if name not in best or rank < best[name][0]:
                        printed = list(step.printed)
                        while printed and not printed[-1].strip():
                            printed.pop()
                        statement = "\n".join([*dict.fromkeys(setters), shown])
                        best[name] = (rank, Example(page, heading, anchor, statement, printed))
                if re.search(r"\\gset\s*$", step.statement):
                    gsets.append(shown)
    return {name: example for name, (_, example) in best.items()}


SHARED_HEADING = "Parameters many functions share"  # docs/sql-api.md: p_now, p_user_id, p_session_id
SHARED = "*"


def page_descriptions(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """Parameter descriptions of the pages: a ``| parameter | meaning |`` table under a heading that names
    one function (``### page_create``); a row may name several parameters (``| `p_a` / `p_b` | ... |``).
    The table under SHARED_HEADING is filed under SHARED: the meaning of a name in every function that
    does not describe it itself."""
    found: dict[str, dict[str, str]] = {}
    for page in pages(root):
        text = (root / page).read_text(encoding="utf-8")
        headings = _headings(text)
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            if not re.match(r"\|\s*parameter\s*\|\s*meaning\s*\|\s*$", line):
                continue
            _, heading, _ = max([h for h in headings if h[0] < number], default=(0, "", ""))
            if heading == SHARED_HEADING:
                heading = SHARED
            elif not re.fullmatch(r"\w+", heading):
                continue
            table = found.setdefault(heading, {})
            for row in itertools.takewhile(lambda r: r.startswith("|"), lines[number + 1:]):
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
                if len(cells) == 2:
                    for name in re.findall(r"`(p_\w+)`", cells[0]):
                        table.setdefault(name, cells[1])
    return found


# -- rendering -------------------------------------------------------------------------------------------------
HEADER = f"""# Function reference

<!-- Generated: do not edit by hand. Regenerate with
     {COMMAND}
     (any database where `pymemdb init` ran); tests/test_docs.py fails when this file differs. -->

Every public function and procedure of schema `memori` (names not starting with `_`), grouped by
concern (the `sql/` file that defines it, in band order): its purpose (`comment on function`, also
shown by `\\df+` and `\\dd memori.*` in psql), its signature, its parameters with their defaults,
its result (with the columns of a composite result) and an example with its output.

The examples are copies of the transcripts of the concern pages ([sql-api.md](sql-api.md),
[context.md](context.md), [budget.md](budget.md), [compression.md](compression.md), [vm.md](vm.md),
[langgraph.md](langgraph.md), [mcp.md](mcp.md), the [README](../README.md)), which the docs test runs
in their page's order and setup: each links to the section it comes from, where the rows it uses are
created. Error codes: [errors.md](errors.md).

Regenerate after changing a function or an example (one command; `tests/docs_reference.py` says where
each part comes from):

```bash
{COMMAND}
```
"""


def _code(text: str) -> str:
    return "`" + " ".join(text.split()).replace("|", "\\|") + "`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _signature(function: Function) -> list[str]:
    returns = "" if function.result == "procedure" else f" RETURNS {function.result}"
    if not function.params:
        return [f"memori.{function.name}(){returns}"]
    args = [f"    {p.name} {p.type}" + (f" DEFAULT {p.default}" if p.default else "") for p in function.params]
    return [f"memori.{function.name}(", *(a + "," for a in args[:-1]), args[-1], f"){returns}"]


def _entry(function: Function) -> list[str]:
    out = [f"### memori.{function.name}", "", function.purpose or "(no comment on function)", "", "```text",
           *_signature(function), "```", ""]
    if function.params:
        described = any(p.description for p in function.params)
        out += ["| parameter | type | default |" + (" description |" if described else ""),
                "|---|---|---|" + ("---|" if described else "")]
        for p in function.params:
            row = f"| `{p.name}` | {_code(p.type)} | {_code(p.default) if p.default else ''} |"
            out.append(row + (f" {_cell(p.description)} |" if described else ""))
        out.append("")
    else:
        out += ["No parameters.", ""]
    if function.result == "procedure":
        out += ["**Returns:** nothing (a procedure: `call` it).", ""]
    else:
        out += [f"**Returns:** {_code(function.result)}" + (", with the columns:" if function.columns else "."), ""]
        if function.columns:
            out += ["| column | type |", "|---|---|", *(f"| `{n}` | {_code(t)} |" for n, t in function.columns), ""]
    example = function.example
    if example is None:
        out += ["**Example:** none yet (tests/test_docs.py fails until a page shows one).", ""]
    else:
        source = f"{example.page}#{example.anchor}" if example.anchor else example.page
        link = ("../" + source) if not example.page.startswith("docs/") else source.removeprefix("docs/")
        out += [f"**Example** (from [{example.page}, {example.heading}]({link}), where its setup runs):", "",
                f"<!-- docs-test: copy of {source} -->", "```", *example.statement.splitlines(),
                *example.printed, "```", ""]
    return out


def render(concerns: list[Concern]) -> str:
    toc = ["## Contents", ""]
    body: list[str] = []
    for concern in concerns:
        heading = f"{concern.title} ({concern.source})"
        toc.append(f"- [{heading}](#{slug(heading)}): "
                   + ", ".join(f"[{f.name}](#{slug('memori.' + f.name)})" for f in concern.functions))
        body += [f"## {heading}", ""]
        for function in concern.functions:
            body += _entry(function)
    return HEADER + "\n" + "\n".join(toc) + "\n\n" + "\n".join(body).rstrip("\n") + "\n"


def generate(conn: psycopg.Connection, root: Path = ROOT) -> tuple[str, list[Function]]:
    """reference.md as it should be, and the functions (each with its example or None)."""
    functions = public_functions(conn)
    concerns = attach_sources(functions, root)
    examples = harvest(root)
    documented = page_descriptions(root)
    for function in functions:
        function.example = examples.get(function.name)
        for param in function.params:  # the source's own words first, else the page's table, else shared
            param.description = (param.description or documented.get(function.name, {}).get(param.name, "")
                                 or documented.get(SHARED, {}).get(param.name, ""))
    return render(concerns), functions


def main(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        text, _ = generate(conn)
    sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1])
