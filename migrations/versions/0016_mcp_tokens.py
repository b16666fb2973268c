"""MCP server (issue 18): bearer tokens that map an HTTP client to one user.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24

Run-once DDL only; the API is sql/185-mcp.sql.

A token is issued by an operator (``pymemdb mcp token create``) for one user,
with an expiry. Only the sha256 of its secret is stored: the secret is shown
once, at creation. ``memori.mcp_token_verify`` (security definer, the one
function that looks across users) maps a presented secret to its user, or
refuses it and records the refusal as an ``mcp.auth_refused`` event. Every
key includes the user, so the table can be distributed by user; the hash
lookup is then a multi-shard query (tokens are few and verified per request).
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        create table memori.mcp_tokens (
          id           bigint generated always as identity,
          user_id      text not null,
          name         text not null,
          token_hash   bytea not null,
          token_prefix text not null,
          created_at   timestamptz not null,
          expires_at   timestamptz not null,
          revoked_at   timestamptz,
          last_used_at timestamptz,
          created_by   text not null default current_user,
          primary key (user_id, id),
          check (octet_length(token_hash) = 32),
          check (expires_at > created_at),
          check (revoked_at is null or revoked_at >= created_at)
        );
        -- one active (unrevoked) token per user and name
        create unique index mcp_tokens_user_name_active on memori.mcp_tokens (user_id, name) where revoked_at is null;
        -- verification looks a secret up by its hash (a sha256 of 244 random bits: never shared)
        create index idx_mcp_tokens_hash on memori.mcp_tokens (token_hash);
        create index idx_mcp_tokens_expires_at on memori.mcp_tokens (expires_at);

        -- mcp_token_create's result: the only time the secret is seen
        create type memori.mcp_token_secret as (
          token_id     bigint,
          user_id      text,
          name         text,
          token        text,
          token_prefix text,
          created_at   timestamptz,
          expires_at   timestamptz
        );
        -- mcp_token_list's rows: everything but the hash
        create type memori.mcp_token_info as (
          token_id     bigint,
          user_id      text,
          name         text,
          token_prefix text,
          status       text,
          created_at   timestamptz,
          expires_at   timestamptz,
          revoked_at   timestamptz,
          last_used_at timestamptz,
          created_by   text
        );
        -- mcp_token_verify's row: who a valid token acts for
        create type memori.mcp_principal as (
          token_id   bigint,
          user_id    text,
          name       text,
          expires_at timestamptz
        );
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pymemdb revisions are forward-only")
