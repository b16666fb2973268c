"""LangGraph long-term memory backed by pymemdb: ``MemoriStore`` and ``AsyncMemoriStore`` (issue 17).

``pip install pymemdb[langgraph]``. Both are ``langgraph.store.base.BaseStore``
implementations over the ``memori.store_*`` SQL functions (sql/810-store.sql),
configured like LangGraph's ``PostgresStore``: ``index`` (``dims``, ``embed``,
``fields``, ``distance_type``, ``ann_index_config``) and ``ttl``
(``default_ttl``, ``refresh_on_read`` in minutes, fractions allowed). What
differs, on purpose:

* reads never return an expired item (the SQL filters on ``expires_at``), and
  the retention engine reclaims them (``memori-cleanup``, ``cleanup_schedule``):
  ``start_ttl_sweeper`` exists for compatibility and runs that engine;
* filters compare JSON numbers as numbers (9 < 10), strings as strings;
* a query is ranked by vector similarity fused with full-text rank, and a
  selective filter never makes a page short; without an embedder, full text;
* items are the acting user's: row-level security, not a namespace convention.

A batch goes to the server in one round trip (a pipeline): gets in one
``store_get_many`` call per 1,000, puts in one ``store_put_many`` per 500,
one call per search and namespace listing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Literal, cast

import psycopg
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

try:  # langgraph >= 1.1: the labels an op carries, checked before a batch runs
    from langgraph.store.base import validate_op_namespace
except ImportError:  # pragma: no cover - older langgraph checks labels in its public methods only
    def validate_op_namespace(op: Op) -> None:
        return None

from pymemdb._sql import SqlFunction
from pymemdb.db import Database
from pymemdb.errors import CleanupAlreadyRunning, InvalidIndexConfig, wrap_exceptions
from pymemdb.integrations._acting_user import ActingUser
from pymemdb.store import (
    STORE_GET,
    STORE_GET_MANY,
    STORE_INDEX_ENSURE,
    STORE_LIST_NAMESPACES,
    STORE_PUT,
    STORE_PUT_MANY,
    STORE_SEARCH,
    StoreGetResult,
    StoreItem,
    StoreNamespace,
    StoreSearchResult,
    vector_text,
)

__all__ = ["AsyncMemoriStore", "MemoriIndexConfig", "MemoriStore"]

logger = logging.getLogger(__name__)

GET_CHUNK = 1000   # (namespace, key) pairs per store_get_many call
_DISCARD = frozenset({"store_put"})  # functions whose result rows a batch does not use
PUT_CHUNK = 500    # items per store_put_many call


class MemoriIndexConfig(IndexConfig, total=False):
    """LangGraph's ``IndexConfig`` plus PostgresStore's ``distance_type`` and ``ann_index_config``."""

    distance_type: Literal["l2", "inner_product", "cosine"]
    ann_index_config: dict[str, Any]


Call = tuple[SqlFunction[Any], dict[str, Any]]


@dataclass
class _Plan:
    """The SQL calls of one batch and where their rows go."""

    calls: list[Call] = field(default_factory=list)
    # per call: ("get", [op index by ord]), ("search", op index, used vectors), ("list", op index), ("put", None)
    targets: list[tuple[str, Any]] = field(default_factory=list)


def _dedupe_puts(puts: list[tuple[int, PutOp]]) -> list[PutOp]:
    last: dict[tuple[tuple[str, ...], str], PutOp] = {}
    for _, op in puts:
        last.pop((op.namespace, op.key), None)  # keep the order of the last write
        last[(op.namespace, op.key)] = op
    return list(last.values())


class _MemoriStoreBase(BaseStore):
    supports_ttl: bool = True
    # PostgresStore's migration list, for code that reads it: none here (alembic and sql/ install schema memori)
    MIGRATIONS: ClassVar[list[str]] = []

    def __init__(self, *, user_id: str, index: MemoriIndexConfig | None = None,
                 ttl: TTLConfig | None = None, full_text: bool = True) -> None:
        self.user_id = user_id
        self._acting = ActingUser(user_id)  # SET LOCAL per call on Citus (see _acting_user)
        self.full_text = full_text
        self.ttl_config = ttl
        self.index_config: MemoriIndexConfig | None = None
        self.embeddings: Any = None
        self._fields: list[tuple[str, Literal["$"] | list[str]]] = []
        self._queries: dict[tuple[str, frozenset[str]], str] = {}
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        if index:
            self.index_config = cast(MemoriIndexConfig, dict(index))
            distance = index.get("distance_type", "cosine")
            ann = dict(index.get("ann_index_config") or {})
            if distance not in ("cosine", "l2", "inner_product"):
                raise InvalidIndexConfig(f"unknown distance_type {distance!r}", sqlstate="PM122",
                                         hint="Use cosine, l2 or inner_product.")
            if ann.get("vector_type", "vector") not in ("vector", "halfvec"):
                raise InvalidIndexConfig(f"unknown vector_type {ann.get('vector_type')!r}", sqlstate="PM122",
                                         hint="Use vector or halfvec.")
            fields = index.get("fields") or ["$"]
            if isinstance(fields, str):
                fields = [fields]
            self._fields = [(f, "$" if f == "$" else tokenize_path(f)) for f in fields]
            self.embeddings = ensure_embeddings(index.get("embed"))

    # -- configuration ------------------------------------------------------------
    @property
    def _distance(self) -> str:
        return (self.index_config or {}).get("distance_type", "cosine")

    @property
    def _vector_type(self) -> str:
        return cast(str, ((self.index_config or {}).get("ann_index_config") or {}).get("vector_type", "vector"))

    def _index_call(self) -> Call | None:
        if not self.index_config:
            return None
        ann = dict(self.index_config.get("ann_index_config") or {})
        kind = ann.pop("kind", "hnsw")
        ann.pop("vector_type", None)
        return (STORE_INDEX_ENSURE, {"p_dims": int(self.index_config["dims"]), "p_distance": self._distance,
                                     "p_vector_type": self._vector_type, "p_method": kind, "p_options": Jsonb(ann)})

    def _query(self, function: SqlFunction[Any], args: dict[str, Any]) -> str:
        """The SQL text of a call, composed once per set of arguments."""
        key = (function.name, frozenset(args))
        text = self._queries.get(key)
        if text is None:
            text = function.query(args).as_string(None)
            if function.name in _DISCARD:  # a put's row is not read: do not send it back
                text = "select 1 as value from" + text.removeprefix("select * from")
            self._queries[key] = text
        return text

    # -- planning -------------------------------------------------------------------
    def _embed_requests(self, ops: list[Op]) -> tuple[list[str], list[str]]:
        """Texts to embed as documents (indexed fields of puts) and as queries (searches).

        Every op's namespace is checked first, so a bad label fails the whole batch before anything runs.
        """
        for op in ops:
            validate_op_namespace(op)
        docs: dict[str, None] = {}
        queries: dict[str, None] = {}
        if self.index_config:
            for op in ops:
                if isinstance(op, PutOp) and op.value is not None and op.index is not False:
                    for _, text in self._field_texts(op):
                        docs[text] = None
                elif isinstance(op, SearchOp) and op.query:
                    queries[op.query] = None
        return list(docs), list(queries)

    def _field_texts(self, op: PutOp) -> list[tuple[str, str]]:
        paths = self._fields if op.index is None else [
            (p, "$" if p == "$" else tokenize_path(p)) for p in cast(list[str], op.index)]
        out: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            for i, text in enumerate(texts):
                out.append((f"{path}.{i}" if len(texts) > 1 else path, text))
        return out

    def _plan(self, ops: list[Op], vectors: dict[str, list[float]]) -> _Plan:
        plan = _Plan()
        gets: dict[bool, list[tuple[int, GetOp]]] = {}
        puts: list[tuple[int, PutOp]] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                gets.setdefault(bool(op.refresh_ttl), []).append((i, op))
            elif isinstance(op, SearchOp):
                embedding = vectors.get(op.query) if op.query and self.index_config else None
                args: dict[str, Any] = {
                    "p_user_id": self.user_id, "p_namespace_prefix": list(op.namespace_prefix),
                    "p_limit": op.limit, "p_offset": op.offset, "p_refresh_ttl": bool(op.refresh_ttl)}
                if op.filter:
                    args["p_filter"] = Jsonb(op.filter)
                if op.query and self.full_text:
                    args["p_query"] = op.query
                if embedding is not None:
                    args["p_query_embedding"] = vector_text(embedding)
                    args["p_distance"] = self._distance
                    args["p_vector_type"] = self._vector_type
                plan.calls.append((STORE_SEARCH, args))
                plan.targets.append(("search", (i, embedding is not None)))
            elif isinstance(op, ListNamespacesOp):
                args = {"p_user_id": self.user_id, "p_limit": op.limit, "p_offset": op.offset}
                for cond in op.match_conditions or ():
                    args["p_prefix" if cond.match_type == "prefix" else "p_suffix"] = list(cond.path)
                if op.max_depth is not None:
                    args["p_max_depth"] = op.max_depth
                plan.calls.append((STORE_LIST_NAMESPACES, args))
                plan.targets.append(("list", i))
            elif isinstance(op, PutOp):
                puts.append((i, op))
            else:  # pragma: no cover - BaseStore defines no other op
                raise ValueError(f"unknown store operation {op!r}")
        for refresh, group in gets.items():
            if len(group) == 1:  # the common single get: the plain function, no request array to unpack
                i, op = group[0]
                plan.calls.append((STORE_GET, {"p_user_id": self.user_id, "p_namespace": list(op.namespace),
                                               "p_key": op.key, "p_refresh_ttl": refresh}))
                plan.targets.append(("get1", i))
                continue
            for start in range(0, len(group), GET_CHUNK):
                chunk = group[start:start + GET_CHUNK]
                plan.calls.append((STORE_GET_MANY, {
                    "p_user_id": self.user_id, "p_namespaces": Jsonb([list(op.namespace) for _, op in chunk]),
                    "p_keys": [op.key for _, op in chunk], "p_refresh_ttl": refresh}))
                plan.targets.append(("get", [i for i, _ in chunk]))
        items = [self._put_item(op, vectors) for op in _dedupe_puts(puts)]
        if len(items) == 1 and items[0]["value"] is not None:  # the common single put: the plain function
            plan.calls.append((STORE_PUT, self._put_args(items[0])))
            plan.targets.append(("put", None))
            return plan
        for start in range(0, len(items), PUT_CHUNK):
            chunk_items = Jsonb(items[start:start + PUT_CHUNK])
            plan.calls.append((STORE_PUT_MANY, {"p_user_id": self.user_id, "p_items": chunk_items}))
            plan.targets.append(("put", None))
        return plan

    def _put_item(self, op: PutOp, vectors: dict[str, list[float]]) -> dict[str, Any]:
        item: dict[str, Any] = {"namespace": list(op.namespace), "key": op.key, "value": op.value}
        if op.value is None:
            return item
        if op.ttl is not None:
            item["ttl_seconds"] = float(op.ttl) * 60
        if op.index is False:
            item["index"] = False
        elif not self.full_text:  # no full-text vector (vector search only): a narrower row
            item["index"] = False
            if self.index_config:
                item["vectors"] = {name: vectors[text] for name, text in self._field_texts(op) if text in vectors}
        elif self.index_config or op.index:
            paths = [p for p, _ in self._fields] if op.index is None else list(op.index)
            # the item records the paths (or "$": the whole value); searches derive the full text from them
            item["index"] = ["$"] if "$" in paths else paths
            if self.index_config:
                item["vectors"] = {name: vectors[text] for name, text in self._field_texts(op) if text in vectors}
        return item

    def _put_args(self, item: dict[str, Any]) -> dict[str, Any]:
        """store_put's arguments for one store_put_many item."""
        args: dict[str, Any] = {"p_user_id": self.user_id, "p_namespace": item["namespace"], "p_key": item["key"],
                                "p_value": Jsonb(item["value"])}
        if "ttl_seconds" in item:
            args["p_ttl"] = timedelta(seconds=item["ttl_seconds"])
        if item.get("index") is False:
            args["p_index"] = []
        elif "index" in item:
            args["p_index"] = item["index"]
        if "text" in item:
            args["p_text"] = item["text"]
        if item.get("vectors"):
            args["p_fields"] = list(item["vectors"])
            args["p_embeddings"] = [vector_text(v) for v in item["vectors"].values()]
        return args

    def _results(self, ops: list[Op], plan: _Plan, rows: list[Any]) -> list[Result]:
        out: list[Result] = [None] * len(ops)
        for (kind, target), found in zip(plan.targets, rows, strict=True):
            if kind == "get":
                for r in cast(list[StoreGetResult], found):
                    out[target[r.ord - 1]] = Item(value=r.value, key=r.key, namespace=tuple(r.namespace),
                                                  created_at=r.created_at, updated_at=r.updated_at)
            elif kind == "get1":
                for one in cast(list[StoreItem], found):
                    out[target] = Item(value=one.value, key=one.key, namespace=tuple(one.namespace),
                                       created_at=one.created_at, updated_at=one.updated_at)
            elif kind == "search":
                index, vector = target
                out[index] = [
                    SearchItem(namespace=tuple(r.namespace), key=r.key, value=r.value, created_at=r.created_at,
                               updated_at=r.updated_at, score=r.score if vector else r.text_score)
                    for r in cast(list[StoreSearchResult], found)]
            elif kind == "list":
                out[target] = [tuple(r.namespace) for r in cast(list[StoreNamespace], found)]
        return out

    def _row_factory(self, function: SqlFunction[Any]) -> Any:
        if function.result is None or function.returns == "scalar" or function.name in _DISCARD:
            return dict_row
        return class_row(function.result)


