"""The server's fixed texts: its instructions, the start prompt, the next step after a start, the log resource."""

from __future__ import annotations

# -- fixed texts ---------------------------------------------------------------------------

INSTRUCTIONS = (
    "Launches and supervises verl DAPO and one-step-off-policy RL training in a Docker container or on the "
    "host. Setup is four questions answered in a fixed order: 1) container (list_containers, then "
    "select_container), 2) proxy (set_proxy), 3) features (choose_features), 4) SwanLab (configure_swanlab; "
    "skipped when the environment or the config file already configures it). get_session tells which question "
    "is next. start_training then returns at once with a run id and the SwanLab link; a background supervisor "
    "keeps the run going and recovers from GPU out-of-memory errors (offload, then recompute, resuming from the "
    "last checkpoint). get_progress and check_errors report on a run; stop_training ends one. "
    "configure_notifications sets where the supervisor reports errors and hangs when nobody is watching "
    "(webhook, Slack, Feishu, DingTalk, WeCom, desktop); while connected, run events also arrive as updates of "
    "the resource verl-async-dapo://runs/{run_id}/log."
)

START_NEXT_STEP = (
    "training runs in the background under a supervisor that recovers from OOM on its own; "
    "get_progress and check_errors report on it"
)

START_PROMPT = """Start verl DAPO training (verl-async-dapo).

Ask the user these four questions one at a time, in this order, with the original wording (Chinese, English beside).
Each answer goes to one tool; a tool called out of order replies with the step that is missing.

1. Container — call `list_containers` and show its `menu_zh` (English: `menu_en`):
     检测到以下容器：
       [1] … (运行中)
       [n] 创建新容器
     请选择容器 (1/…/n):
   Then `select_container` with the chosen name, "host", or `create` {name, image, gpus, shm_size, mounts, writable}.
2. Proxy — 请提供代理配置（如不需要请回复"无"）：http_proxy / https_proxy
   (Proxy settings, reply "none" if not needed) → `set_proxy` (all empty = no proxy).
3. Features — 是否有自定义特性需求？(回复"默认"使用默认配置)
   (Any custom features? Reply "default" for the defaults) → `choose_features` (["default"] = defaults:
   flash_attn, dynamic_batch, remove_padding, gradient_checkpointing on; offload, recompute, prefix_cache,
   chunked_prefill off; offload and recompute are added automatically after an OOM).
4. SwanLab — only when `get_session` shows swanlab_preconfigured = false:
     SwanLab 监控配置：Host / API Key
   (SwanLab monitoring: host and API key) → `configure_swanlab`. Where the client shows forms, the key is asked
   in a form and never passes through the conversation; mode local or disabled needs no key.

Then call `start_training`. Give the user the SwanLab link and the monitor commands it returns, then stay silent:
report only when something goes wrong (OOM the supervisor could not fix, a crash, a configuration error).
When the user asks how it is going, call `get_progress`; for failures, `check_errors`.
"""

def log_resource_text(run_id: str, fenced_log: str | None, status: str) -> str:
    if fenced_log is None:
        return f"run {run_id} ({status}): no training log yet"
    return f"run {run_id} ({status}), last 64 KiB of the current attempt's log:\n{fenced_log}"
