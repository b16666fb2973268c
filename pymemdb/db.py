"""Connections: DSN resolution, the embedded default server, the pool, transactions."""

from __future__ import annotations

import copy
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, LiteralString, TypeVar, overload

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row
from psycopg_pool import ConnectionPool

from pymemdb import embedded
from pymemdb._sql import MaybeRow, OneRow, Rows, Scalar, SqlFunction, given, jsonb
from pymemdb.core import SETTING_GET, SETTING_RULES, TOKEN_ESTIMATE, SettingRule
from pymemdb.errors import SchemaNotInstalled, wrap_exceptions

T = TypeVar("T")


def resolve_dsn(dsn: str | None = None) -> str | None:
    """The DSN to use: the argument, else $PYMEMDB_DSN, else $DATABASE_URL; None means embedded."""
    return dsn or os.environ.get("PYMEMDB_DSN") or os.environ.get("DATABASE_URL") or None


def _configure(conn: psycopg.Connection) -> None:
    # pgvector adapters, when the extension exists (it does after `pymemdb init`)
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        pass
    conn.rollback()


# The acting user of each cursor Database.transaction() opened (its SET LOCAL memori.user_id):
# Database.call passes it as the user argument of a call made on that cursor.
_ACTING: weakref.WeakKeyDictionary[psycopg.Cursor[Any], str] = weakref.WeakKeyDictionary()


def _set_user(user_id: str) -> sql.Composed:
    # SET LOCAL, not set_config(..., true): the same transaction-local setting, but a
    # statement Citus propagates to the workers (citus.propagate_set_commands = 'local',
    # which memori.distribute() sets), where row-level security reads it on the shards.
    return sql.SQL("set local memori.user_id = {}").format(sql.Literal(user_id))


