"""Configuration: environment > config file > ask; the file and the DB hold references only; configure sends a
test message only when asked (test=True) and then saves only what the service accepted; bad input changes
nothing; each sink has its own events filter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from notify_services import CANARY_SECRET, Services

from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import NotifyConfigError
from verl_async_dapo.notify import config as cfg
from verl_async_dapo.notify.service import configure


def _resolve(app: AppContext) -> cfg.NotifyConfig:
    return cfg.resolve(app.env, app.notify_config_file, app.secrets)


def test_nothing_configured_means_no_sinks(app: AppContext) -> None:
    assert _resolve(app).sinks == ()


def test_configure_tests_then_saves_references_only(app: AppContext, svc: Services) -> None:
    report = anyio.run(lambda: configure(app, kind="feishu", url=svc.url("feishu"), secret=CANARY_SECRET, test=True))
    assert report.changed
    (sink,) = report.sinks
    assert sink.accepted and sink.answer == "HTTP 200, code 0: «success»"
    assert sink.setting == "feishu 127.0.0.1; signed (from argument)"
    assert svc.of("feishu")[0].verdict == "ok"  # the test message, signed
    text = app.notify_config_file.read_text()
    assert "hook-id" not in text and CANARY_SECRET not in text and "sec_" in text
    assert oct(app.notify_config_file.stat().st_mode & 0o777) == "0o600"
    assert CANARY_SECRET not in report.model_dump_json() and "hook-id" not in report.model_dump_json()
    resolved = _resolve(app)
    assert [s.kind.value for s in resolved.sinks] == ["feishu"]
    assert resolved.sinks[0].secret is not None and resolved.sinks[0].secret.get_secret_value() == CANARY_SECRET


def test_a_refused_test_saves_nothing(app: AppContext, svc: Services) -> None:
    with pytest.raises(NotifyConfigError, match=r"did not accept the test message \(HTTP 200, code 310000: «sign not"):
        anyio.run(lambda: configure(app, kind="dingtalk", url=svc.url("dingtalk"), secret="SECwrong", test=True))
    assert not app.notify_config_file.exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "slack", "url": "ftp://example/x"}, r"not an http\(s\) URL"),
    ({"kind": "slack"}, "needs its webhook URL"),
    ({"kind": "slack", "url": "http://127.0.0.1/x", "secret": "s"}, "has no signing secret"),
    ({"kind": "pager"}, "unknown sink kind"),
    ({"events": "errors,everything"}, "unknown notification events"),
])  # fmt: skip
def test_bad_input_is_refused_and_changes_nothing(app: AppContext, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(NotifyConfigError, match=message):
        anyio.run(lambda: configure(app, **kwargs))  # type: ignore[arg-type]
    assert not app.notify_config_file.exists()


def test_environment_overrides_the_file_per_kind(app: AppContext, svc: Services) -> None:
    anyio.run(lambda: configure(app, events="succeeded"))
    anyio.run(lambda: configure(app, kind="slack", url=svc.url("slack")))
    anyio.run(lambda: configure(app, kind="wecom", url=svc.url("wecom"), events="progress"))
    env_app = AppContext(home=app.home, config_home=app.config_home,
                         env={"VAD_NOTIFY_SLACK_URL": svc.url("slack") + "ENV", "VAD_NOTIFY_EVENTS": "all",
                              "VAD_NOTIFY_WECOM_EVENTS": "errors"})  # fmt: skip
    resolved = _resolve(env_app)
    by_kind = {s.kind.value: s for s in resolved.sinks}
    assert by_kind["slack"].source == "env" and by_kind["slack"].url.get_secret_value().endswith("ENV")  # type: ignore[union-attr]
    assert by_kind["wecom"].source == "config_file"
    assert resolved.events == ("succeeded", "progress")
    assert resolved.events_for(by_kind["wecom"]) == ()  # its own filter, from the environment
    saved = _resolve(app)
    assert saved.events == ("succeeded",)
    assert [saved.events_for(s) for s in saved.sinks] == [("succeeded",), ("progress",)]  # slack, wecom
    assert svc.received == []  # saving sent nothing
    env_app.close()


def test_env_secrets_are_redacted_everywhere(app: AppContext) -> None:
    env_app = AppContext(home=app.home, config_home=app.config_home,
                         env={"VAD_NOTIFY_FEISHU_URL": "https://open.feishu.cn/open-apis/bot/v2/hook/abc-canary",
                              "VAD_NOTIFY_FEISHU_SECRET": CANARY_SECRET})  # fmt: skip
    scrubbed = env_app.scrub("url https://open.feishu.cn/open-apis/bot/v2/hook/abc-canary and " + CANARY_SECRET)
    assert "abc-canary" not in scrubbed and CANARY_SECRET not in scrubbed
    env_app.close()


def test_remove_and_every_n_steps(app: AppContext, svc: Services) -> None:
    anyio.run(lambda: configure(app, kind="slack", url=svc.url("slack")))
    report = anyio.run(lambda: configure(app, every_n_steps=10, test=False))
    assert report.every_n_steps == 10 and "progress" in report.events
    report = anyio.run(lambda: configure(app, remove="slack", test=False))
    assert report.sinks == [] and "no notification sink" in report.note
    assert [p.name for p in (app.home / "secrets").iterdir() if p.name.startswith("sec_")] == []  # old refs deleted


def test_cli_reads_the_url_from_stdin_never_argv(tmp_path: Path, svc: Services) -> None:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(VERL_ASYNC_DAPO_HOME=str(tmp_path / "h"), VERL_ASYNC_DAPO_CONFIG_DIR=str(tmp_path / "c"))
    argv = [sys.executable, "-m", "verl_async_dapo", "notify", "--add", "feishu", "--json"]
    proc = subprocess.run(argv, input=f"{svc.url('feishu')}\n{CANARY_SECRET}\n", env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["sinks"][0]["tested"] is False and out["changed"] is True
    assert CANARY_SECRET not in proc.stdout + proc.stderr and "hook-id" not in proc.stdout + proc.stderr
    assert svc.of("feishu") == []  # saving is not sending
    shown = subprocess.run([*argv[:4], "--json"], env=env, capture_output=True, text=True, timeout=60, check=False)
    listing = json.loads(shown.stdout)
    assert [s["kind"] for s in listing["sinks"]] == ["feishu"] and listing["sinks"][0]["tested"] is False
    assert svc.of("feishu") == []  # showing is not sending
    tested = subprocess.run([*argv[:4], "--test", "--json"], env=env, capture_output=True, text=True, timeout=60,
                            check=False)  # fmt: skip
    assert json.loads(tested.stdout)["sinks"][0]["accepted"] is True, tested.stderr
    assert [r.verdict for r in svc.of("feishu")] == ["ok"]  # one message: the one asked for
