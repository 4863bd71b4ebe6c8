"""The hostile-override suite (issue 27, item 3): every case with its expected outcome, table-driven.

Seen before: 48 of 92 hostile overrides were accepted without a question, among them code paths
(``*.custom_reward_function.path``, ``data.custom_cls.path``, ``actor_rollout_ref.model.external_lib``), the trainer's
environment (``+ray_kwargs.ray_init.runtime_env.env_vars.{LD_PRELOAD,PYTHONPATH,SWANLAB_API_HOST}``), Ray's address and
``trainer.default_local_dir=/etc/…`` (a real run wrote checkpoints there). Now each override is **refused** (nobody may
set it), **asked** (only the user may approve it, with the exact value shown) or **free**. The outcome is what the real
code paths decide: ``parse_user_overrides`` (the refusal every face and the settings validator use) and
``override_policy.approvals`` (what ``start_training`` asks), with VERL_HOME ``/verl`` as the run's tree.
"""

from __future__ import annotations

import zipfile

import pytest
import yaml
from verl_compose import make_tree_module

from verl_async_dapo.exceptions import OverrideError
from verl_async_dapo.verl.override_policy import approvals
from verl_async_dapo.verl.user_overrides import parse_user_overrides

RUN_ROOT = "/verl"
R, A, F = "refused", "asked", "free"

