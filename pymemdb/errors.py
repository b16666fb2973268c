"""One exception tree for pymemdb, mapped from our SQLSTATE codes.

Every error the SQL API raises on purpose carries a code from docs/errors.md
(``PM001`` ...) with a detail and a hint. ``wrap_exceptions`` turns psycopg
errors into these classes by ``exc.diag.sqlstate``; nothing matches on
message text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

# SQLSTATE -> class: each class declared with ``sqlstate=`` registers itself (PymemdbError.__init_subclass__)
_BY_SQLSTATE: dict[str, type[PymemdbError]] = {}


class PymemdbError(Exception):
    """Root of every pymemdb error. ``sqlstate``, ``detail`` and ``hint`` come from the server.

    A subclass declared with ``sqlstate="PMnnn"`` is what ``from_diagnostics`` raises for that code.
    """

    sqlstate: str | None = None

    def __init_subclass__(cls, *, sqlstate: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if sqlstate is not None:
            cls.sqlstate = sqlstate
            _BY_SQLSTATE[sqlstate] = cls

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def one_line(self) -> str:
        """The message and its hint on one line, for the CLI."""
        text = self.message.rstrip(".")
        if self.hint:
            text += f". {self.hint}"
        return text


class InvalidArgument(PymemdbError, sqlstate="PM001"):
    """PM001: an argument is missing, out of range or malformed."""


class UnknownSkill(InvalidArgument, sqlstate="PM002"):
    """PM002: the skill is not in memori.session_skills."""


class PayloadTooLarge(InvalidArgument, sqlstate="PM003"):
    """PM003: content over the documented size limit."""


class UnknownValue(InvalidArgument, sqlstate="PM004"):
    """PM004: a value that must be one of a configured set (checkpoint type, ...) is not."""


class NotFound(PymemdbError, sqlstate="PM005"):
    """PM005: the row (checkpoint, version) does not exist, has expired, or is no longer kept."""


class ExtensionMissing(PymemdbError, sqlstate="PM010"):
    """PM010: the server lacks pgvector."""


class SchemaNotInstalled(PymemdbError, sqlstate="PM011"):
    """PM011: schema memori is missing or older than this client (run ``pymemdb init``)."""


class CleanupError(PymemdbError):
    """Base of cleanup errors."""


class CleanupAlreadyRunning(CleanupError, sqlstate="PM020"):
    """PM020: another cleanup holds this database's cleanup lock."""


class CleanupRunNotActive(CleanupError, sqlstate="PM021"):
    """PM021: the run id is not a running run of this session."""


class CleanupLockTimeout(CleanupError, sqlstate="PM022"):
    """PM022: a batch could not lock its rows even at size 1."""


class PgCronMissing(PymemdbError, sqlstate="PM030"):
    """PM030: pg_cron is not installed in this database."""


class PgCronElsewhere(PgCronMissing, sqlstate="PM012"):
    """PM012: pg_cron lives in another database (cron.database_name); schedule from there."""


class AccessError(PymemdbError):
    """Base of the errors about who may act on which rows."""


class WrongUser(AccessError, sqlstate="PM040"):
    """PM040: p_user_id differs from the transaction's memori.user_id."""


class AccessDenied(AccessError, sqlstate="PM041"):
    """PM041: not a member of the project, another user's session, or a global write without memori_admin.

    Also raised for PostgreSQL's 42501 (a row-level security policy or a
    missing privilege refused the statement).
    """


class CompressionError(PymemdbError):
    """Base of compression errors (seed 04)."""


class ContextTooSmall(CompressionError, sqlstate="PM070"):
    """PM070: the usable context is not larger than the system prompt."""


class CompressionPlanStale(CompressionError, sqlstate="PM071"):
    """PM071: the session changed (another compression or a restore) since the plan was made."""


class CompressionPlanFinished(CompressionError, sqlstate="PM072"):
    """PM072: the plan was already applied, aborted or skipped."""


class InvalidSummary(CompressionError, sqlstate="PM073"):
    """PM073: a summary is longer than its source, or the summaries do not match the plan's items."""


class DeltaPruneRefused(PymemdbError, NotImplementedError, sqlstate="PM080"):
    """PM080: LangGraph prune keep_latest refused for DeltaChannel threads (NotImplementedError, as upstream)."""


class DeltaBaseMissing(PymemdbError, sqlstate="PM081"):
    """PM081: a LangGraph delta blob names a base version its thread does not have unexpired."""


