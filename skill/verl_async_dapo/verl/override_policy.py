"""Which user overrides are refused, which only the user may approve, which are free (issue 27, item 3; pure).

A Hydra override reaches verl's whole config, and some keys there load code or send traffic elsewhere. Judged on the
key (any ``+``/``++`` prefix removed) and, for paths, the value; the keys are verl's own (0.6.1 and 0.9.x
``ppo_trainer.yaml``, ``_generated_ppo_trainer.yaml``, the DAPO recipe; tests/verl/test_verl_override_policy.py
checks the catalogue against those trees):

* **refused**, whoever asks: the trainer's Ray runtime environment (``…runtime_env…``, ``…env_vars…``: LD_PRELOAD,
  PYTHONPATH, a ``py_executable``, ``working_dir``, ``pip``), where Ray runs (``ray_kwargs.ray_init.address``, and
  every ``ray_init`` key but the resource counts: ``dashboard_host`` would open Ray's job API), and anything that
  changes where tracking traffic and its credentials go (a key naming a tracker, ``…proxy``);
* **asked of the user**, with the exact value shown: code the training imports or runs (``*.custom_reward_function.
  path``, ``data.custom_cls.path``, ``*.external_lib``, ``trust_remote_code=true``, ``_target_`` classes, agent loop /
  tool / interaction configs naming classes, profiler hook commands, a checkpoint to resume from, whose pickles load
  code), and output paths outside the run's tree (``trainer.default_local_dir=/etc/…``: the run's tree is VERL_HOME,
  where the checkpoints go by default);
* **free**: everything else (learning rates, batch sizes, lengths, feature switches, data files, the model path).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePosixPath


class Outcome(str, Enum):
    REFUSED = "refused"
    ASKED = "asked"
    FREE = "free"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str = ""


FREE = Verdict(Outcome.FREE)

# -- refused -------------------------------------------------------------------------------------------------------
_ENV_SEGMENTS = frozenset({"runtime_env", "env_vars", "env", "environment", "environ"})
_RAY_INIT = "ray_kwargs.ray_init"
_RAY_INIT_FREE = frozenset({"num_cpus", "num_gpus", "object_store_memory"})  # resource counts only
_TRACKER_WORDS = ("swanlab", "wandb", "mlflow", "clearml", "trackio", "vemlp", "tensorboard_url", "rl_insight")

# -- asked: code ---------------------------------------------------------------------------------------------------
# ``<parent>.path`` where the parent names a user module verl imports.
_CODE_PARENTS = frozenset({"custom_reward_function", "custom_cls", "custom_async_server", "custom_sampler", "module",
                           "datagen", "sampler"})  # fmt: skip
_CODE_LEAVES = frozenset({
    "external_lib", "_target_", "class_path", "reward_loop_module_path", "reward_loop_class_name",
    "checkpoint_callback_class", "custom_backend_module", "agent_loop_config_path", "agent_loop_manager_class",
    "tool_config_path", "function_tool_path", "interaction_config_path", "finish_hook_cmd", "resume_from_path",
})  # fmt: skip
_TRUE = frozenset({"true", "1", "yes", "on"})

# -- asked: output outside the run's tree --------------------------------------------------------------------------
_OUTPUT_LEAVES = frozenset({"default_local_dir", "default_hdfs_dir", "rollout_data_dir", "validation_data_dir",
                            "save_path", "timeline_json_file", "dump_dir", "output_dir", "log_dir"})  # fmt: skip

_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _is_null(value: str) -> bool:
    return _unquote(value).lower() in ("null", "none", "~", "")


def refusal(key: str, value: str) -> str | None:
    """Why no one may set ``key`` (already without its prefix), or None."""
    parts = key.split(".")
    lowered = [p.lower() for p in parts]
    if _ENV_SEGMENTS & set(lowered):
        return "the training's environment (Ray runtime_env / env_vars: LD_PRELOAD, PYTHONPATH, where secrets go)"
    if key == _RAY_INIT or key.startswith(_RAY_INIT + ".") or key == "ray_kwargs":
        leaf = parts[2] if len(parts) > 2 else None
        if leaf not in _RAY_INIT_FREE or len(parts) > 3:
            return "where and how Ray runs (its address, dashboard, runtime environment)"
    if any(word in p for p in lowered for word in _TRACKER_WORDS) or lowered[-1].endswith("proxy"):
        return "where the tracker's traffic and its credentials go (set SwanLab up with configure_swanlab / set_proxy)"
    if value.lstrip().startswith("{"):  # a whole sub-config: judged by the keys inside it
        for word in _WORD_RE.findall(value):
            if word.lower() in _ENV_SEGMENTS or (key.startswith("ray_kwargs") and word == "address"):
                return "a sub-config that sets the training's environment or Ray's address"
    return None


def code_reason(key: str, value: str) -> str | None:
    """Why ``key=value`` makes the training import or run code the user should see, or None."""
    parts = key.split(".")
    leaf = parts[-1]
    if _is_null(value):
        return None
    if leaf == "trust_remote_code":
        return "runs the model repository's own Python code" if _unquote(value).lower() in _TRUE else None
    if leaf in _CODE_LEAVES:
        return "loads or runs code named by this value"
    if leaf == "path" and len(parts) >= 2 and parts[-2] in _CODE_PARENTS:
        return "imports this Python file"
    if value.lstrip().startswith("{"):  # a whole sub-config: judged by the keys inside it
        words = set(_WORD_RE.findall(value))
        if words & (_CODE_LEAVES | {"trust_remote_code"}) or (
            "path" in words and (leaf in _CODE_PARENTS or words & _CODE_PARENTS)
        ):
            return "a sub-config naming code to load"
    return None


# Never "the run's tree", whatever VERL_HOME says (a VERL_HOME of / must not make /etc a checkpoint dir).
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/root", "/proc", "/sys",
                "/dev", "/run", "/var/run", "/var/spool", "/var/lib")  # fmt: skip


def _under(path: PurePosixPath, root: PurePosixPath) -> bool:
    return path == root or root in path.parents


def outside_run_tree(value: str, run_root: str) -> bool:
    """An absolute path (or ``~``, which Hydra leaves to the shell's meaning) not under ``run_root``, or one in a
    system directory."""
    path = _unquote(value)
    if path.startswith("~") or "://" in path:  # home-relative, or another file system (hdfs://, s3://)
        return True
    if not path.startswith("/"):
        return False  # relative: under the run's working directory (VERL_HOME); '..' is refused earlier
    candidate = PurePosixPath(path)
    if candidate == PurePosixPath("/") or any(_under(candidate, PurePosixPath(t)) for t in SYSTEM_TREES):
        return True
    return not _under(candidate, PurePosixPath(run_root))


def classify(key: str, value: str, run_root: str) -> Verdict:
    """The outcome for one override (``key`` without its ``+``/``++``), ``run_root`` = the run's tree (VERL_HOME)."""
    why = refusal(key, value)
    if why is not None:
        return Verdict(Outcome.REFUSED, why)
    why = code_reason(key, value)
    if why is not None:
        return Verdict(Outcome.ASKED, why)
    leaf = key.split(".")[-1]
    if leaf in _OUTPUT_LEAVES and not _is_null(value) and outside_run_tree(value, run_root):
        return Verdict(Outcome.ASKED, f"writes outside the run's tree {run_root}")
    if value.lstrip().startswith("{") and set(_WORD_RE.findall(value)) & _OUTPUT_LEAVES:
        return Verdict(Outcome.ASKED, "a sub-config that sets where the run writes")
    return FREE


@dataclass(frozen=True)
class Approval:
    """One thing only the user may approve: what (an override's text, or a run parameter and its value) and why."""

    what: str
    why: str

    def line(self) -> str:
        return f"{self.what} ({self.why})"


def approvals(
    overrides: Iterable[tuple[str, str, str]], run_root: str, *, reward_fn_path: str | None, ckpt_dir: str | None,
    code_root: str | None = None,
) -> tuple[Approval, ...]:
    """Everything of a run only the user may approve: the asked overrides ((key, value, text) each, shown as
    written), the reward function file (code, always), a checkpoint directory outside the run's tree, and
    ``code_root`` when given (VERL_HOME: training runs ``python -m`` there, so its Python files are imported; the
    caller drops it when it is the user's configured one)."""
    out: list[Approval] = []
    if code_root:
        out.append(Approval(f"verl_home={code_root}", "runs verl's Python code from this directory"))
    if reward_fn_path:
        out.append(Approval(f"reward_fn_path={reward_fn_path}", "imports this Python file as the reward function"))
    if ckpt_dir and outside_run_tree(ckpt_dir, run_root):
        out.append(Approval(f"ckpt_dir={ckpt_dir}", f"writes checkpoints outside the run's tree {run_root}"))
    for key, value, text in overrides:
        verdict = classify(key, value, run_root)
        if verdict.outcome is Outcome.ASKED:
            out.append(Approval(text, verdict.reason))
    return tuple(out)
