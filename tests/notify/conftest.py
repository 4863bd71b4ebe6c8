"""Fixtures for the notification tests: the service stand-in (tests/notify/notify_services.py) and an isolated AppContext."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from notify_services import CANARY_SECRET, Services, services

from verl_async_dapo.context import AppContext


@pytest.fixture
def svc() -> Iterator[Services]:
    with services(feishu=CANARY_SECRET, dingtalk=CANARY_SECRET, webhook=CANARY_SECRET) as state:
        yield state


@pytest.fixture
def app(tmp_path: Path) -> Iterator[AppContext]:
    ctx = AppContext(home=tmp_path / "home", config_home=tmp_path / "config", env={})
    yield ctx
    ctx.close()
