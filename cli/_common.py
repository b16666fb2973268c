"""Shared CLI plumbing: the --dsn option, error reporting and exit codes, JSON output, whole piped output."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar
from uuid import UUID

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from typer.core import TyperGroup

import pymemdb
from pymemdb.errors import CleanupAlreadyRunning, InvalidArgument, PymemdbError

# Exit codes (documented in README.md, CLI reference)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LOCKED = 0, 1, 2, 3

class WholeConsole(Console):
    """rich as usual on a terminal; piped or redirected, nothing is cut.

    Off a terminal rich assumes 80 columns, so tables squeezed their cells
    (``context_…``) and long lines broke (``db status``'s URL). There, text is
    not wrapped and a table gets the width of its widest row.
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.is_terminal:
            super().print(*objects, **kwargs)
            return
        kwargs.setdefault("soft_wrap", True)
        unbounded = self.options.update_width(1_000_000)
        needed = max((Measurement.get(self, unbounded, o).maximum for o in objects if isinstance(o, Table)),
                     default=0)
        if needed <= self.width:
            super().print(*objects, **kwargs)
            return
        kept = self._width
        self.width = needed
        try:
            super().print(*objects, **kwargs)
        finally:
            self._width = kept


console = WholeConsole()
err_console = Console(stderr=True)


class OneLineErrors(TyperGroup):
    """Bad command lines (unknown option, ``--now notatime``) are one ``error:`` line and exit 2, like bad input."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except typer.TyperException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # no arguments: the help, as before
                exc.show()  # type: ignore[attr-defined]
                sys.exit(EXIT_USAGE)
            ctx = getattr(exc, "ctx", None)
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            err_console.print(f"error: {message}{where}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(getattr(exc, "exit_code", EXIT_USAGE))
        except typer.Abort:
            err_console.print("aborted", markup=False)
            sys.exit(EXIT_ERROR)
        sys.exit(code if isinstance(code, int) else EXIT_OK)

def script_app(name: str, help: str, **options: Any) -> typer.Typer:
    """The top-level app of a console script: bad command lines are one line (OneLineErrors), no tracebacks."""
    return typer.Typer(cls=OneLineErrors, name=name, help=help, pretty_exceptions_enable=False,
                       add_completion=False, **options)


DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="PostgreSQL DSN. Default: $PYMEMDB_DSN, $DATABASE_URL, else the embedded server.",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]
NowOption = Annotated[
    datetime | None,
    typer.Option(
        "--now",
        help="Evaluate expiry as of this time instead of now (ISO 8601, e.g. 2026-12-01T03:00:00+00:00).",
        formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z"],
        show_default=False,
    ),
]

P = ParamSpec("P")
R = TypeVar("R")


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn pymemdb errors into one line on stderr and our exit codes; no tracebacks."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except CleanupAlreadyRunning as exc:
            err_console.print(f"error: {exc.one_line()}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_LOCKED) from None
        except InvalidArgument as exc:
            err_console.print(f"error: {exc.one_line()}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_USAGE) from None
        except PymemdbError as exc:
            err_console.print(f"error: {exc.one_line()}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_ERROR) from None
        except KeyboardInterrupt:
            err_console.print("interrupted", markup=False)
            raise typer.Exit(130) from None

    return wrapper


def command(app: typer.Typer, name: str | None = None, **options: Any) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``@command(app)``: register a command of ``app`` (``app.command``) that reports errors by handle_errors."""

    def register(func: Callable[P, R]) -> Callable[P, R]:
        return app.command(name, **options)(handle_errors(func))

    return register


@contextmanager
def database(dsn: str | None) -> Iterator[pymemdb.Database]:
    db = pymemdb.connect(dsn, min_size=1, max_size=2)
    try:
        yield db
    finally:
        db.close()


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Path | UUID):
        return str(value)
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(value), indent=2, sort_keys=False) + "\n")


def rows_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[str]], *,
               right: Collection[str] = (), **column: Any) -> Table:
    """A rich table: these columns (the ones in ``right`` right-aligned, ``column`` options on all), a line per row."""
    table = Table(title=title)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left", **column)
    for row in rows:
        table.add_row(*row)
    return table


def print_result(value: Any, as_json: bool, human: Any, **options: Any) -> None:
    """A command's result: ``value`` as JSON with --json, else ``human`` (a line or a table) on the console."""
    if as_json:
        print_json(value)
        return
    console.print(human, **options)


def print_rows(items: Sequence[R], as_json: bool, title: str | None, columns: Sequence[str],
               cells: Callable[[R], Sequence[str]], *, right: Collection[str] = (), **column: Any) -> None:
    """A list command's output: the items as JSON with --json, else a table of ``cells(item)`` per item."""
    print_result(items, as_json, rows_table(title, columns, map(cells, items), right=right, **column))


def parse_json(raw: str, what: str, hint: str) -> Any:
    """``raw`` parsed as JSON; not JSON is PM001 (exit 2) naming ``what`` (the option or argument), with ``hint``."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc.msg}", hint=hint) from None


def fmt_time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S%z")
