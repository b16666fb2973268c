"""Shared CLI plumbing: exit codes and one-line errors, the shared options, command registration, the database,
JSON input. What commands print is in cli/_output.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import wraps
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

import pymemdb

# console, fmt_time, print_json, print_one and print_rows are re-exported (``as``): cli/vm*.py import them from here
from pymemdb.cli._output import console as console
from pymemdb.cli._output import err_console
from pymemdb.cli._output import fmt_time as fmt_time
from pymemdb.cli._output import print_json as print_json
from pymemdb.cli._output import print_one as print_one
from pymemdb.cli._output import print_rows as print_rows
from pymemdb.errors import CleanupAlreadyRunning, InvalidArgument, PymemdbError

# Exit codes (documented in README.md, CLI reference)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LOCKED = 0, 1, 2, 3

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
def database(dsn: str | None, user: str | None = None) -> Iterator[pymemdb.Database]:
    """A small pool on ``dsn``; ``user`` (a --user option): acting for that user (``Database.as_user``), else
    as connected (memori.user_id of the role or PGOPTIONS)."""
    db = pymemdb.connect(dsn, min_size=1, max_size=2)
    try:
        yield db.as_user(user) if user else db
    finally:
        db.close()


def parse_json(raw: str, what: str, hint: str) -> Any:
    """``raw`` parsed as JSON; not JSON is PM001 (exit 2) naming ``what`` (the option or argument), with ``hint``."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc.msg}", hint=hint) from None
