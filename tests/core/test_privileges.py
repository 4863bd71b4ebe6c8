"""The container privilege catalogue (issue 27, item 1): names, pre-approval, and the wire's list (pure)."""

from __future__ import annotations

import typing

import pytest

from verl_async_dapo import privileges
from verl_async_dapo.privileges import Privilege
from verl_async_dapo.server.args import CreateContainerIn


def test_the_tool_offers_exactly_the_catalogue() -> None:
    literal = typing.get_args(typing.get_args(CreateContainerIn.model_fields["privileges"].annotation)[0])
    assert set(literal) == {p.value for p in Privilege} == {p.value for p in privileges.CATALOGUE}


@pytest.mark.parametrize("name", ["privileged", "SYS_MODULE", "seccomp=unconfined", "apparmor=unconfined", "all", ""])
def test_anything_else_is_unknown(name: str) -> None:
    with pytest.raises(ValueError, match="unknown container privilege"):
        privileges.parse([name])


def test_parse_orders_and_deduplicates() -> None:
    assert privileges.parse(["host_network", "SYS_PTRACE", "sys_ptrace"]) == (Privilege.SYS_PTRACE,
                                                                            Privilege.HOST_NETWORK)


def test_pre_approval_comes_from_the_users_environment_and_ignores_unknown_names() -> None:
    env = {privileges.PRE_APPROVED_ENV: "sys_ptrace, privileged,host_ipc"}
    assert privileges.pre_approved(env) == {Privilege.SYS_PTRACE, Privilege.HOST_IPC}
    assert privileges.pre_approved({}) == frozenset()


def test_every_privilege_names_its_flag_and_risk_for_the_form() -> None:
    text = privileges.describe(Privilege)
    for p in Privilege:
        assert f"{p.value} ({privileges.CATALOGUE[p].docker}:" in text
    assert "unconfined" not in " ".join(privileges.SECURITY_OPT)
