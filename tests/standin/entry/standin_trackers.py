"""verl's ``Tracking`` for the stand-in: console lines, SwanLab the way verl calls it, the ``file`` logger."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from verl_standin.standin_progress import RayOut, concat_dict_to_str

# verl/utils/tracking.py Tracking.supported_backend (main)
SUPPORTED = (
    "wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio", "file", "rl_insight",
)  # fmt: skip


def backends(logger: Any) -> list[str]:
    """trainer.logger is a list, but verl also accepts a bare string."""
    if logger is None:
        return []
    if isinstance(logger, str):
        return [logger]
    return [str(b) for b in logger]


class Tracking:
    def __init__(self, out: RayOut, names: list[str], project: str, experiment: str, config: dict[str, Any]) -> None:
        self.out = out
        self.names = names
        self.swanlab: Any = None
        self.file: Any = None
        for name in names:
            assert name in SUPPORTED, f"{name} is not supported"
        if "swanlab" in names:
            self._init_swanlab(project, experiment, config)
        if "file" in names:
            self._init_file(project, experiment)
        skipped = [n for n in names if n not in ("console", "swanlab", "file")]
        if skipped:
            out.runner(f"verl stand-in: logger backend(s) {skipped} are not emulated; skipping them")

    def _init_swanlab(self, project: str, experiment: str, config: dict[str, Any]) -> None:
        try:
            import swanlab
        except ImportError:
            self.out.runner("verl stand-in: the swanlab package is not installed here; SwanLab logging is skipped")
            return
        # Same order and arguments as verl/utils/tracking.py (unchanged since v0.5.0): no host is passed.
        api_key = os.environ.get("SWANLAB_API_KEY", None)
        log_dir = os.environ.get("SWANLAB_LOG_DIR", "swanlog")
        mode = os.environ.get("SWANLAB_MODE", "cloud")
        if api_key:
            swanlab.login(api_key)
        swanlab.init(
            project=project,
            experiment_name=experiment,
            config={"FRAMEWORK": "verl", **config},
            logdir=log_dir,
            mode=mode,
        )
        self.swanlab = swanlab

    def _init_file(self, project: str, experiment: str) -> None:
        path = os.environ.get("VERL_FILE_LOGGER_PATH")
        if not path:
            root = os.environ.get("VERL_FILE_LOGGER_ROOT", ".")
            path = os.path.join(root, project, f"{experiment}.jsonl")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - verl truncates on every restart too

    def log(self, data: dict[str, Any], step: int) -> None:
        if "console" in self.names:
            self.out.runner(concat_dict_to_str(data, step=step))
        if self.swanlab is not None:
            self.swanlab.log({k: float(v) for k, v in data.items()}, step=step)
        if self.file is not None:
            self.file.write(json.dumps({"step": step, "data": {k: float(v) for k, v in data.items()}}) + "\n")
            self.file.flush()

    def finish(self) -> None:
        if self.swanlab is not None:
            self.swanlab.finish()
            self.swanlab = None
        if self.file is not None:
            self.file.close()
            self.file = None
