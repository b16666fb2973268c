"""How CLI commands print: the console (whole when piped), JSON, tables of rows, a command's result, times."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

R = TypeVar("R")


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


def print_one(item: R, as_json: bool, line: Callable[[R], str]) -> None:
    """A command's one result: as JSON with --json, else ``line(item)``."""
    if as_json:
        print_json(item)
    else:
        console.print(line(item))


def fmt_time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S%z")
