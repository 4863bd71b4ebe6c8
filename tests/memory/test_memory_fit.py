"""The fit decision on real nvidia-smi output (an H200, idle and with a process holding 64 GiB) and on the numbers
a real verl + vLLM start-up failure printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verl_async_dapo.exceptions import NvidiaSmiError
from verl_async_dapo.memory import ComputeApp, GpuMemory, ModelShape, check_fit, parse_apps_csv, parse_gpu_csv
from verl_async_dapo.memory.estimate import EstimateInput, estimate_memory

FIXTURES = Path(__file__).parent / "fixtures"
MIB_PER_GIB = 1024


def fixture(name: str) -> str:
    text = (FIXTURES / name).read_text()
    assert text.startswith("# source: ")  # every fixture names where it came from
    return text


def busy() -> tuple[list[GpuMemory], list[ComputeApp]]:
    return parse_gpu_csv(fixture("h200-busy-gpus-nounits.csv")), parse_apps_csv(fixture("h200-busy-apps-nounits.csv"))


def test_real_h200_output_parses_the_same_with_and_without_units() -> None:
    for state in ("idle", "busy"):
        plain = parse_gpu_csv(fixture(f"h200-{state}-gpus-nounits.csv"))
        assert plain == parse_gpu_csv(fixture(f"h200-{state}-gpus-units.csv"))
        assert parse_apps_csv(fixture(f"h200-{state}-apps-nounits.csv")) == parse_apps_csv(
            fixture(f"h200-{state}-apps-units.csv"))
    (gpu,) = parse_gpu_csv(fixture("h200-busy-gpus-nounits.csv"))
    assert (gpu.index, gpu.name, gpu.total_mib, gpu.used_mib, gpu.free_mib) == (0, "NVIDIA H200", 143771, 66063, 77094)
    # CUDA's total is used + free (nvidia-smi's total includes the driver's reserve): 139.8 GiB, as vLLM printed.
    assert round(gpu.cuda_total_mib / MIB_PER_GIB, 1) == 139.8
    (app,) = parse_apps_csv(fixture("h200-busy-apps-nounits.csv"))
    assert (app.pid, app.process_name, app.used_mib) == (544, "python3", 66054)
    assert parse_apps_csv(fixture("h200-idle-apps-nounits.csv")) == []


def test_not_nvidia_smi_csv_is_refused_with_the_line() -> None:
    with pytest.raises(NvidiaSmiError, match="NVIDIA-SMI has failed"):
        parse_gpu_csv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(NvidiaSmiError, match="reports no memory"):
        parse_gpu_csv("0, GPU-x, NVIDIA H200, [N/A], [N/A], [N/A]")
    (app,) = parse_apps_csv("GPU-x, 77, /usr/bin/python3, [N/A]")
    assert app.used_mib is None


def test_busy_h200_no_fit_at_0_6_and_the_share_that_fits() -> None:
    gpus, apps = busy()
    fit = check_fit(gpus, apps, need_gpus=1, rollout_util=0.6, colocated=True)
    assert not fit.starts
    (g,) = fit.gpus
    assert g.rollout_asks_gib == 83.88  # vLLM's own figure in the real log: "(0.6, 83.88 GiB)"
    # 75.29 GiB free - 2 CUDA contexts (trainer + vLLM worker) = 74.29 seen; 0.55 x 139.8 = 76.9 is too much.
    assert g.vllm_sees_gib == pytest.approx(77094 / 1024 - 1.0, abs=0.01)
    assert fit.suggested_util == 0.5 and g.max_util == 0.5
    assert fit.holders == ("pid 544 python3 64.5 GiB",)
    assert check_fit(gpus, apps, need_gpus=1, rollout_util=0.5, colocated=True).starts  # the fix does start


def test_idle_h200_fits_and_names_nobody() -> None:
    gpus = parse_gpu_csv(fixture("h200-idle-gpus-nounits.csv"))
    fit = check_fit(gpus, [], need_gpus=1, rollout_util=0.6, colocated=True)
    assert fit.starts and fit.suggested_util is None and fit.holders == ()
    # 0.95 x 139.8 = 132.8 GiB alone starts on an empty GPU; beside an 8B trainer on the same GPU it cannot: the
    # trainer's fp32 weights (30.5 GiB) are there when vLLM starts, and its Adam state has no room later either.
    assert check_fit(gpus, [], need_gpus=1, rollout_util=0.95, colocated=True).starts
    est = estimate_memory(EstimateInput(shape=ModelShape(4096, 36, 151936, 12288, 32, 8, 128, qk_norm=True),
                                        framework="fsdp", trainer_gpus=1, colocated=True, actor_tokens=20480,
                                        log_prob_tokens=30720, rollout_util=0.95, gpu_total_gib=139.8))  # fmt: skip
    greedy = check_fit(gpus, [], need_gpus=1, rollout_util=0.95, colocated=True, estimate=est)
    assert not greedy.starts and not greedy.peak_fits
    assert greedy.gpus[0].vllm_sees_gib == pytest.approx(139.8 - 1.0 - 8190735360 * 4 / 2**30, abs=0.01)
    assert greedy.suggested_util == 0.75  # (108.29 - 0.5) / 139.8 = 0.771 → 0.75


def test_the_real_start_up_failure_is_predicted() -> None:
    """The numbers the failing run printed: vLLM saw 75.62 of 139.8 GiB free and asked 0.6 of it."""
    text = fixture("verl-0.9.1-h200-vllm-startup-memory.log")
    found = re.search(r"\(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory utilization "
                      r"\(([\d.]+), ([\d.]+) GiB\)", text)  # fmt: skip
    assert found is not None
    free, total, util, asked = (float(x) for x in found.groups())
    # The state just before vLLM measured, as nvidia-smi would show it (its own context already counted as used).
    gpu = GpuMemory(0, "GPU-a", "NVIDIA H200", 143771, round((total - free) * 1024), round(free * 1024))
    fit = check_fit([gpu], [], need_gpus=1, rollout_util=util, colocated=False, rollout_gpus=1)
    assert fit.gpus[0].rollout_asks_gib == pytest.approx(asked, abs=0.01)
    assert not fit.starts
    assert fit.suggested_util == 0.5  # the share the real relaunch used, and that run trained 4 steps


def test_a_share_too_small_for_the_weights_is_not_offered() -> None:
    gpus, apps = busy()
    big = ModelShape(8192, 80, 152064, 29568, 64, 8, 128)  # a 72B-class dense model: 145 GB of bf16 weights
    est = estimate_memory(EstimateInput(shape=big, framework="fsdp", trainer_gpus=8, colocated=True,
                                        actor_tokens=4096, log_prob_tokens=4096, rollout_util=0.6,
                                        gpu_total_gib=139.8))  # fmt: skip
    fit = check_fit(gpus, apps, need_gpus=1, rollout_util=0.6, colocated=True, estimate=est)
    assert not fit.starts
    assert fit.min_util > 0.5 and fit.suggested_util is None  # only freeing the GPU helps


def test_one_step_off_puts_vllm_on_the_last_gpus() -> None:
    held = GpuMemory(0, "GPU-0", "H100", 81559, 60000, 20960)  # busy, but a trainer GPU
    free = GpuMemory(1, "GPU-1", "H100", 81559, 1, 80959)
    apps = [ComputeApp("GPU-0", 4242, "python3", 59990)]
    fit = check_fit([held, free], apps, need_gpus=2, rollout_util=0.6, colocated=False, rollout_gpus=1)
    assert fit.starts
    assert fit.gpus[0].rollout_asks_gib is None and fit.gpus[1].rollout_asks_gib is not None
    assert fit.holders == ("pid 4242 python3 58.6 GiB",)  # still named: it uses more than 10 %
    held_last = GpuMemory(1, "GPU-0", "H100", 81559, 60000, 20960)
    free_first = GpuMemory(0, "GPU-1", "H100", 81559, 1, 80959)
    swapped = check_fit([held_last, free_first], apps, need_gpus=2, rollout_util=0.6, colocated=False, rollout_gpus=1)
    assert not swapped.starts  # by index: GPU 1, the busy one, hosts vLLM
    assert swapped.suggested_util == 0.2  # (20.47 - 0.5 - 0.5) / 79.06 = 0.246 → 0.2
