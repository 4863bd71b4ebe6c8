"""Test-suite wiring. Fixtures live in tests/harness/fixtures.py and are available to every test:

Docker (a test using any of these is marked ``docker`` automatically; without an engine it is skipped, but with
``CI=true`` it fails loudly):
    docker_engine      session  None: a Docker Engine answers (runs tests/harness/ensure_docker.sh if needed)
    docker_client      session  docker.DockerClient (docker.from_env())
    test_image         session  str: tag "verl-async-dapo-test:<hash>" from tests/harness/build_image.sh (cached);
                                python3 + hydra/omegaconf/swanlab, verl stand-in trees at /opt/verl-0.6.1,
                                /opt/verl-0.9.1 and /verl (= 0.9.1, the default VERL_HOME); CMD sleep infinity
    test_labels        session  dict: labels for any container a test creates (session cleanup removes them)
    container_factory  function make(**containers.run kwargs) -> Container: running, labelled, network_mode "none"
                                by default ("host" is the only other choice), removed after the test
    container          function Container: container_factory() with the defaults

Host target:
    make_host_verl_tree function make(version="0.9.1") -> Path: a private stand-in verl tree under tmp_path
    host_verl_tree      function Path: make_host_verl_tree("0.9.1"); run the stand-in with
                                 [sys.executable, "-m", "recipe.dapo.main_dapo", ...] and cwd=the tree

Helpers (import from harness.fixtures): exec_argv(container, argv, environment=, workdir=, timeout_s=) ->
ExecOutcome(exit_code, stdout, stderr, output); put_file(container, path, content); read_file(container, path).

Stand-in failure injection: write JSON to ``<tree>/standin_control.json`` (schema: tests/standin/entry/
standin_control.py). Markers: ``slow`` tests run only with RUN_SLOW=1. At session end this session's labelled
containers (and labelled leftovers older than two hours) are removed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Preflight refuses a target without GPUs unless that is allowed explicitly. The test image and this machine have
# none (the verl stand-in needs none), so the suite allows it server-wide; the tests of the refusal unset it.
os.environ["VERL_ASYNC_DAPO_ALLOW_NO_GPUS"] = "1"
# A supervisor's watchdog (watchdog.py) restarts a killed supervisor by itself. Tests that kill supervisors check
# each restart point deterministically, so it is off for the suite; tests/supervisor/test_supervisor_watchdog.py
# turns it on and kills one.
os.environ["VERL_ASYNC_DAPO_WATCHDOG"] = "0"

# tests/ on sys.path so "harness.fixtures" and tests/standin helpers import the same way from anywhere.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The fixtures module is a plugin: it also holds the hooks (auto `docker` marker, RUN_SLOW, session cleanup).
pytest_plugins = ["harness.fixtures"]