def _pool_kwargs(user_id: str) -> dict[str, Any]:
    escaped = user_id.replace("\\", "\\\\").replace(" ", "\\ ")
    return {"autocommit": True, "options": f"-c memori.user_id={escaped}"}


def _dsn_of(db: Database | str | None) -> str:
    from pymemdb.integrations.langgraph import _dsn_of as saver_dsn_of

    return saver_dsn_of(db)


class MemoriStore(_MemoriStoreBase):
    """LangGraph ``BaseStore`` on pymemdb (synchronous; ``abatch`` runs ``batch`` in a thread).

    >>> with MemoriStore.from_dsn(dsn, user_id="alice", index={"dims": 1536, "embed": emb}) as store:
    ...     store.setup()
    ...     graph = builder.compile(store=store)
    """

    def __init__(self, db: Database | str | None = None, *, user_id: str, index: MemoriIndexConfig | None = None,
                 ttl: TTLConfig | None = None, max_size: int = 8, full_text: bool = True) -> None:
        super().__init__(user_id=user_id, index=index, ttl=ttl, full_text=full_text)
        self.dsn = _dsn_of(db)
        self._own: psycopg.Connection[Any] | None = None
        self._own_lock = threading.Lock()
        self.pool = ConnectionPool(self.dsn, min_size=1, max_size=max_size, kwargs=_pool_kwargs(user_id),
                                   open=False, name="pymemdb-store")
        with wrap_exceptions():
            psycopg.connect(self.dsn, connect_timeout=10).close()  # fail fast with libpq's message
            self.pool.open(wait=True, timeout=30)

    @classmethod
    @contextmanager
    def from_dsn(cls, db: Database | str | None = None, *, user_id: str, index: MemoriIndexConfig | None = None,
                 ttl: TTLConfig | None = None, max_size: int = 8, full_text: bool = True) -> Iterator[MemoriStore]:
        """A store with its own pool, closed (and its sweeper stopped) on exit."""
        store = cls(db, user_id=user_id, index=index, ttl=ttl, max_size=max_size, full_text=full_text)
        try:
            yield store
        finally:
            store.close()

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, *, user_id: str = "default", index: MemoriIndexConfig | None = None,
                         ttl: TTLConfig | None = None, pipeline: bool = False,
                         pool_config: dict[str, Any] | None = None) -> Iterator[MemoriStore]:
        """PostgresStore's constructor, for drop-in use: acts for ``user_id`` (``"default"`` unless given).

        ``pipeline`` is accepted and ignored (every batch is pipelined); ``pool_config``'s ``max_size`` is used.
        """
        del pipeline
        with cls.from_dsn(conn_string, user_id=user_id, index=index, ttl=ttl,
                          max_size=int((pool_config or {}).get("max_size") or 8)) as store:
            yield store

    def close(self) -> None:
        self.stop_ttl_sweeper()
        with self._own_lock:
            if self._own is not None:
                self._own.close()
                self._own = None
        self.pool.close()

    def __enter__(self) -> MemoriStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def setup(self) -> None:
        """Install or upgrade schema memori (idempotent) and create the index configuration's ANN index."""
        from pymemdb.install import install

        install(self.dsn)
        call = self._index_call()
        if call is not None:
            self._execute([call])

    # PostgresStore compatibility for code (and LangGraph's own test fixtures) that reach into it:
    # ``_cursor`` gives a cursor on the store's connection.
    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        with wrap_exceptions(), self._connection() as conn, conn.cursor() as cur:
            yield cur

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The store's own connection when no other thread holds it (no pool checkout), else one from the pool."""
        if self._own_lock.acquire(blocking=False):
            try:
                conn = self._own
                if conn is None or conn.closed or conn.broken:
                    conn = self._own = psycopg.connect(self.dsn, **_pool_kwargs(self.user_id))
                yield conn
            finally:
                self._own_lock.release()
        else:
            with self.pool.connection() as pooled:
                yield pooled

    def _execute(self, calls: list[Call]) -> list[Any]:
        with wrap_exceptions(), self._connection() as conn, self._acting.call(conn):
            if len(calls) == 1:
                function, args = calls[0]
                with conn.cursor(row_factory=self._row_factory(function)) as cur:
                    return [cur.execute(self._query(function, args), args).fetchall()]
            cursors: list[psycopg.Cursor[Any]] = []
            try:
                with conn.pipeline():
                    for function, args in calls:
                        cur = conn.cursor(row_factory=self._row_factory(function))
                        cursors.append(cur)
                        cur.execute(self._query(function, args), args)
                return [cur.fetchall() for cur in cursors]
            finally:
                for cur in cursors:
                    cur.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        docs, queries = self._embed_requests(ops)
        vectors: dict[str, list[float]] = {}
        if docs:
            vectors.update(zip(docs, self.embeddings.embed_documents(docs), strict=True))
        if queries:
            vectors.update(zip(queries, [self.embeddings.embed_query(q) for q in queries], strict=True))
        plan = self._plan(ops, vectors)
        return self._results(ops, plan, self._execute(plan.calls) if plan.calls else [])

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    # -- TTL: the retention engine ------------------------------------------------
    def sweep_ttl(self) -> int:
        """Run the retention engine once (``memori.cleanup_execute``); the number of store items it deleted."""
        return _sweep(self.dsn)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Run the retention engine every interval in a thread (reads never need it: expired items are hidden).

        ``memori-cleanup execute`` from cron or ``memori.cleanup_schedule`` (pg_cron) does the same
        without an application thread.
        """
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config or (self._sweeper is not None and self._sweeper.is_alive()):
            future.set_result(None)
            return future
        interval = float(sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5)
        self._sweeper_stop.clear()

        def loop() -> None:
            try:
                while not self._sweeper_stop.wait(interval * 60):
                    try:
                        self.sweep_ttl()
                    except Exception:  # keep sweeping; the next run retries
                        logger.exception("pymemdb store TTL sweep failed")
                future.set_result(None)
            except Exception as exc:  # pragma: no cover - defensive
                future.set_exception(exc)

        self._sweeper = threading.Thread(target=loop, daemon=True, name="pymemdb-store-ttl")
        self._sweeper.start()
        future.add_done_callback(lambda f: self._sweeper_stop.set() if f.cancelled() else None)
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it stopped (or was not running)."""
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


