"""verl stand-in for the one-step-off-policy ``main_ppo.py`` (the test double for verl's GPU workload).

Placed at ``recipe/one_step_off_policy/main_ppo.py`` up to v0.7.0 and at
``verl/experimental/one_step_off_policy/main_ppo.py`` from v0.7.1; run it like the real module from the tree root:
``python3 -m verl.experimental.one_step_off_policy.main_ppo <overrides>``. See standin_core.
"""

import sys
from pathlib import Path


def _tree_root() -> Path:
    """The tree root holds verl_standin/; with ``python3 -m`` from the root it is already on sys.path."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "verl_standin").is_dir():
            return parent
    raise RuntimeError(f"verl stand-in: no verl_standin/ above {__file__}")


if str(_tree_root()) not in sys.path:
    sys.path.insert(0, str(_tree_root()))

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from verl_standin import standin_core  # noqa: E402

standin_core.on_import("one_step_off")


@hydra.main(config_path="config", config_name="one_step_off_ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    standin_core.run(config, workflow="one_step_off", entry="main_ppo")


if __name__ == "__main__":
    main()
