"""verl stand-in for ``recipe/dapo/main_dapo.py`` (the test double for verl's GPU workload; see standin_core).

Run it exactly like the real recipe, from the verl tree root:
``python3 -m recipe.dapo.main_dapo [--config-path=... --config-name=...] <overrides>``.
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

standin_core.on_import("dapo")


@hydra.main(config_path="config", config_name="dapo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    standin_core.run(config, workflow="dapo", entry="main_dapo")


if __name__ == "__main__":
    main()
