"""MCP bearer tokens (issue 18) through SQL: hashed, expiring, revocable, verified across users by one definer."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import psycopg
import pytest

from tests.helpers import T0, assert_sqlstate, one, rows, value


def create(conn: psycopg.Connection, user: str, name: str = "laptop", ttl: str = "30 days") -> dict[str, object]:
    row = one(conn, "select * from memori.mcp_token_create(%s, %s, %s::interval, %s)", (user, name, ttl, T0))
    assert row is not None
    return row


def verify(conn: psycopg.Connection, token: str | None, at: object = T0) -> list[dict[str, object]]:
    return rows(conn, "select * from memori.mcp_token_verify(%s, 'test', %s)", (token, at))


def refusals(conn: psycopg.Connection) -> list[str]:
    return [r["reason"] for r in rows(conn, "select payload->>'reason' as reason from memori.events "
                                            "where event_type = 'mcp.auth_refused' and user_id = '' order by id")]


def test_create_stores_only_the_hash_and_verify_maps_to_the_user(conn: psycopg.Connection) -> None:
    token = create(conn, "alice")
    secret = str(token["token"])
    assert secret.startswith("pmdb_") and len(secret) == 5 + 64
    assert token["expires_at"] == T0 + timedelta(days=30)
    stored = one(conn, "select * from memori.mcp_tokens")
    assert stored is not None
    assert bytes(stored["token_hash"]) == hashlib.sha256(secret.encode()).digest()
    assert secret not in str(rows(conn, "select * from memori.mcp_tokens"))
    assert stored["token_prefix"] == secret[:12]
    principal = verify(conn, secret, T0 + timedelta(seconds=1))
    assert [(p["user_id"], p["name"], p["token_id"]) for p in principal] == [("alice", "laptop", token["token_id"])]
    assert value(conn, "select last_used_at from memori.mcp_tokens") == T0 + timedelta(seconds=1)
    assert refusals(conn) == []


def test_expiry_is_exact_to_the_second(conn: psycopg.Connection) -> None:
    secret = str(create(conn, "alice", ttl="1 hour")["token"])
    end = T0 + timedelta(hours=1)
    assert len(verify(conn, secret, end - timedelta(seconds=1))) == 1
    assert verify(conn, secret, end) == []
    assert verify(conn, secret, end + timedelta(seconds=1)) == []
    assert refusals(conn) == ["expired", "expired"]


@pytest.mark.parametrize(("token", "reason"), [
    (None, "missing"), ("", "missing"), ("Bearer x", "malformed"), ("pmdb_" + "0" * 64, "unknown"),
])
def test_refusals_are_recorded_as_system_events(conn: psycopg.Connection, token: str | None, reason: str) -> None:
    create(conn, "alice")
    assert verify(conn, token) == []
    assert refusals(conn) == [reason]
    event = one(conn, "select * from memori.events where event_type = 'mcp.auth_refused'")
    assert event is not None and event["user_id"] == "" and event["expires_at"] is not None
    assert event["payload"]["client"] == "test"


def test_revoke_by_name_or_id_refuses_at_once(conn: psycopg.Connection) -> None:
    a = create(conn, "alice")
    b = create(conn, "alice", "phone")
    assert value(conn, "select memori.mcp_token_revoke('alice', 'laptop', p_now => %s)", (T0,)) == 1
    assert verify(conn, str(a["token"])) == []
    assert len(verify(conn, str(b["token"]))) == 1
    assert value(conn, "select memori.mcp_token_revoke(p_token_id => %s, p_now => %s)", (b["token_id"], T0)) == 1
    assert verify(conn, str(b["token"])) == []
    assert refusals(conn) == ["revoked", "revoked"]
    assert_sqlstate(conn, "PM132", "select memori.mcp_token_revoke('alice', 'laptop')")
    assert_sqlstate(conn, "PM001", "select memori.mcp_token_revoke('alice')")
    # a revoked name can be issued again
    assert create(conn, "alice")["name"] == "laptop"


def test_list_shows_status_never_the_secret(conn: psycopg.Connection) -> None:
    a = create(conn, "alice")
    create(conn, "bob", ttl="1 hour")
    conn.execute("select memori.mcp_token_revoke('alice', 'laptop', p_now => %s)", (T0 + timedelta(minutes=1),))
    later = T0 + timedelta(hours=2)
    assert rows(conn, "select * from memori.mcp_token_list(p_now => %s)", (later,)) == []
    listed = rows(conn, "select * from memori.mcp_token_list(p_include_inactive => true, p_now => %s)", (later,))
    assert [(r["user_id"], r["status"]) for r in listed] == [("alice", "revoked"), ("bob", "expired")]
    assert "token_hash" not in listed[0] and str(a["token"]) not in str(listed)
    assert [r["user_id"] for r in rows(conn, "select * from memori.mcp_token_list('bob', true)")] == ["bob"]


@pytest.mark.parametrize(("code", "args"), [
    ("PM131", "'alice', 'laptop'"),  # alice already has an active token named laptop
    ("PM133", "'alice', 'x', interval '0'"),
    ("PM133", "'alice', 'x', interval '-1 day'"),
    ("PM133", "'alice', 'x', interval '367 days'"),
    ("PM001", "'alice', ''"),
    ("PM001", "'', 'x'"),
])
def test_bad_arguments(conn: psycopg.Connection, code: str, args: str) -> None:
    create(conn, "alice")
    assert_sqlstate(conn, code, f"select memori.mcp_token_create({args})")


def test_app_role_verifies_only_and_never_reads_hashes(conn: psycopg.Connection) -> None:
    """memori_app: verify (definer) works for any user's token; create/list/revoke and the hash are refused."""
    secret = str(create(conn, "alice")["token"])
    conn.execute("set role memori_app")
    conn.execute("select set_config('memori.user_id', 'mallory', false)")
    try:
        assert [p["user_id"] for p in verify(conn, secret)] == ["alice"]
        assert verify(conn, "pmdb_" + "1" * 64) == []
        for query in ("select memori.mcp_token_create('mallory', 'x')",
                      "select * from memori.mcp_token_list()",
                      "select memori.mcp_token_revoke('alice', 'laptop')",
                      "select token_hash from memori.mcp_tokens"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(query)
        # the app role sees its own tokens' metadata only (for cleanup_preview), and no refusal events
        assert value(conn, "select count(*) from memori.mcp_tokens") == 0
        assert value(conn, "select count(*) from memori.events where event_type = 'mcp.auth_refused'") == 0
        conn.execute("select set_config('memori.user_id', 'alice', false)")
        assert value(conn, "select count(*) from memori.mcp_tokens") == 1
    finally:
        conn.execute("reset role")
    assert refusals(conn) == ["unknown"]


def test_admin_issues_tokens_for_the_acting_user(conn: psycopg.Connection) -> None:
    conn.execute("set role memori_admin")
    try:
        conn.execute("select set_config('memori.user_id', 'alice', false)")
        secret = value(conn, "select (memori.mcp_token_create('alice', 'ci')).token")
        assert [r["name"] for r in rows(conn, "select * from memori.mcp_token_list()")] == ["ci"]
        assert_sqlstate(conn, "PM040", "select memori.mcp_token_create('bob', 'ci')")
    finally:
        conn.execute("reset role")
        conn.execute("reset memori.user_id")
    assert verify(conn, secret, value(conn, "select now()"))[0]["user_id"] == "alice"


def test_expired_and_revoked_tokens_are_reclaimed_by_cleanup(conn: psycopg.Connection) -> None:
    create(conn, "alice", ttl="1 hour")
    create(conn, "alice", "phone", ttl="30 days")
    conn.execute("select memori.mcp_token_revoke('alice', 'phone', p_now => %s)", (T0 + timedelta(minutes=5),))
    at = T0 + timedelta(hours=1, seconds=1)
    preview = rows(conn, "select * from memori.cleanup_preview(%s) where table_name = 'mcp_tokens'", (at,))
    assert sorted(r["kind"] for r in preview) == ["expired", "revoked"]
    assert rows(conn, "select * from memori.cleanup_preview(%s) where table_name = 'mcp_tokens'",
                (T0 + timedelta(minutes=5) - timedelta(seconds=1),)) == []


# -- pymemdb mcp token create | list | revoke (CliRunner) ------------------------
def test_token_cli(env: str, conn: psycopg.Connection) -> None:
    import json

    from typer.testing import CliRunner

    from pymemdb.cli.main import app

    runner = CliRunner()
    created = runner.invoke(app, ["mcp", "token", "create", "alice", "--name", "laptop", "--ttl", "7d", "--json"])
    assert created.exit_code == 0, created.output
    secret = json.loads(created.output)
    assert secret["token"].startswith("pmdb_") and secret["user_id"] == "alice"
    plain = runner.invoke(app, ["mcp", "token", "create", "bob"])
    assert plain.exit_code == 0 and "pmdb_" in plain.output and "Shown once" in plain.output

    listed = runner.invoke(app, ["mcp", "token", "list", "--json"])
    assert listed.exit_code == 0
    assert [(t["user_id"], t["name"], t["status"]) for t in json.loads(listed.output)] == [
        ("alice", "laptop", "active"), ("bob", "default", "active")]
    assert "pmdb_" + secret["token"][5:] not in listed.output

    again = runner.invoke(app, ["mcp", "token", "create", "alice", "--name", "laptop"])
    assert again.exit_code == 1 and "already has a token" in again.output
    bad_ttl = runner.invoke(app, ["mcp", "token", "create", "alice", "--name", "x", "--ttl", "forever"])
    assert bad_ttl.exit_code == 2 and "not a positive duration" in bad_ttl.output

    revoked = runner.invoke(app, ["mcp", "token", "revoke", "--user", "alice", "--name", "laptop"])
    assert revoked.exit_code == 0 and "revoked 1" in revoked.output
    assert verify(conn, secret["token"], value(conn, "select now()")) == []
    missing = runner.invoke(app, ["mcp", "token", "revoke", "--id", str(secret["token_id"])])
    assert missing.exit_code == 1 and "no active token" in missing.output
    assert runner.invoke(app, ["mcp", "token", "revoke"]).exit_code == 2
    listed_all = runner.invoke(app, ["mcp", "token", "list", "--all", "--user", "alice", "--json"])
    assert [t["status"] for t in json.loads(listed_all.output)] == ["revoked"]


def test_serve_needs_a_user_over_stdio_and_none_over_http(env: str) -> None:
    from typer.testing import CliRunner

    from pymemdb.cli.main import app

    runner = CliRunner()
    stdio = runner.invoke(app, ["mcp", "serve", "stdio"])
    assert stdio.exit_code == 2 and "--user" in stdio.output
    http = runner.invoke(app, ["mcp", "serve", "http", "--user", "alice"])
    assert http.exit_code == 2 and "bearer token" in http.output
