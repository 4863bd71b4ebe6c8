"""On a machine with NVIDIA GPUs: the real nvidia-smi of the host target, parsed and judged (skipped elsewhere).

The decision must agree with itself on live numbers: the share it offers as the largest that starts does start,
and 0.05 more does not.
"""

from __future__ import annotations

import shutil

import anyio
import pytest

from verl_async_dapo.memory import check_fit, parse_apps_csv, parse_gpu_csv
from verl_async_dapo.memory.gpus import APPS_QUERY_ARGV, GPU_QUERY_ARGV
from verl_async_dapo.targets.host import HostTarget

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: no GPU on this machine")


def test_real_nvidia_smi_on_the_host_target() -> None:
    async def query() -> tuple[str, str]:
        target = HostTarget()
        gpus, apps = await target.run(list(GPU_QUERY_ARGV)), await target.run(list(APPS_QUERY_ARGV))
        assert gpus.exit_code == 0 and apps.exit_code == 0, gpus.stderr + apps.stderr
        return gpus.stdout, apps.stdout

    gpu_text, apps_text = anyio.run(query)
    gpus, apps = parse_gpu_csv(gpu_text), parse_apps_csv(apps_text)
    assert gpus and all(0 <= g.used_mib <= g.cuda_total_mib <= g.total_mib for g in gpus)
    assert {a.gpu_uuid for a in apps} <= {g.uuid for g in gpus}
    fit = check_fit(gpus[:1], apps, need_gpus=1, rollout_util=0.3, colocated=True)
    best = fit.gpus[0].max_util
    if best >= 0.1:
        assert check_fit(gpus[:1], apps, need_gpus=1, rollout_util=best, colocated=True).starts
    if best + 0.05 <= 0.95:
        assert not check_fit(gpus[:1], apps, need_gpus=1, rollout_util=round(best + 0.05, 2), colocated=True).starts
