"""One token estimator (issue 19): memori.token_estimate gives every concern the estimate it had before.

The three SQL helpers it replaced (budget's _estimate_tokens, compression's
_compression_tokens, the pages' _tokens_estimate, now dropped) are written out
here as they were, and compared with it on a sample; the Python estimators of the
summarizers and compressors are measured against it too.
"""

from __future__ import annotations

import psycopg
import pytest

from pymemdb.compression import summarizers
from pymemdb.vm import compressors
from tests.helpers import assert_sqlstate, value

SAMPLE = [
    None, "", "x", "xyz", "x" * 19, "x" * 20, "x" * 38, "x" * 39, "x" * 4001,
    "Revenue this quarter: $12,000 from client Acme (invoice 42).",
    "def f(x):\n    return {'a': [x, (x + 1)]}  # code",
    "```sql\nselect 1;\n```",
    "naïve café — 東京 🚀 émoji", "\n\t  spaces  \n", "Ünïcödé " * 50,
]

# the formulas as they were before memori.token_estimate (sql/300, 400, 500 on branch bands)
OLD_BUDGET = """
select ceil(char_length(%(t)s::text)::numeric
            / (memori._budget_config()->>('density_' || case when %(k)s = 'auto' then memori._content_kind(%(t)s::text)
                                                         else %(k)s end))::numeric)::integer"""
OLD_COMPRESSION = """
select ceil(coalesce(char_length(%(t)s::text), 0)
            / memori._compression_num('compression.chars_per_token', 4))::integer"""
OLD_PAGE = """
select case when %(t)s::text is null or %(t)s::text = '' then 0
            else greatest(1, ceil(octet_length(%(t)s::text) / 4.0)::integer) end"""


def estimate(conn: psycopg.Connection, text: str | None, kind: str) -> int | None:
    return value(conn, "select memori.token_estimate(%s, %s)", (text, kind))  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["general", "business", "code", "auto"])
def test_budget_kinds_match_the_old_formula(conn: psycopg.Connection, kind: str) -> None:
    for text in SAMPLE:
        assert estimate(conn, text, kind) == value(conn, OLD_BUDGET, {"t": text, "k": kind}), (text, kind)
        assert value(conn, "select memori.estimate_tokens(%s, %s)", (text, kind)) == estimate(conn, text, kind)


def test_budget_densities_are_still_settings(conn: psycopg.Connection) -> None:
    conn.execute("update memori.settings set value = '4' where key = 'budget.density_general'")
    for text in SAMPLE:
        assert estimate(conn, text, "general") == value(conn, OLD_BUDGET, {"t": text, "k": "general"})


def test_compression_kind_matches_the_old_formula(conn: psycopg.Connection) -> None:
    for chars_per_token in ("4", "3.3"):
        conn.execute("update memori.settings set value = %s::jsonb where key = 'compression.chars_per_token'",
                     (chars_per_token,))
        for text in SAMPLE:
            assert estimate(conn, text, "compression") == value(conn, OLD_COMPRESSION, {"t": text}), text


def test_page_kind_matches_the_old_formula(conn: psycopg.Connection) -> None:
    for text in SAMPLE:
        assert estimate(conn, text, "page") == value(conn, OLD_PAGE, {"t": text}), text


def test_the_old_names_are_gone(conn: psycopg.Connection) -> None:
    """One estimator: the three helpers it replaced are not installed (the retired sweep drops them on upgrade)."""
    old = {"_tokens_estimate", "_compression_tokens", "_estimate_tokens"}
    found = {r[0] for r in conn.execute("select proname from pg_proc where pronamespace = 'memori'::regnamespace "
                                        "and proname = any(%s)", (list(old),))}
    assert found == set()


def test_python_estimators_agree_with_sql(conn: psycopg.Connection) -> None:
    for text in SAMPLE:
        if text is None:
            continue
        assert summarizers.estimate_tokens(text) == estimate(conn, text, "compression"), text
        assert compressors.estimate_tokens(text) == estimate(conn, text, "page"), text


def test_unknown_kind_is_pm004(conn: psycopg.Connection) -> None:
    assert_sqlstate(conn, "PM004", "select memori.token_estimate('x', 'poetry')")
    assert_sqlstate(conn, "PM004", "select memori.estimate_tokens('x', 'page')")