def _sweep(dsn: str) -> int:
    with wrap_exceptions(), psycopg.connect(dsn, autocommit=True) as conn:
        try:
            row = conn.execute("select deleted_by_table from memori.cleanup_execute(p_trigger => 'sql')").fetchone()
        except psycopg.Error as exc:
            if exc.sqlstate == CleanupAlreadyRunning.sqlstate:
                return 0
            raise
    return int(((row or [None])[0] or {}).get("store_items", 0))


class AsyncMemoriStore(_MemoriStoreBase):
    """LangGraph ``BaseStore`` on pymemdb for asyncio (an ``AsyncConnectionPool``).

    >>> async with AsyncMemoriStore.from_dsn(dsn, user_id="alice") as store:
    ...     graph = builder.compile(store=store)

    Its synchronous methods work from other threads; from its own event loop
    they raise ``asyncio.InvalidStateError``, as LangGraph's AsyncPostgresStore.
    """

    def __init__(self, pool: AsyncConnectionPool, *, dsn: str, user_id: str,
                 index: MemoriIndexConfig | None = None, ttl: TTLConfig | None = None, full_text: bool = True) -> None:
        super().__init__(user_id=user_id, index=index, ttl=ttl, full_text=full_text)
        self.pool = pool
        self.dsn = dsn
        self.loop = asyncio.get_running_loop()
        self._sweep_task: asyncio.Task[None] | None = None

    @classmethod
    @asynccontextmanager
    async def from_dsn(cls, db: Database | str | None = None, *, user_id: str,
                       index: MemoriIndexConfig | None = None, ttl: TTLConfig | None = None,
                       max_size: int = 8, full_text: bool = True) -> AsyncIterator[AsyncMemoriStore]:
        """A store with its own pool, closed (and its sweeper stopped) on exit."""
        dsn = _dsn_of(db)
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=max_size, kwargs=_pool_kwargs(user_id),
                                   open=False, name="pymemdb-store-async")
        with wrap_exceptions():
            await (await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)).close()
            await pool.open(wait=True, timeout=30)
        store = cls(pool, dsn=dsn, user_id=user_id, index=index, ttl=ttl, full_text=full_text)
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()
            await pool.close()

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, conn_string: str, *, user_id: str = "default",
                               index: MemoriIndexConfig | None = None, ttl: TTLConfig | None = None,
                               pipeline: bool = False,
                               pool_config: dict[str, Any] | None = None) -> AsyncIterator[AsyncMemoriStore]:
        """AsyncPostgresStore's constructor, for drop-in use: acts for ``user_id`` (``"default"`` unless given).

        ``pipeline`` is accepted and ignored (every batch is pipelined); ``pool_config``'s ``max_size`` is used.
        """
        del pipeline
        async with cls.from_dsn(conn_string, user_id=user_id, index=index, ttl=ttl,
                                max_size=int((pool_config or {}).get("max_size") or 8)) as store:
            yield store

    async def setup(self) -> None:
        """Install or upgrade schema memori (idempotent) and create the index configuration's ANN index."""
        from pymemdb.install import install

        await asyncio.to_thread(install, self.dsn)
        call = self._index_call()
        if call is not None:
            await self._execute([call])

    @asynccontextmanager
    async def _cursor(self) -> AsyncIterator[psycopg.AsyncCursor[Any]]:
        """A cursor on a pooled connection (AsyncPostgresStore compatibility)."""
        with wrap_exceptions():
            async with self.pool.connection() as conn, conn.cursor() as cur:
                yield cur

    async def _execute(self, calls: list[Call]) -> list[Any]:
        with wrap_exceptions():
            async with self.pool.connection() as conn, self._acting.acall(conn):
                if len(calls) == 1:
                    function, args = calls[0]
                    async with conn.cursor(row_factory=self._row_factory(function)) as cur:
                        await cur.execute(self._query(function, args), args)
                        return [await cur.fetchall()]
                cursors: list[psycopg.AsyncCursor[Any]] = []
                try:
                    async with conn.pipeline():
                        for function, args in calls:
                            cur = conn.cursor(row_factory=self._row_factory(function))
                            cursors.append(cur)
                            await cur.execute(self._query(function, args), args)
                    return [await cur.fetchall() for cur in cursors]
                finally:
                    for cur in cursors:
                        await cur.close()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        docs, queries = self._embed_requests(ops)
        vectors: dict[str, list[float]] = {}
        if docs:
            vectors.update(zip(docs, await self.embeddings.aembed_documents(docs), strict=True))
        if queries:
            embedded = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
            vectors.update(zip(queries, embedded, strict=True))
        plan = self._plan(ops, vectors)
        return self._results(ops, plan, await self._execute(plan.calls) if plan.calls else [])

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        try:
            if asyncio.get_running_loop() is self.loop:
                raise asyncio.InvalidStateError(
                    "Synchronous calls to AsyncMemoriStore from its own event loop would block it; "
                    "use the async methods (aget, aput, asearch, abatch) or call from another thread"
                )
        except RuntimeError:  # no running loop in this thread
            pass
        return asyncio.run_coroutine_threadsafe(self.abatch(list(ops)), self.loop).result()

    # -- TTL: the retention engine ------------------------------------------------
    async def sweep_ttl(self) -> int:
        """Run the retention engine once; the number of store items it deleted."""
        return await asyncio.to_thread(_sweep, self.dsn)

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Run the retention engine every interval in a task (reads never need it)."""
        if self._sweep_task is not None and not self._sweep_task.done():
            return self._sweep_task
        interval = float(sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5)

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval * 60)
                try:
                    await self.sweep_ttl()
                except Exception:  # keep sweeping
                    logger.exception("pymemdb store TTL sweep failed")

        if not self.ttl_config:
            async def done() -> None:
                return None

            self._sweep_task = asyncio.create_task(done())
        else:
            self._sweep_task = asyncio.create_task(loop())
        return self._sweep_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Cancel the sweeper task; True when it stopped (or was not running)."""
        task = self._sweep_task
        if task is None or task.done():
            return True
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.CancelledError:
            pass
        except TimeoutError:
            return False
        self._sweep_task = None
        return True
