"""One exception tree for pymemdb, mapped from our SQLSTATE codes.

Every error the SQL API raises on purpose carries a code from docs/errors.md
(``PM001`` ...) with a detail and a hint. ``wrap_exceptions`` turns psycopg
errors into these classes by ``exc.diag.sqlstate``; nothing matches on
message text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


class PymemdbError(Exception):
    """Root of every pymemdb error. ``sqlstate``, ``detail`` and ``hint`` come from the server."""

    sqlstate: str | None = None

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


class InvalidArgument(PymemdbError):
    """PM001: an argument is missing, out of range or malformed."""

    sqlstate = "PM001"


class UnknownSkill(InvalidArgument):
    """PM002: the skill is not in memori.session_skills."""

    sqlstate = "PM002"


class PayloadTooLarge(InvalidArgument):
    """PM003: content over the documented size limit."""

    sqlstate = "PM003"


class UnknownValue(InvalidArgument):
    """PM004: a value that must be one of a configured set (checkpoint type, ...) is not."""

    sqlstate = "PM004"


class NotFound(PymemdbError):
    """PM005: the row (checkpoint, version) does not exist, has expired, or is no longer kept."""

    sqlstate = "PM005"


class ExtensionMissing(PymemdbError):
    """PM010: the server lacks pgvector."""

    sqlstate = "PM010"


class SchemaNotInstalled(PymemdbError):
    """PM011: schema memori is missing or older than this client (run ``pymemdb init``)."""

    sqlstate = "PM011"


class CleanupError(PymemdbError):
    """Base of cleanup errors."""


class CleanupAlreadyRunning(CleanupError):
    """PM020: another cleanup holds this database's cleanup lock."""

    sqlstate = "PM020"


class CleanupRunNotActive(CleanupError):
    """PM021: the run id is not a running run of this session."""

    sqlstate = "PM021"


class CleanupLockTimeout(CleanupError):
    """PM022: a batch could not lock its rows even at size 1."""

    sqlstate = "PM022"


class PgCronMissing(PymemdbError):
    """PM030: pg_cron is not installed in this database."""

    sqlstate = "PM030"


class PgCronElsewhere(PgCronMissing):
    """PM012: pg_cron lives in another database (cron.database_name); schedule from there."""

    sqlstate = "PM012"


class AccessError(PymemdbError):
    """Base of the errors about who may act on which rows."""


class WrongUser(AccessError):
    """PM040: p_user_id differs from the transaction's memori.user_id."""

    sqlstate = "PM040"


class AccessDenied(AccessError):
    """PM041: not a member of the project, another user's session, or a global write without memori_admin.

    Also raised for PostgreSQL's 42501 (a row-level security policy or a
    missing privilege refused the statement).
    """

    sqlstate = "PM041"


class CompressionError(PymemdbError):
    """Base of compression errors (seed 04)."""


class ContextTooSmall(CompressionError):
    """PM070: the usable context is not larger than the system prompt."""

    sqlstate = "PM070"


class CompressionPlanStale(CompressionError):
    """PM071: the session changed (another compression or a restore) since the plan was made."""

    sqlstate = "PM071"


class CompressionPlanFinished(CompressionError):
    """PM072: the plan was already applied, aborted or skipped."""

    sqlstate = "PM072"


class InvalidSummary(CompressionError):
    """PM073: a summary is longer than its source, or the summaries do not match the plan's items."""

    sqlstate = "PM073"


class DeltaPruneRefused(PymemdbError, NotImplementedError):
    """PM080: LangGraph prune keep_latest refused for DeltaChannel threads (NotImplementedError, as upstream)."""

    sqlstate = "PM080"


class DeltaBaseMissing(PymemdbError):
    """PM081: a LangGraph delta blob names a base version its thread does not have unexpired."""

    sqlstate = "PM081"


class VmError(PymemdbError):
    """Base of AI virtual memory errors (pages, working set, faults)."""


class WorkingSetFull(VmError):
    """PM060: the working set cannot stay within max_l0_tokens without evicting pinned or protected pages."""

    sqlstate = "PM060"


class MutationLogAppendOnly(VmError):
    """PM061: memori.page_mutations rows cannot be changed."""

    sqlstate = "PM061"



class PageExists(VmError):
    """PM063: a page with this id already exists in the session."""

    sqlstate = "PM063"


class StaleRepresentation(VmError):
    """PM064: a representation was made from an older version of the page."""

    sqlstate = "PM064"


class ProvenanceNotFound(VmError):
    """PM090: a claim cites a page that is not in the session."""

    sqlstate = "PM090"


class SegmentEmpty(VmError):
    """PM091: segment_close on a segment without transcript pages."""

    sqlstate = "PM091"


class SegmentSummaryTooLong(VmError):
    """PM092: a segment summary is not shorter than the segment it replaces."""

    sqlstate = "PM092"


class InvalidRecallSignal(VmError):
    """PM093: a recall signal pattern is empty or not a valid regular expression."""

    sqlstate = "PM093"


class EmbeddingsPresent(VmError):
    """PM099: the embedding dimension cannot change while pages have embeddings."""

    sqlstate = "PM099"


class ClaimNotCurrent(VmError):
    """PM100: claim_supersede of a page that is not a claim, or of a claim already superseded."""

    sqlstate = "PM100"


