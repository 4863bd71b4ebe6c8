"""Fixtures for the SLURM target tests: a real one-node SLURM (munged + slurmctld + slurmd on 127.0.0.1, started by
tests/slurm/ensure_slurm.sh), the verl stand-in (tests/standin) as the only double, run the host target's way
(this venv's python3 on PATH, a private stand-in tree as VERL_HOME, shared with the "compute node" = this machine).

``slurm_partition``  session   str: the test partition (no GPUs); skipped without root/SLURM, failed with CI=true
``slurm_tree``       function  Path: a stand-in verl tree under tmp_path with the model/data paths preflight checks
``cli``              function  sv_helpers.Cli with an isolated state dir; runs it left active are stopped at the end
``time_limit_run``   session   (Cli, run id): a run with a one-minute time limit, started by the first module that
                               asks for it (every module that needs SLURM does); test_slurm_time_limit.py checks it
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "supervisor"))

from sv_helpers import Cli, prepare_host_tree

from harness.fixtures import unavailable

ENSURE = Path(__file__).resolve().parent / "ensure_slurm.sh"


@pytest.fixture(scope="session")
def slurm_partition() -> str:
    try:
        done = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        unavailable("tests/slurm/ensure_slurm.sh did not finish within 300 s")
    if done.returncode != 0:
        unavailable(f"no SLURM here (tests/slurm/ensure_slurm.sh exited {done.returncode}): {done.stderr[-1500:]}")
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def slurm_tree(make_host_verl_tree: Callable[[str], Path]) -> Path:
    tree = make_host_verl_tree("0.9.1")
    prepare_host_tree(tree, {"step_seconds": 0.1})
    return tree


@pytest.fixture
def cli(tmp_path: Path, slurm_partition: str) -> Iterator[Cli]:
    client = Cli.isolated(tmp_path / "vad-home")
    client.set(TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, VAD_SLURM_GPUS_PER_NODE=0)
    yield client
    try:
        client.stop_all()
    finally:
        client.store.close()


@pytest.fixture(scope="session")
def time_limit_run(slurm_partition: str, _host_tree_templates: Callable[[str], Path],
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str]]:  # fmt: skip
    base = tmp_path_factory.mktemp("slurm-time-limit")
    tree = base / "verl"
    shutil.copytree(_host_tree_templates("0.9.1"), tree)
    prepare_host_tree(tree, {"step_seconds": 2.0})  # 500 steps of 2 s: far past a one-minute limit
    cli = Cli.isolated(base / "vad-home")
    cli.set(VERL_HOME=tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=500, SAVE_FREQ=2)
    started = cli.start("slurm", "--slurm-gpus-per-node", "0", "--slurm-time-limit", "1",
                        "--slurm-startup-seconds", "5", "--slurm-step-seconds", "2")  # 5 + 2 x 2 s < 60 s: accepted
    yield cli, started["run_id"]
    try:
        cli.stop_all()
    finally:
        cli.store.close()