class Database:
    """A pymemdb database: one pool, one attribute per concern (``db.memories``, ``db.cleanup``).

    ``user_id`` is the user the calls act for. Each transaction sets it as
    ``memori.user_id`` with ``SET LOCAL`` (transaction-local, so a
    pooled connection never carries one user's identity into another's
    transaction, and a transaction-mode PgBouncer is safe); row-level security
    keys on it. A call that names a user (``p_user_id``) acts for that user.
    Services acting for many users share one pool through ``db.as_user(...)``.
    """

    def __init__(
        self, dsn: str, *, min_size: int = 1, max_size: int = 8, embedded: bool = False, user_id: str | None = None
    ) -> None:
        self.dsn = dsn
        self.embedded = embedded
        self.user_id = user_id
        self._owns_pool = True
        self.pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            configure=_configure,
            open=False,
            name="pymemdb",
        )
        with wrap_exceptions():
            # One direct attempt first: it fails fast with libpq's own message,
            # where the pool would retry for its whole timeout.
            psycopg.connect(dsn, connect_timeout=10).close()
            self.pool.open(wait=True, timeout=30)
        self._attach_concerns()

    def _attach_concerns(self) -> None:
        from pymemdb.budget import Budget
        from pymemdb.checkpoints import Checkpoints
        from pymemdb.cluster import Cluster
        from pymemdb.compression import Compression, Goals, Snapshots
        from pymemdb.context import Business, Context, Projects, Sessions
        from pymemdb.events import Events
        from pymemdb.mcp.tokens import McpTokens
        from pymemdb.memories import Memories
        from pymemdb.retention import Cleanup
        from pymemdb.store import Store
        from pymemdb.vm.fork import VmFork
        from pymemdb.vm.lifecycle import VmLifecycle
        from pymemdb.vm.pages import Pages

        self.memories = Memories(self)
        self.cleanup = Cleanup(self)
        self.checkpoints = Checkpoints(self)
        self.events = Events(self)
        self.context = Context(self)
        self.business = Business(self)
        self.sessions = Sessions(self)
        self.projects = Projects(self)
        self.compression = Compression(self)
        self.goals = Goals(self)
        self.snapshots = Snapshots(self)
        self.budget = Budget(self)
        self.pages = Pages(self)
        self.vm_fork = VmFork(self)
        self.vm = VmLifecycle(self)
        self.store = Store(self)
        self.mcp_tokens = McpTokens(self)
        self.cluster = Cluster(self)

    def as_user(self, user_id: str) -> Database:
        """The same database and pool, acting for ``user_id`` (closing it leaves the pool open)."""
        view = copy.copy(self)
        view.user_id = user_id
        view._owns_pool = False
        view._attach_concerns()
        return view

    # -- lifecycle ---------------------------------------------------------
    def close(self) -> None:
        self.pages.tlb.close()  # each view has its own page-table cache: never shared between users
        if self._owns_pool:
            self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def install(self, *, force: bool = False) -> Any:
        from pymemdb.install import install

        return install(self.dsn, force=force)

    def check_schema(self) -> None:
        """Raise SchemaNotInstalled unless the memori schema is at this client's revision."""
        from pymemdb.install import current_revision, head_revision, known_revisions

        with self.transaction() as cur:
            current = current_revision(cur)
        if current is not None and current not in known_revisions():
            raise SchemaNotInstalled(
                f"schema memori is at revision {current}, newer than this client knows (head {head_revision()})",
                sqlstate="PM011",
                hint="Upgrade the pymemdb package (pip install -U pymemdb) to the version that installed it.",
            )
        if current != head_revision():
            raise SchemaNotInstalled(
                f"schema memori is at revision {current or 'none'}, this client needs {head_revision()}",
                sqlstate="PM011",
                hint="Run `pymemdb init` (or `pymemdb init --sql | psql`) to install or upgrade it.",
            )

    # -- transactions --------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with wrap_exceptions(), self.pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self, user_id: str | None = None) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in its own transaction, acting for ``user_id`` (else ``self.user_id``).

        Committed on success, rolled back on error.
        """
        acting = user_id or self.user_id
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            if acting is not None:
                cur.execute(_set_user(acting))
                _ACTING[cur] = acting
            yield cur

    def rows(self, query: LiteralString, result: type[T], params: dict[str, Any] | None = None) -> list[T]:
        """Rows of a view or catalog query as dataclasses (acting for ``self.user_id``)."""
        with self.transaction() as own, own.connection.cursor(row_factory=class_row(result)) as cur:
            cur.execute(query, params)
            return cur.fetchall()

    # -- the core room (sql/000-core.sql) -------------------------------------
    def setting(self, key: str, default: Any = None) -> Any:
        """memori.setting_get: a memori.settings value (JSON), or ``default`` when the key is absent."""
        return self.call(SETTING_GET, **given(p_key=key, p_default=jsonb(default)))

    def setting_rules(self) -> list[SettingRule]:
        """memori.setting_rules: what each setting's value must be (an UPDATE breaking its rule: PM001)."""
        return self.call(SETTING_RULES)

    def token_estimate(self, text: str, kind: str | None = None) -> int:
        """memori.token_estimate: the one token estimate (kind general, business, code, auto, compression, page)."""
        return self.call(TOKEN_ESTIMATE, **given(p_text=text, p_kind=kind))

    # -- calling SQL functions -------------------------------------------------
    @overload
    def call(self, function: OneRow[T], cur: psycopg.Cursor[Any] | None = None, /, **args: Any) -> T: ...
    @overload
    def call(self, function: MaybeRow[T], cur: psycopg.Cursor[Any] | None = None, /, **args: Any) -> T | None: ...
    @overload
    def call(self, function: Rows[T], cur: psycopg.Cursor[Any] | None = None, /, **args: Any) -> list[T]: ...
    @overload
    def call(self, function: Scalar[T], cur: psycopg.Cursor[Any] | None = None, /, **args: Any) -> T: ...
    @overload
    def call(self, function: SqlFunction[Any], cur: psycopg.Cursor[Any] | None = None, /, **args: Any) -> Any: ...

    def call(self, function: SqlFunction[Any], cur: psycopg.Cursor[Any] | None = None, /, **args: Any) -> Any:
        """Call ``memori.<function>`` with named arguments and shape its result.

        The declaration's kind types the result: ``OneRow[T]`` gives ``T`` (a function that
        returned no row is a bug in the SQL, raised as RuntimeError), ``MaybeRow[T]`` gives
        ``T | None``, ``Rows[T]`` ``list[T]`` and ``Scalar[T]`` the value.

        The user argument of a per-user function (``SqlFunction.user_param``) is always
        passed: the acting user when not given (the transaction's ``memori.user_id``, what
        the SQL default NULL means), so Citus can delegate the call to that user's node and
        never sees a NULL user (Citus 14.0.1 crashes on one, docs/scale-out.md).
        """
        if cur is None:
            acting = args.get("p_user_id")
            with self.transaction(acting if isinstance(acting, str) else None) as own:
                return self.call(function, own, **args)
        user_param = function.user_param
        if user_param is not None and args.get(user_param) is None:
            args = {k: v for k, v in args.items() if k != user_param}
            if (user := _ACTING.get(cur)) is not None:
                args[user_param] = user
        query = function.query(args)
        with wrap_exceptions():
            if function.returns == "scalar":
                with cur.connection.cursor(row_factory=dict_row) as scalar:
                    scalar.execute(query, args)
                    row = scalar.fetchone()
                    return None if row is None else row["value"]
            assert function.result is not None
            typed: psycopg.Cursor[Any]
            with cur.connection.cursor(row_factory=class_row(function.result)) as typed:
                typed.execute(query, args)
                if function.returns == "one":
                    row = typed.fetchone()
                    if row is None and isinstance(function, OneRow):
                        raise RuntimeError(f"memori.{function.name} returned no row (declared OneRow)")
                    return row
                return typed.fetchall()


def connect(
    dsn: str | None = None, *, min_size: int = 1, max_size: int = 8, user_id: str | None = None
) -> Database:
    """Open a pymemdb database.

    ``dsn`` falls back to $PYMEMDB_DSN, then $DATABASE_URL. With none of them,
    the embedded server is started (or reused) and the schema installed on
    first use. A server given by DSN must have been installed with
    ``pymemdb init``. ``user_id`` is the user calls act for by default
    (``memori.user_id``, which row-level security keys on).
    """
    resolved = resolve_dsn(dsn)
    if resolved is None:
        url = embedded.start_installed()
        return Database(url, min_size=min_size, max_size=max_size, embedded=True, user_id=user_id)
    db = Database(resolved, min_size=min_size, max_size=max_size, user_id=user_id)
    try:
        db.check_schema()
    except BaseException:
        db.close()
        raise
    return db
