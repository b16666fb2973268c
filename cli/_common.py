"""Shared CLI plumbing: the --dsn option, error reporting and exit codes, JSON output."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar
from uuid import UUID

import typer
from rich.console import Console

import pymemdb
from pymemdb.errors import CleanupAlreadyRunning, InvalidArgument, PymemdbError

# Exit codes (documented in README.md, CLI reference)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_LOCKED = 0, 1, 2, 3

console = Console()
err_console = Console(stderr=True)

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


def fmt_time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S%z")
