"""Past one server (issue 20): ``db.cluster``, one method per SQL function.

``memori.distribution_plan()`` is where every table goes on a Citus cluster
(distributed by its user, reference, or coordinator-local) and
``memori.distribute()`` applies it on the coordinator, reporting each table
with what blocks it today. The rules are in sql/950-distribute.sql;
docs/scale-out.md explains them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pymemdb._sql import given, rows

if TYPE_CHECKING:
    from pymemdb.db import Database


@dataclass(frozen=True)
class DistributionPlanRow:
    """memori.distribution_plan_row: one table of the Citus placement plan."""

    ord: int
    table_name: str
    placement: str  # distributed | reference | local
    distribution_column: str | None
    change_needed: str | None


@dataclass(frozen=True)
class DistributeResult:
    """memori.distribute_result: what memori.distribute() did with one table."""

    table_name: str
    placement: str
    distribution_column: str | None
    colocated_with: str | None
    status: str  # distributed | reference | already | local | blocked | ready (dry run) | missing
    rows_moved: int
    blockers: list[str]
    error: str | None


@dataclass(frozen=True)
class DelegationRow:
    """memori.delegation_row: one per-user function, whether Citus can delegate it to its user's node."""

    function_name: str  # regprocedure
    distribution_argument: str  # p_user_id | p_owner_id
    colocate_with: str | None
    kind: str  # delegate | coordinator | waiting
    reason: str | None
    status: str  # registered | already | not registered | would register | registered earlier | failed: ...
    helpers: list[str]


DISTRIBUTION_PLAN = rows("distribution_plan", result=DistributionPlanRow)
DISTRIBUTE = rows("distribute", ("p_dry_run", "boolean"), result=DistributeResult)
DISTRIBUTE_FUNCTIONS = rows("distribute_functions", ("p_delegate", "boolean"), ("p_dry_run", "boolean"),
                            result=DelegationRow)


class Cluster:
    def __init__(self, db: Database) -> None:
        self._db = db

    def distribution_plan(self) -> list[DistributionPlanRow]:
        """memori.distribution_plan: the Citus placement of every memori table, in apply order."""
        return self._db.call(DISTRIBUTION_PLAN)

    def distribute(self, *, dry_run: bool | None = None) -> list[DistributeResult]:
        """memori.distribute: place the tables on the Citus cluster (PM140 without Citus); dry_run only reports."""
        return self._db.call(DISTRIBUTE, **given(p_dry_run=dry_run))

    def distribute_functions(self, *, delegate: bool | None = None, dry_run: bool | None = None) -> list[DelegationRow]:
        """memori.distribute_functions: classify the per-user functions; ``delegate`` registers the delegable ones."""
        return self._db.call(DISTRIBUTE_FUNCTIONS, **given(p_delegate=delegate, p_dry_run=dry_run))
