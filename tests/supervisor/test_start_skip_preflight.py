"""`start --skip-preflight` skips the checks, not the verl version read (issue #14, item 7: on the H200 preflight
reported verl 0.9.1, yet `start --container host --skip-preflight` refused "could not detect the verl version")."""

from __future__ import annotations

import json
from pathlib import Path

from sv_helpers import Cli


def test_skip_preflight_still_reads_the_verl_version(cli: Cli, host_verl_tree: Path) -> None:
    (host_verl_tree / "standin_control.json").write_text(json.dumps({"step_seconds": 0.02}), "utf-8")
    # No model or data files: preflight would refuse; skipping it must still find verl 0.9.1 in the tree.
    cli.set(VERL_HOME=host_verl_tree, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1, TRAIN_STEPS=2)
    assert "VERL_VERSION" not in cli.env
    started = cli.start("host", "--skip-preflight")
    assert started["verl_version"] == "0.9.1"
    assert started["preflight"] == []  # nothing was checked
    assert cli.run_row(started["run_id"]).spec.verl_version == "0.9.1"
    assert cli.wait_final(started["run_id"])["status"] == "succeeded", cli.explain(started["run_id"])


def test_skip_preflight_without_verl_says_what_to_set(cli: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "no-verl"
    empty.mkdir()
    cli.set(VERL_HOME=empty, TRAINER_GPUS=1, ROLLOUT_GPUS=1, ROLLOUT_TP=1)
    proc = cli.run("start", "--container", "host", "--skip-preflight", "--json")
    assert proc.returncode != 0
    assert "could not detect the verl version in the target; give it (e.g. 0.9.1) (change it with --verl-version, or VERL_VERSION)" in proc.stdout + proc.stderr
    assert cli.store.runs(10) == []  # bad input changes nothing
