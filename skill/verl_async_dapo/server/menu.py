"""The container question's numbered menu, in the original skill's Chinese and in English."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl_async_dapo.server.models import ContainerOut

_STATE_ZH = {
    "running": "运行中",
    "exited": "已停止",
    "created": "已创建",
    "paused": "已暂停",
    "restarting": "重启中",
    "dead": "已失效",
    "removing": "删除中",
}


def container_menu(containers: list[ContainerOut], can_create: bool = True) -> tuple[str, str]:
    """The original skill's numbered container question, with the host and "create new" added.

    Without a reachable Docker Engine nothing can be created: the "create new" line is left out (offering it would
    only lead to a refusal), so the choices are the listed targets alone.
    """
    zh, en = ["检测到以下容器："], ["Containers found:"]
    for i, c in enumerate(containers, 1):
        if c.kind == "host":
            zh.append(f"  [{i}] host (本机，不使用容器)")
            en.append(f"  [{i}] host (this machine, no container)")
        elif c.kind == "slurm" and c.state == "available":
            zh.append(f"  [{i}] {c.name} (SLURM 集群，每次训练作为批处理作业提交)")
            en.append(f"  [{i}] {c.name} (SLURM cluster, each attempt a batch job)")
        else:
            zh.append(f"  [{i}] {c.name} ({_STATE_ZH.get(c.state, c.state)})")
            en.append(f"  [{i}] {c.name} ({c.state})")
    n = len(containers) + (1 if can_create else 0)
    if can_create:
        zh.append(f"  [{n}] 创建新容器")
        en.append(f"  [{n}] create a new container")
    choices = "/".join(str(i) for i in range(1, n + 1))
    zh += ["", f"请选择容器 ({choices}):"]
    en += ["", f"Choose a container ({choices}):"]
    return "\n".join(zh), "\n".join(en)