CASES: list[tuple[str, str]] = [
    # -- the trainer's environment: refused ------------------------------------------------------------------------
    ("+ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD=/tmp/evil.so", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=/tmp/evil", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.SWANLAB_API_HOST=http://attacker.example", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.SWANLAB_WEB_HOST=http://attacker.example", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_BASE_URL=http://attacker.example", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.HTTPS_PROXY=http://attacker.example:3128", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.HTTP_PROXY=http://attacker.example:3128", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.NO_PROXY=*", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.REQUESTS_CA_BUNDLE=/tmp/ca.pem", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.SSL_CERT_FILE=/tmp/ca.pem", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.HF_ENDPOINT=http://attacker.example", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONSTARTUP=/tmp/x.py", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.BASH_ENV=/tmp/x.sh", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.LD_LIBRARY_PATH=/tmp", R),
    ("+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES=0", R),
    ("++ray_kwargs.ray_init.runtime_env.env_vars.NCCL_DEBUG=INFO", R),
    ("ray_kwargs.ray_init.runtime_env.py_executable=/tmp/evil", R),
    ("ray_kwargs.ray_init.runtime_env.py_executable='uv run --frozen'", R),
    ("+ray_kwargs.ray_init.runtime_env.working_dir=/tmp/evil", R),
    ("+ray_kwargs.ray_init.runtime_env.py_modules=[/tmp/evil]", R),
    ("+ray_kwargs.ray_init.runtime_env.pip=[evil-package]", R),
    ("+ray_kwargs.ray_init.runtime_env.conda=evil", R),
    ("+ray_kwargs.ray_init.runtime_env.excludes=[]", R),
    ("+ray_kwargs.ray_init.runtime_env={env_vars:{LD_PRELOAD:/tmp/evil.so}}", R),
    ("ray_kwargs.ray_init={runtime_env:{env_vars:{A:b}}}", R),
    ("++ray_kwargs={ray_init:{address:auto}}", R),
    ("+trainer.runtime_env.env_vars.X=1", R),
    ("+actor_rollout_ref.rollout.engine_kwargs.vllm.env_vars.LD_PRELOAD=/tmp/x.so", R),
    ("+actor_rollout_ref.rollout.env.LD_PRELOAD=/tmp/x.so", R),
    ("+reward.environment.PYTHONPATH=/tmp", R),
    # -- where Ray runs: refused -----------------------------------------------------------------------------------
    ("+ray_kwargs.ray_init.address=ray://attacker.example:10001", R),
    ("+ray_kwargs.ray_init.address=auto", R),
    ("++ray_kwargs.ray_init.address=127.0.0.1:6379", R),
    ("+ray_kwargs.ray_init.dashboard_host=0.0.0.0", R),
    ("+ray_kwargs.ray_init.include_dashboard=True", R),
    ("+ray_kwargs.ray_init._temp_dir=/tmp/ray-evil", R),
    ("+ray_kwargs.ray_init.namespace=other", R),
    ("+ray_kwargs.ray_init._node_ip_address=10.0.0.1", R),
    ("+ray_kwargs.ray_init.storage=/etc", R),
    ("+ray_kwargs.ray_init.logging_config=x", R),
    ("+ray_kwargs.ray_init.num_cpus.extra=1", R),
    ("ray_kwargs.ray_init=null", R),
    # -- where tracking traffic and its credentials go: refused ----------------------------------------------------
    ("+trainer.wandb_proxy=http://attacker.example:3128", R),
    ("+trainer.swanlab_host=http://attacker.example", R),
    ("+trainer.swanlab.api_host=http://attacker.example", R),
    ("+trainer.wandb.base_url=http://attacker.example", R),
    ("+trainer.mlflow_tracking_uri=http://attacker.example", R),
    ("+trainer.clearml.host=http://attacker.example", R),
    ("+trainer.trackio_server=http://attacker.example", R),
    ("+trainer.vemlp_wandb_host=http://attacker.example", R),
    ("+actor_rollout_ref.rollout.http_proxy=http://attacker.example", R),
    ("+data.https_proxy=http://attacker.example", R),
    ("+trainer.proxy=http://attacker.example", R),
    ("+trainer.rl_insight.url=http://attacker.example", R),
    # -- earlier rules (issue 20): still refused -------------------------------------------------------------------
    ("hydra.searchpath=[file:///tmp/evil]", R),
    ("hydra.run.dir=/etc", R),
    ("+hydra.job.chdir=True", R),
    ("data.train_files=${oc.env:SWANLAB_API_KEY}", R),
    ("trainer.experiment_name=$(id)", R),
    ("trainer.experiment_name=`id`", R),
    ("trainer.experiment_name=a;touch /tmp/x", R),
    ("trainer.experiment_name=a|b", R),
    ("trainer.experiment_name=a&b", R),
    ("trainer.experiment_name=a>b", R),
    ("-m", R),
    ("--config-dir=/tmp", R),
    ("~trainer.logger", R),
    ("data.train_files=/verl/../etc/passwd", R),
    ("trainer.default_local_dir=../../etc", R),
    ("trainer.default_local_dir=ckpts", R),
    ("trainer.wandb_api_key=0123456789abcdef", R),
    ("data.train_files=a b", R),
    ("not an override", R),
    ("trainer.save_freq", R),
    # -- code the training imports or runs: asked ------------------------------------------------------------------
    ("custom_reward_function.path=/tmp/evil.py", A),
    ("custom_reward_function.path=/verl/rewards/math.py", A),
    ("reward.custom_reward_function.path=/tmp/evil.py", A),
    ("+reward.custom_reward_function.path=/verl/r.py", A),
    ("data.custom_cls.path=/tmp/evil_dataset.py", A),
    ("data.custom_cls.path=mydata.py", A),
    ("actor_rollout_ref.model.external_lib=evil_module", A),
    ("critic.model.external_lib=evil_module", A),
    ("reward_model.model.external_lib=evil_module", A),
    ("actor_rollout_ref.model.trust_remote_code=True", A),
    ("actor_rollout_ref.model.trust_remote_code=true", A),
    ("critic.model.trust_remote_code=True", A),
    ("data.trust_remote_code=True", A),
    ("reward_model.model.trust_remote_code=True", A),
    ("actor_rollout_ref.actor._target_=os.system", A),
    ("+reward.reward_manager.module._target_=builtins.exec", A),
    ("reward.reward_manager.module.path=/tmp/manager.py", A),
    ("actor_rollout_ref.rollout.agent.agent_loop_config_path=/tmp/loops.yaml", A),
    ("actor_rollout_ref.rollout.agent.custom_async_server.path=/tmp/server.py", A),
    ("actor_rollout_ref.rollout.multi_turn.tool_config_path=/tmp/tools.yaml", A),
    ("actor_rollout_ref.rollout.multi_turn.function_tool_path=/tmp/tools.py", A),
    ("+actor_rollout_ref.rollout.multi_turn.interaction_config_path=/tmp/i.yaml", A),
    ("actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=evil", A),
    ("reward_model.reward_loop_module_path=/tmp/loop.py", A),
    ("reward_model.reward_loop_class_name=Evil", A),
    ("trainer.checkpoint_callback_class=evil.Callback", A),
    ("trainer.v1.sampler.custom_sampler.path=/tmp/sampler.py", A),
    ("data.sampler.class_path=/tmp/sampler.py", A),
    ("data.datagen.path=/tmp/gen.py", A),
    ("global_profiler.finish_hook_cmd='touch /tmp/pwned'", A),
    ("actor_rollout_ref.actor.profiler.finish_hook_cmd=id", A),
    ("trainer.resume_from_path=/tmp/evil_ckpt", A),
    ("data.custom_cls={path:/tmp/evil.py,name:Evil}", A),
    ("custom_reward_function={path:/tmp/evil.py,name:compute_score}", A),
    ("actor_rollout_ref.model={path:/m,external_lib:evil}", A),
    ("+actor_rollout_ref.model={trust_remote_code:true}", A),
    ("++actor_rollout_ref.model.external_lib=evil", A),
    # -- output outside the run's tree: asked ----------------------------------------------------------------------
    ("trainer.default_local_dir=/etc/cron.d", A),
    ("trainer.default_local_dir=/etc/verl-ckpt", A),
    ("trainer.default_local_dir=/root/.ssh", A),
    ("trainer.default_local_dir=/usr/lib/python3/dist-packages", A),
    ("trainer.default_local_dir=/tmp/ckpt", A),
    ("trainer.default_local_dir=/data/ckpt", A),
    ("trainer.default_local_dir=/", A),
    ("trainer.default_local_dir=/verl/../etc", R),
    ("trainer.default_local_dir='/etc/x'", A),
    ("trainer.default_hdfs_dir=hdfs://attacker/ckpt", A),
    ("trainer.rollout_data_dir=/etc/rollouts", A),
    ("trainer.validation_data_dir=/root/val", A),
    ("trainer.rollout_data_dir=~/rollouts", A),
    ("global_profiler.save_path=/etc/profile.d", A),
    ("actor_rollout_ref.actor.profiler.save_path=/usr/share/x", A),
    ("+ray_kwargs.timeline_json_file=/etc/timeline.json", A),
    ("ray_kwargs.timeline_json_file=/tmp/t.json", A),
    ("+skip.rollout.dump_dir=/etc/dump", A),
    ("trainer={default_local_dir:/etc/x}", A),
    # -- free ------------------------------------------------------------------------------------------------------
    ("trainer.default_local_dir=/verl/checkpoints/exp", F),
    ("trainer.default_local_dir=/verl/ckpt", F),
    ("trainer.rollout_data_dir=/verl/rollouts", F),
    ("trainer.rollout_data_dir=null", F),
    ("trainer.validation_data_dir=val_out", F),
    ("global_profiler.save_path=outputs/profile", F),
    ("ray_kwargs.timeline_json_file=null", F),
    ("+ray_kwargs.ray_init.num_cpus=32", F),
    ("ray_kwargs.ray_init.num_cpus=16", F),
    ("+ray_kwargs.ray_init.num_gpus=8", F),
    ("actor_rollout_ref.model.trust_remote_code=False", F),
    ("data.trust_remote_code=false", F),
    ("actor_rollout_ref.model.external_lib=null", F),
    ("custom_reward_function.path=null", F),
    ("custom_reward_function.name=compute_score", F),
    ("reward.custom_reward_function.name=my_score", F),
    ("data.custom_cls.name=MyDataset", F),
    ("data.sampler.class_name=MySampler", F),
    ("actor_rollout_ref.model.path=/verl/models/Qwen3-8B", F),
    ("actor_rollout_ref.model.path=/models/Qwen3-8B", F),
    ("data.train_files=/data/gsm8k/train.parquet", F),
    ("data.val_files=[/data/a.parquet,/data/b.parquet]", F),
    ("data.max_prompt_length=2048", F),
    ("data.max_response_length=8192", F),
    ("data.train_batch_size=64", F),
    ("data.prompt_key=question", F),
    ("data.reward_fn_key=data_source", F),
    ("actor_rollout_ref.actor.optim.lr=1e-6", F),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=16", F),
    ("actor_rollout_ref.actor.use_dynamic_bsz=True", F),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384", F),
    ("actor_rollout_ref.actor.fsdp_config.param_offload=True", F),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload=True", F),
    ("actor_rollout_ref.ref.fsdp_config.param_offload=False", F),
    ("actor_rollout_ref.model.enable_gradient_checkpointing=True", F),
    ("actor_rollout_ref.model.use_remove_padding=True", F),
    ("actor_rollout_ref.rollout.name=vllm", F),
    ("actor_rollout_ref.rollout.gpu_memory_utilization=0.5", F),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", F),
    ("actor_rollout_ref.rollout.n=8", F),
    ("actor_rollout_ref.rollout.enforce_eager=True", F),
    ("actor_rollout_ref.rollout.free_cache_engine=True", F),
    ("actor_rollout_ref.rollout.max_num_batched_tokens=8192", F),
    ("actor_rollout_ref.rollout.temperature=1.0", F),
    ("actor_rollout_ref.rollout.mode=async", F),
    ("algorithm.adv_estimator=grpo", F),
    ("algorithm.use_kl_in_reward=False", F),
    ("algorithm.filter_groups.enable=True", F),
    ("trainer.total_training_steps=100", F),
    ("trainer.save_freq=10", F),
    ("trainer.test_freq=5", F),
    ("trainer.n_gpus_per_node=8", F),
    ("trainer.nnodes=1", F),
    ("trainer.project_name=verl-dapo", F),
    ("trainer.experiment_name=qwen3-8b-dapo", F),
    ("trainer.logger=[console,swanlab]", F),
    ("trainer.val_before_train=False", F),
    ("trainer.resume_mode=auto", F),
    ("trainer.max_actor_ckpt_to_keep=2", F),
    ("reward_model.reward_manager=dapo", F),
    ("reward_model.overlong_buffer.enable=True", F),
    ("+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096", F),
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", F),
    ("actor_rollout_ref.actor.megatron.param_offload=True", F),
    ("sandbox_fusion.url=null", F),
    ("+actor_rollout_ref.model.override_config.attention_dropout=0.0", F),
    ("actor_rollout_ref.model.custom_chat_template=null", F),
]


def outcome(text: str) -> str:
    try:
        (parsed,) = parse_user_overrides([text])
    except OverrideError:
        return R
    asked = approvals([(parsed.key, parsed.value, parsed.text)], RUN_ROOT, reward_fn_path=None, ckpt_dir=None)
    assert all(a.what == text for a in asked)  # shown exactly as written
    return A if asked else F


def test_the_suite_is_large_and_covers_every_outcome() -> None:
    assert len(CASES) >= 150
    assert len({text for text, _ in CASES}) == len(CASES), "a case is listed twice"
    counts = {k: sum(1 for _, e in CASES if e == k) for k in (R, A, F)}
    assert min(counts.values()) >= 30, counts


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[t[:70] for t, _ in CASES])
def test_each_hostile_override_gets_its_outcome(text: str, expected: str) -> None:
    assert outcome(text) == expected


