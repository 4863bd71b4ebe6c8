"""The server's start-up pauses the cyclic GC for its imports only: the running server collects as usual.

(``_gc_paused`` also freezes what exists when it ends; each test unfreezes so the rest of the session collects as
before.)"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from verl_async_dapo import cli


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_serve_runs_with_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import verl_async_dapo.server as server

    seen: list[bool] = []
    monkeypatch.setattr(server, "serve", lambda **_: seen.append(gc.isenabled()))
    assert gc.isenabled()
    assert cli.main(["serve"]) == cli.EXIT_OK
    assert seen == [True]
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # start-up's objects are out of later collections


def test_paused_only_inside_and_restored_after_a_failed_import() -> None:
    assert gc.isenabled()
    with pytest.raises(ImportError), cli._gc_paused():
        assert not gc.isenabled()
        import verl_async_dapo_no_such_module  # noqa: F401
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with cli._gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