class VmError(PymemdbError):
    """Base of AI virtual memory errors (pages, working set, faults)."""


class WorkingSetFull(VmError, sqlstate="PM060"):
    """PM060: the working set cannot stay within max_l0_tokens without evicting pinned or protected pages."""


class MutationLogAppendOnly(VmError, sqlstate="PM061"):
    """PM061: memori.page_mutations rows cannot be changed."""



class PageExists(VmError, sqlstate="PM063"):
    """PM063: a page with this id already exists in the session."""


class StaleRepresentation(VmError, sqlstate="PM064"):
    """PM064: a representation was made from an older version of the page."""


class ProvenanceNotFound(VmError, sqlstate="PM090"):
    """PM090: a claim cites a page that is not in the session."""


class SegmentEmpty(VmError, sqlstate="PM091"):
    """PM091: segment_close on a segment without transcript pages."""


class SegmentSummaryTooLong(VmError, sqlstate="PM092"):
    """PM092: a segment summary is not shorter than the segment it replaces."""


class InvalidRecallSignal(VmError, sqlstate="PM093"):
    """PM093: a recall signal pattern is empty or not a valid regular expression."""


class EmbeddingsPresent(VmError, sqlstate="PM099"):
    """PM099: the embedding dimension cannot change while pages have embeddings."""


class ClaimNotCurrent(VmError, sqlstate="PM100"):
    """PM100: claim_supersede of a page that is not a claim, or of a claim already superseded."""


class SessionExists(VmError, sqlstate="PM094"):
    """PM094: session_fork into a session id that already exists."""


class RegionAccessDenied(VmError, sqlstate="PM095"):
    """PM095: the region is another user's (to change it) or not shared with the acting user (to read it)."""


class RegionExists(VmError, sqlstate="PM096"):
    """PM096: a region with this id already exists (region ids are unique across users)."""


class RegionScopeMismatch(VmError, sqlstate="PM097"):
    """PM097: a page put in a region of scope session, or a whole session in a region of scope pages."""


class ForkTooDeep(VmError, sqlstate="PM098"):
    """PM098: forking would make an ancestor chain longer than vm.max_fork_depth."""


class StoreError(PymemdbError):
    """Errors of the long-term memory store (``db.store``, MemoriStore): PM120-PM129."""


class InvalidFilter(StoreError, InvalidArgument, ValueError, sqlstate="PM120"):
    """PM120: a store search filter with an unsupported operator or an operand of the wrong type."""


class InvalidNamespace(StoreError, InvalidArgument, ValueError, sqlstate="PM121"):
    """PM121: a store namespace that is empty, or has an empty or NULL label."""


class InvalidIndexConfig(StoreError, InvalidArgument, ValueError, sqlstate="PM122"):
    """PM122: an unknown distance type, vector type or ANN index kind, or a dimension it cannot index."""


class McpError(PymemdbError):
    """Base of the MCP server's errors (issue 18)."""


class McpInvalidArgument(McpError, InvalidArgument, sqlstate="PM130"):
    """PM130: an MCP tool argument is malformed (a TTL, a namespace, a value that is not JSON)."""


class McpTokenNameTaken(McpError, sqlstate="PM131"):
    """PM131: the user already has an active MCP token of this name."""


class McpTokenNotFound(McpError, sqlstate="PM132"):
    """PM132: no active MCP token matches the name or id given to revoke."""


class McpTokenTtlInvalid(McpError, InvalidArgument, sqlstate="PM133"):
    """PM133: an MCP token lifetime that is not positive or exceeds mcp.token_max_ttl."""


class McpUnsafeRole(McpError, sqlstate="PM134"):
    """PM134: the MCP server's database role bypasses row-level security and cannot SET ROLE to memori_app."""
class ClusterError(PymemdbError):
    """Placing the schema on a Citus cluster (memori.distribute) failed."""


class CitusMissing(ClusterError, sqlstate="PM140"):
    """PM140: the citus extension is not installed in this database."""


class NotCoordinator(ClusterError, sqlstate="PM141"):
    """PM141: memori.distribute() or a cleanup ran on a node that is not the Citus coordinator."""


class CoordinatorHoldsShards(ClusterError, sqlstate="PM142"):
    """PM142: the coordinator may hold distributed shards (shouldhaveshards).

    pymemdb keeps users' rows on the workers.
    """