def test_the_reward_file_and_the_checkpoint_parameter_are_asked_too() -> None:
    asked = approvals([], RUN_ROOT, reward_fn_path="/verl/rewards/math.py", ckpt_dir="/etc/ckpt")
    assert [a.what for a in asked] == ["reward_fn_path=/verl/rewards/math.py", "ckpt_dir=/etc/ckpt"]
    assert approvals([], RUN_ROOT, reward_fn_path=None, ckpt_dir="/verl/checkpoints/x") == ()
    # A VERL_HOME of / does not make the system directories the run's tree.
    assert approvals([], "/", reward_fn_path=None, ckpt_dir="/etc/cron.d")
    # VERL_HOME is where `python -m` imports verl from: code, when the caller names it.
    (home,) = approvals([], "/tmp/planted", reward_fn_path=None, ckpt_dir=None, code_root="/tmp/planted")
    assert home.what == "verl_home=/tmp/planted" and "Python" in home.why


def _config_keys(version: str) -> set[str]:
    keys: set[str] = set()
    with zipfile.ZipFile(make_tree_module.wheel_cache(version)) as wheel:
        for name in wheel.namelist():
            if not (name.startswith("verl/trainer/config/") and name.endswith(".yaml")):
                continue
            try:
                tree = yaml.safe_load(wheel.read(name))
            except yaml.YAMLError:
                continue

            def walk(node: object, path: tuple[str, ...]) -> None:
                if isinstance(node, dict):
                    for k, v in node.items():
                        walk(v, (*path, str(k)))
                elif path:
                    keys.add(".".join(path))

            walk(tree, ())
    return keys


@pytest.mark.downloads
def test_the_asked_code_keys_are_verls_own() -> None:
    """The asked keys of the table are real keys of verl 0.6.1 or 0.9.1 (so the suite guards what verl reads)."""
    known = _config_keys("0.6.1") | _config_keys("0.9.1")
    code_keys = {text.lstrip("+").partition("=")[0] for text, expected in CASES
                 if expected == A and "={" not in text and "profiler.save_path" not in text}  # fmt: skip
    missing = sorted(k for k in code_keys if k not in known)
    assert not missing, missing
