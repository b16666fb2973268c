"""Choosing the page embedding dimension at install (issue 7: `pymemdb init --embedding-dim N`)."""

from __future__ import annotations

import psycopg
import pytest
from typer.testing import CliRunner

import pymemdb
from pymemdb.cli.main import app
from pymemdb.errors import EmbeddingsPresent, InvalidArgument
from pymemdb.install import install, install_script
from tests.helpers import T0, assert_sqlstate, rows, value
from tests.test_vm_search import page, unit, vec

runner = CliRunner()


def column_type(conn: psycopg.Connection) -> str:
    return str(value(conn, "select format_type(atttypid, atttypmod) from pg_attribute"
                           " where attrelid = 'memori.pages'::regclass and attname = 'embedding'"))


def test_a_new_install_has_384_dimensions(conn: psycopg.Connection) -> None:
    assert value(conn, "select memori.vm_embedding_dim()") == 384
    assert column_type(conn) == "vector(384)"


def test_set_retypes_the_column_rebuilds_the_index_and_records_the_setting(conn: psycopg.Connection) -> None:
    assert value(conn, "select memori.vm_embedding_dim_set(8)") == 384  # the previous dimension
    assert column_type(conn) == "vector(8)"
    assert value(conn, "select memori.vm_embedding_dim()") == 8
    assert value(conn, "select value from memori.settings where key = 'vm.embedding_dim'") == 8
    idx = value(conn, "select indexdef from pg_indexes where indexname = 'idx_pages_embedding_hnsw'")
    assert "hnsw" in idx and "vector_cosine_ops" in idx
    # search works at the new size, and the old size is refused with the new one named
    page(conn, "msg_1", "we chose postgres", embedding=unit(1, 8))
    page(conn, "msg_2", "the frontend is react", embedding=unit(2, 8))
    found = rows(conn, "select page_id, mode from memori.search_pages('sess_1', 'postgres', %s::public.vector,"
                       " p_now => %s)", (vec(unit(1, 8)), T0))
    assert found[0] == {"page_id": "msg_1", "mode": "hybrid"}
    err = assert_sqlstate(conn, "PM001", "select memori.page_embedding_set('sess_1', 'msg_1', %s::public.vector, %s)",
                          (vec(unit(3, 384)), T0))
    assert "pages have 8" in str(err)


def test_the_same_dimension_is_a_no_op_even_with_embeddings(conn: psycopg.Connection) -> None:
    page(conn, "msg_1", "postgres", embedding=unit(1))
    assert value(conn, "select memori.vm_embedding_dim_set(384)") == 384
    assert value(conn, "select count(*) from memori.pages where embedding is not null") == 1


def test_a_change_is_refused_while_pages_have_embeddings_and_nothing_is_lost(conn: psycopg.Connection) -> None:
    page(conn, "msg_1", "postgres", embedding=unit(1))
    err = assert_sqlstate(conn, "PM099", "select memori.vm_embedding_dim_set(768)")
    assert "384" in str(err) and "re-embed" in (err.diag.message_hint or "")
    assert column_type(conn) == "vector(384)"
    assert value(conn, "select count(*) from memori.pages where embedding is not null") == 1
    # the hint's way out: clear, change, re-embed
    conn.execute("update memori.pages set embedding = null")
    assert value(conn, "select memori.vm_embedding_dim_set(768)") == 384
    assert column_type(conn) == "vector(768)"


@pytest.mark.parametrize("dim", [0, -1, 2001, None])
def test_out_of_range_dimensions_are_refused(conn: psycopg.Connection, dim: int | None) -> None:
    err = assert_sqlstate(conn, "PM001", "select memori.vm_embedding_dim_set(%s::integer)", (dim,))
    assert "1 to 2000" in (err.diag.message_hint or "")
    assert column_type(conn) == "vector(384)"


def test_only_the_installer_may_change_the_dimension(conn: psycopg.Connection) -> None:
    for role in ("memori_app", "memori_cleaner"):
        assert value(conn, "select has_function_privilege(%s, 'memori.vm_embedding_dim_set(integer)', 'execute')",
                     (role,)) is False
        assert value(conn, "select has_function_privilege(%s, 'memori.vm_embedding_dim()', 'execute')",
                     (role,)) is True


def test_install_with_embedding_dim_and_the_client(dsn: str) -> None:
    result = install(dsn, embedding_dim=16)
    assert result.embedding_dim == 16 and result.changed
    again = install(dsn, embedding_dim=16)
    assert again.embedding_dim == 16 and not again.changed
    assert install(dsn).embedding_dim == 16  # a later upgrade keeps the chosen dimension
    with pymemdb.connect(dsn, user_id="alice") as db:
        assert db.pages.embedding_dim() == 16
        db.pages.create("s1", "msg_1", "postgres")
        db.pages.embedding_set("s1", "msg_1", unit(1, 16))
        with pytest.raises(InvalidArgument, match="16"):
            db.pages.embedding_set("s1", "msg_1", unit(1, 384))
    with pytest.raises(EmbeddingsPresent) as raised:
        install(dsn, embedding_dim=32)
    assert "UPDATE memori.pages SET embedding = NULL" in (raised.value.hint or "")
    with psycopg.connect(dsn) as conn:
        assert column_type(conn) == "vector(16)"


def test_cli_init_embedding_dim(dsn: str) -> None:
    result = runner.invoke(app, ["init", "--dsn", dsn, "--embedding-dim", "32"])
    assert result.exit_code == 0, result.output
    assert "embeddings 32-d" in result.output
    with psycopg.connect(dsn, autocommit=True) as conn:
        page(conn, "msg_1", "postgres", embedding=unit(1, 32))
    result = runner.invoke(app, ["init", "--dsn", dsn, "--embedding-dim", "64"])
    assert result.exit_code == 1
    assert result.output.count("\n") <= 2 and "Traceback" not in result.output
    assert "PM099" in result.output or "embeddings" in result.output
    result = runner.invoke(app, ["init", "--dsn", dsn, "--embedding-dim", "0"])
    assert result.exit_code == 2 and "1 to 2000" in result.output


def test_install_script_chooses_the_dimension() -> None:
    script = install_script(embedding_dim=768)
    assert script.rstrip().endswith("commit;")
    assert "select memori.vm_embedding_dim_set(768);" in script
    assert "vm_embedding_dim_set(" not in install_script().split("-- ==== sql/")[0]