class DistributeWouldConvert(ClusterError, sqlstate="PM143"):
    """PM143: placing the tables would turn a local table into a Citus-managed one; nothing was changed."""


class RolesNotOnWorkers(ClusterError, sqlstate="PM144"):
    """PM144: memori.distribute() could not create the memori roles on every worker."""


class ServerError(PymemdbError):
    """The embedded server could not be started, stopped or reached."""


class EmbeddedServerBusy(ServerError, sqlstate="PM110"):
    """PM110: another process held the embedded server's start/install lock longer than the timeout."""


class DatabaseError(PymemdbError):
    """Any other database error, with PostgreSQL's own SQLSTATE."""



_NUL_HINT = "PostgreSQL text cannot hold NUL bytes: remove them or store the data base64-encoded."

# PostgreSQL's own codes that mean "the caller sent bad input", with our hint.
_BAD_INPUT_HINTS = {
    "22P05": _NUL_HINT,  # untranslatable character (\u0000 in JSON)
    "22021": "Send valid UTF-8 text.",  # character not in repertoire
    "22P02": "Check the value's format (numbers, booleans, UUIDs, JSON).",  # invalid text representation
    "22007": "Use ISO 8601 timestamps, e.g. 2026-12-01T03:00:00+00:00.",  # invalid datetime format
    "22008": "Use a timestamp within PostgreSQL's range.",  # datetime field overflow
    "22023": "Check the argument against the function's documentation.",  # invalid parameter value
}
_NOT_INSTALLED_SQLSTATES = {"3F000", "42883", "42P01"}  # no schema / function / table
_SCHEMA_HINT = "Run `pymemdb init` (or `pymemdb init --sql | psql`) to install or upgrade the schema."


def from_psycopg(exc: psycopg.Error) -> PymemdbError:
    """The pymemdb error for a psycopg error."""
    diag = exc.diag
    return from_diagnostics(getattr(exc, "sqlstate", None) or diag.sqlstate,
                            diag.message_primary or str(exc).strip().splitlines()[0],
                            detail=diag.message_detail, hint=diag.message_hint)


def from_diagnostics(state: str | None, message: str, *, detail: str | None = None,
                     hint: str | None = None) -> PymemdbError:
    """The pymemdb error for an error's SQLSTATE, message, detail and hint (raised, or returned by a function)."""
    kwargs = {"sqlstate": state, "detail": detail, "hint": hint}
    if state in _BY_SQLSTATE:
        return _BY_SQLSTATE[state](message, **kwargs)
    if state == "42501":  # insufficient_privilege: a grant or a row-level security policy said no
        kwargs["hint"] = hint or (
            "The connected role may not do this: app roles act for the user in memori.user_id "
            "(pymemdb.connect(user_id=...) or db.as_user(...)); cleanup needs memori_cleaner."
        )
        return AccessDenied(message, **kwargs)
    if state in _BAD_INPUT_HINTS:
        kwargs["hint"] = hint or _BAD_INPUT_HINTS[state]
        return InvalidArgument(message, **kwargs)
    if state in _NOT_INSTALLED_SQLSTATES and "memori" in message:
        return SchemaNotInstalled(message, sqlstate=state, detail=detail, hint=_SCHEMA_HINT)
    return DatabaseError(message, **kwargs)


def _nul_byte() -> InvalidArgument:
    return InvalidArgument(
        "text contains a NUL (0x00) byte",
        sqlstate="PM001",
        hint=_NUL_HINT,
    )


@contextmanager
def wrap_exceptions() -> Iterator[None]:
    """Re-raise psycopg errors (and NUL bytes psycopg refuses to send) as PymemdbError."""
    try:
        yield
    except psycopg.Error as exc:
        if isinstance(exc, psycopg.DataError) and "NUL" in str(exc):
            raise _nul_byte() from exc
        if isinstance(exc, psycopg.OperationalError) and exc.diag.sqlstate is None:
            raise ServerError(
                str(exc).strip().splitlines()[0] if str(exc).strip() else "cannot reach the database",
                hint="Check the DSN (--dsn, PYMEMDB_DSN, DATABASE_URL) or start the embedded server: pymemdb db start.",
            ) from exc
        raise from_psycopg(exc) from exc
    except ValueError as exc:
        # psycopg refuses NUL bytes in text parameters before sending them
        if "NUL" in str(exc) or "0x00" in str(exc):
            raise _nul_byte() from exc
        raise
