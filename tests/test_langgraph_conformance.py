"""LangGraph's published conformance suite (langgraph-checkpoint-conformance) against both savers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

from pymemdb.integrations.langgraph import AsyncMemoriSaver, MemoriSaver

EVERY_CAPABILITY = {c.value for c in ALL_CAPABILITIES}


def _assert_conformant(report: CapabilityReport) -> None:
    report.print_report()
    failures = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert not failures, failures
    assert set(report.results) == EVERY_CAPABILITY
    assert report.passed_all()


def test_memori_saver_passes_every_capability(dsn: str) -> None:
    @checkpointer_test(name="MemoriSaver")
    async def memori_saver() -> AsyncIterator[MemoriSaver]:
        saver = MemoriSaver(dsn, user_id="conformance")
        try:
            yield saver
        finally:
            saver.close()

    _assert_conformant(asyncio.run(validate(memori_saver)))


def test_async_memori_saver_passes_every_capability(dsn: str) -> None:
    @checkpointer_test(name="AsyncMemoriSaver")
    async def async_memori_saver() -> AsyncIterator[AsyncMemoriSaver]:
        async with AsyncMemoriSaver.from_dsn(dsn, user_id="conformance") as saver:
            yield saver

    _assert_conformant(asyncio.run(validate(async_memori_saver)))


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_conformance_runs_per_user(dsn: str, user: str) -> None:
    """Two users' threads never mix: the suite passes for each of them on one database."""

    @checkpointer_test(name=f"MemoriSaver[{user}]")
    async def saver_of_user() -> AsyncIterator[MemoriSaver]:
        saver = MemoriSaver(dsn, user_id=user)
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(saver_of_user, capabilities={"put", "list", "delete_thread"}))
    assert all(r.passed for r in report.results.values() if r.detected)