class SessionExists(VmError):
    """PM094: session_fork into a session id that already exists."""

    sqlstate = "PM094"


class RegionAccessDenied(VmError):
    """PM095: the region is another user's (to change it) or not shared with the acting user (to read it)."""

    sqlstate = "PM095"


class RegionExists(VmError):
    """PM096: a region with this id already exists (region ids are unique across users)."""

    sqlstate = "PM096"


class RegionScopeMismatch(VmError):
    """PM097: a page put in a region of scope session, or a whole session in a region of scope pages."""

    sqlstate = "PM097"


class ForkTooDeep(VmError):
    """PM098: forking would make an ancestor chain longer than vm.max_fork_depth."""

    sqlstate = "PM098"


class StoreError(PymemdbError):
    """Errors of the long-term memory store (``db.store``, MemoriStore): PM120-PM129."""


class InvalidFilter(StoreError, InvalidArgument, ValueError):
    """PM120: a store search filter with an unsupported operator or an operand of the wrong type."""

    sqlstate = "PM120"


class InvalidNamespace(StoreError, InvalidArgument, ValueError):
    """PM121: a store namespace that is empty, or has an empty or NULL label."""

    sqlstate = "PM121"


class InvalidIndexConfig(StoreError, InvalidArgument, ValueError):
    """PM122: an unknown distance type, vector type or ANN index kind, or a dimension it cannot index."""

    sqlstate = "PM122"


class McpError(PymemdbError):
    """Base of the MCP server's errors (issue 18)."""


class McpInvalidArgument(McpError, InvalidArgument):
    """PM130: an MCP tool argument is malformed (a TTL, a namespace, a value that is not JSON)."""

    sqlstate = "PM130"


class McpTokenNameTaken(McpError):
    """PM131: the user already has an active MCP token of this name."""

    sqlstate = "PM131"


class McpTokenNotFound(McpError):
    """PM132: no active MCP token matches the name or id given to revoke."""

    sqlstate = "PM132"


class McpTokenTtlInvalid(McpError, InvalidArgument):
    """PM133: an MCP token lifetime that is not positive or exceeds mcp.token_max_ttl."""

    sqlstate = "PM133"


class McpUnsafeRole(McpError):
    """PM134: the MCP server's database role bypasses row-level security and cannot SET ROLE to memori_app."""

    sqlstate = "PM134"
class ClusterError(PymemdbError):
    """Placing the schema on a Citus cluster (memori.distribute) failed."""


class CitusMissing(ClusterError):
    """PM140: the citus extension is not installed in this database."""

    sqlstate = "PM140"


class NotCoordinator(ClusterError):
    """PM141: memori.distribute() ran on a node that is not the Citus coordinator."""

    sqlstate = "PM141"


class CoordinatorHoldsShards(ClusterError):
    """PM142: the coordinator is a node of the cluster (citus_set_coordinator_host); pymemdb keeps it shard-free."""

    sqlstate = "PM142"


class DistributeWouldConvert(ClusterError):
    """PM143: placing the tables would turn a local table into a Citus-managed one; nothing was changed."""

    sqlstate = "PM143"


class RolesNotOnWorkers(ClusterError):
    """PM144: memori.distribute() could not create the memori roles on every worker."""

    sqlstate = "PM144"


class ServerError(PymemdbError):
    """The embedded server could not be started, stopped or reached."""


class EmbeddedServerBusy(ServerError):
    """PM110: another process held the embedded server's start/install lock longer than the timeout."""

    sqlstate = "PM110"


class DatabaseError(PymemdbError):
    """Any other database error, with PostgreSQL's own SQLSTATE."""


_BY_SQLSTATE: dict[str, type[PymemdbError]] = {
    cls.sqlstate: cls
    for cls in (
        InvalidArgument,
        UnknownSkill,
        PayloadTooLarge,
        UnknownValue,
        NotFound,
        ExtensionMissing,
        SchemaNotInstalled,
        CleanupAlreadyRunning,
        CleanupRunNotActive,
        CleanupLockTimeout,
        PgCronMissing,
        PgCronElsewhere,
        WrongUser,
        AccessDenied,
        ContextTooSmall,
        CompressionPlanStale,
        CompressionPlanFinished,
        InvalidSummary,
        DeltaPruneRefused,
        DeltaBaseMissing,
        WorkingSetFull,
        MutationLogAppendOnly,
        PageExists,
        StaleRepresentation,
        ProvenanceNotFound,
        SegmentEmpty,
        SegmentSummaryTooLong,
        InvalidRecallSignal,
        EmbeddingsPresent,
        ClaimNotCurrent,
        SessionExists,
        RegionAccessDenied,
        RegionExists,
        RegionScopeMismatch,
        ForkTooDeep,
        EmbeddedServerBusy,
        InvalidFilter,
        InvalidNamespace,
        InvalidIndexConfig,
        McpInvalidArgument,
        McpTokenNameTaken,
        McpTokenNotFound,
        McpTokenTtlInvalid,
        McpUnsafeRole,
        CitusMissing,
        NotCoordinator,
        CoordinatorHoldsShards,
        DistributeWouldConvert,
        RolesNotOnWorkers,
    )
    if cls.sqlstate
}

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
