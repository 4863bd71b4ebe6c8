"""The user's own recipe in the plan: Hydra override passthrough, parallelism, custom reward and data keys.

Composed against the real verl 0.6.1 and 0.9.1 config trees (every mode × framework): each value the user
gives lands where verl reads it (checked in the release's Python code: 0.6.1 ``verl/trainer/ppo/reward.py``
reads ``custom_reward_function``, 0.9.1 reads ``reward.custom_reward_function``; the ref model's parallel sizes
interpolate the actor's). Plus the refusals (secrets, smuggling, path escapes) and the merge rule: the user's
value wins, also over the OOM ladder, and the plan says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra.errors import ConfigCompositionException
from pydantic import ValidationError
from verl_compose import MAIN_VERSIONS, compose_full, compose_plan, make_request, make_settings, plan_for, select

from verl_async_dapo.exceptions import OverrideError, PlanError
from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.settings import Framework, Mode, TrainingSettings
from verl_async_dapo.verl import build_plan, checkpoint_dir_for
from verl_async_dapo.verl.parallel import choose, model_size_b
from verl_async_dapo.verl.user_overrides import parse_user_overrides

A = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
USER = (f"{A}.optim.lr=2e-6", "trainer.save_freq=9", "data.truncation=error", f"{A}.optim.weight_decay=0.05")
# FSDP: we set this key with ++ (override_config is an empty dict in verl): the user's plain one gets the ++ too.
FSDP_ATTN = "actor_rollout_ref.model.override_config.attn_implementation"
COMBOS = [(v, m, f) for v in MAIN_VERSIONS for m in Mode for f in Framework]


@pytest.mark.downloads
@pytest.mark.parametrize(("version", "mode", "framework"), COMBOS, ids=lambda x: getattr(x, "value", x))
def test_user_values_compose_where_verl_reads_them(verl_trees: Any, version: str, mode: Mode,
                                                   framework: Framework) -> None:  # fmt: skip
    tree = verl_trees(version)
    user = (*USER, f"{FSDP_ATTN}=eager") if framework is Framework.FSDP else USER
    plan = plan_for(tree, version, mode=mode, framework=framework, trainer_gpus=4, rollout_gpus=4,
                    extra_overrides=user, reward_fn_path="rewards/math.py", reward_fn_name="score",
                    prompt_key="question", reward_fn_key="ability", actor_tp=2, actor_pp=2, actor_cp=1,
                    ulysses_sp=2)  # fmt: skip
    cfg = compose_plan(tree, plan)
    assert select(cfg, f"{A}.optim.lr") == 2e-6
    assert select(cfg, "trainer.save_freq") == 9  # a key this project sets: the user's value replaced ours
    assert select(cfg, "data.truncation") == "error"
    assert select(cfg, f"{A}.optim.weight_decay") == 0.05
    if framework is Framework.FSDP:
        assert select(cfg, FSDP_ATTN) == "eager" and f"++{FSDP_ATTN}=eager" in plan.overrides
    assert sum(o.startswith("trainer.save_freq=") for o in plan.overrides) == 1
    root = "custom_reward_function" if version == "0.6.1" else "reward.custom_reward_function"
    assert select(cfg, f"{root}.path") == f"{tree}/rewards/math.py"
    assert select(cfg, f"{root}.name") == "score"
    assert select(cfg, "data.prompt_key") == "question"
    assert select(cfg, "data.reward_fn_key") == "ability"
    if framework is Framework.MEGATRON:
        for key, want in (("tensor_model_parallel_size", 2), ("pipeline_model_parallel_size", 2),
                          ("context_parallel_size", 1), ("expert_model_parallel_size", 1)):  # fmt: skip
            assert select(cfg, f"{A}.megatron.{key}") == want
            assert select(cfg, f"{REF}.megatron.{key}") == want  # the reference model follows the actor
    else:
        assert select(cfg, f"{A}.ulysses_sequence_parallel_size") == 2
        assert select(cfg, f"{REF}.ulysses_sequence_parallel_size") == 2
    assert {plan.sources[u.partition("=")[0]] for u in user} == {"user"}


@pytest.mark.downloads
@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_a_misspelt_user_key_fails_with_hydras_message(verl_trees: Any, version: str) -> None:
    tree = verl_trees(version)
    plan = plan_for(tree, version, framework=Framework.FSDP, extra_overrides=(f"{A}.optim.lrr=1e-6",))
    with pytest.raises(ConfigCompositionException) as info:
        compose_full(tree, Path(plan.entry.config_dir), plan.entry.config_name, plan.overrides)
    assert "lrr" in f"{info.value}\n{info.value.__cause__}"


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("trainer.swanlab_api_key=abc123456789", "secret"),
        ("trainer.hf_token=hf_0123456789abcdef", "secret"),
        ("data.train_files=http://bob:pw123456@host/x", "secret"),
        ("data.train_files=${oc.env:SWANLAB_API_KEY}", "'$'"),
        ("trainer.save_freq=1 --config-name=evil", "quoted"),
        ("trainer.project_name=a;rm", "';'"),
        ("trainer.project_name=`id`", "'`'"),
        ("--config-path=/tmp", "'-'"),
        ("hydra.run.dir=/tmp", "hydra.*"),
        ("data.train_files=/verl/../../etc/passwd", "'..'"),
        ("trainer.default_local_dir=ckpts", "absolute"),
        ("~trainer.logger", "~key"),
        ("actor_rollout_ref/actor=dp_actor", "dotted key"),
        ("trainer.save_freq", "dotted key"),
        ("a.b=1\nc.d=2", "'\\n'"),
    ],
)
def test_refused_overrides_say_why(bad: str, fragment: str) -> None:
    with pytest.raises(OverrideError) as info:
        parse_user_overrides([bad])
    assert fragment in str(info.value)
    assert "abc123456789" not in str(info.value) and "hf_0123456789abcdef" not in str(info.value)
    # The settings model refuses them the same way (EXTRA_OVERRIDES, --override and overrides all meet it).
    with pytest.raises(ValidationError):
        TrainingSettings(extra_overrides=(bad,))


def test_accepted_overrides_keep_their_text() -> None:
    items = ("trainer.logger=[console,wandb]", "+data.custom_flag=True", "++a.b.c='two words'",
             "trainer.default_local_dir=/data/ckpt")  # fmt: skip
    parsed = parse_user_overrides(items)
    assert [p.text for p in parsed] == list(items)
    assert [p.prefix for p in parsed] == ["", "+", "++", ""]
    with pytest.raises(OverrideError, match="given twice"):
        parse_user_overrides(["trainer.save_freq=1", "+trainer.save_freq=2"])


def test_environment_overrides_split_like_a_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXTRA_OVERRIDES", "trainer.save_freq=3 \"trainer.project_name='my project'\"")
    assert TrainingSettings().extra_overrides == ("trainer.save_freq=3", "trainer.project_name='my project'")


def test_a_known_secret_value_in_an_override_is_refused() -> None:
    from pydantic import SecretStr

    key = "plain-looking-key-0123456789"
    settings = make_settings("/verl", extra_overrides=(f"trainer.experiment_name={key}",))
    with pytest.raises(PlanError, match="secret value would appear"):
        build_plan(make_request(settings, "0.9.1", secret_values=(SecretStr(key),)))


def test_the_ladder_leaves_a_user_pinned_key_and_the_plan_says_so() -> None:
    pinned = f"{A}.fsdp_config.param_offload=False"
    ladder = FeatureSet().with_appended(Feature.OFFLOAD)
    plan = plan_for("/verl", "0.9.1", framework=Framework.FSDP, extra_overrides=(pinned,), features=ladder)
    assert pinned in plan.overrides
    assert plan.sources[f"{A}.fsdp_config.param_offload"] == "user"
    assert plan.sources[f"{A}.fsdp_config.optimizer_offload"] == "oom_ladder"
    assert f"OOM recovery would set {A}.fsdp_config.param_offload=True; kept your False" in plan.notes
    first = plan_for("/verl", "0.9.1", framework=Framework.FSDP, extra_overrides=(pinned,))
    assert "oom_ladder" not in first.sources.values()
    assert not any("OOM recovery" in n for n in first.notes)


def test_a_user_checkpoint_dir_is_where_the_supervisor_looks() -> None:
    settings = make_settings("/verl", extra_overrides=("trainer.default_local_dir=/data/ckpt/run",))
    plan = build_plan(make_request(settings, "0.9.1"))
    assert "trainer.default_local_dir=/data/ckpt/run" in plan.overrides
    assert checkpoint_dir_for(settings, "run-0001") == "/data/ckpt/run"


@pytest.mark.parametrize(
    ("model", "gpus", "tp", "pp"),
    [("Qwen3-8B", 8, 2, 1), ("Qwen2.5-0.5B-Instruct", 8, 1, 1), ("Qwen2.5-32B", 8, 8, 1),
     ("Llama-3-70B", 16, 8, 2), ("Llama-3-70B", 8, 8, 1), ("Qwen3-30B-A3B", 8, 8, 1), ("my-model", 8, 1, 1),
     ("Qwen3-8B", 1, 1, 1), ("Qwen3-8B", 6, 2, 1)],
)
def test_parallel_defaults_fit_the_model(model: str, gpus: int, tp: int, pp: int) -> None:
    par = choose(model_path=f"/verl/models/{model}", trainer_gpus=gpus, sequence_tokens=10240, tp=None, pp=None,
                 cp=None, ep=None, ulysses_sp=None)  # fmt: skip
    assert (par.tp, par.pp, par.cp, par.ep, par.ulysses_sp) == (tp, pp, 1, 1, 1)
    assert gpus % (par.tp * par.pp) == 0
    assert bool(par.notes) is (model_size_b(model) is None)


def test_long_sequences_get_ulysses_and_user_sizes_win() -> None:
    par = choose(model_path="Qwen3-8B", trainer_gpus=8, sequence_tokens=40960, tp=4, pp=None, cp=2, ep=None,
                 ulysses_sp=None)  # fmt: skip
    assert (par.tp, par.cp, par.ulysses_sp) == (4, 2, 2)


def test_parallel_sizes_that_do_not_divide_the_gpus_name_the_parameters() -> None:
    with pytest.raises(PlanError) as info:
        plan_for("/verl", "0.9.1", framework=Framework.MEGATRON, n_gpus=4, actor_tp=4, actor_pp=2)
    assert "ACTOR_TP=4 x ACTOR_PP=2" in str(info.value)
    assert {"actor_tp", "actor_pp", "n_gpus"} <= set(info.value.params)
    with pytest.raises(PlanError) as info:
        plan_for("/verl", "0.9.1", framework=Framework.FSDP, mode=Mode.ONE_STEP_OFF, trainer_gpus=3, ulysses_sp=2)
    assert "ULYSSES_SP=2" in str(info.value) and "ulysses_sp" in info.value.params


def test_reward_function_parameters_are_checked() -> None:
    with pytest.raises(ValidationError, match=r"\.py file"):
        TrainingSettings(reward_fn_path="/verl/rewards/math.txt")
    with pytest.raises(ValidationError, match="not a Python function name"):
        TrainingSettings(reward_fn_name="score; import os")
    with pytest.raises(ValidationError, match=r"'\.\.'"):
        TrainingSettings(reward_fn_path="../outside.py")
    assert TrainingSettings(reward_fn_path="/abs/r.py").resolved_reward_fn_path() == "/abs/r.py"
    assert TrainingSettings(reward_fn_path="r/x.py").resolved_reward_fn_path() == "/verl/r/x.py"


def test_a_rung_the_user_pinned_entirely_is_climbed_past() -> None:
    from verl_async_dapo.categories import ErrorCategory
    from verl_async_dapo.plans.launching import skip_pinned_rungs
    from verl_async_dapo.policy import AttemptConfig, decide

    pins = tuple(f"{k}=False" for k in (f"{A}.fsdp_config.param_offload", f"{A}.fsdp_config.optimizer_offload",
                                         f"{A}.fsdp_config.offload_policy", f"{REF}.fsdp_config.param_offload"))  # fmt: skip
    settings = make_settings("/verl", framework=Framework.FSDP, extra_overrides=pins)

    def overrides_of(config: AttemptConfig) -> tuple[str, ...]:
        return build_plan(make_request(settings, "0.9.1", features=config.features, tweaks=config.tweaks)).overrides

    def decide_from(config: AttemptConfig) -> Any:
        return decide(config, ErrorCategory.GPU_OOM, relaunches_so_far=0, max_retries=2, base_gpu_memory_utilization=0.6)

    first = AttemptConfig(features=FeatureSet())
    plain = decide_from(first)
    assert plain.changes == ("+offload",)  # the ladder alone does not know about the pins
    decision = skip_pinned_rungs(plain, overrides_of(first), overrides_of, decide_from)
    assert decision.relaunch and decision.changes == ("+recompute",)
    assert decision.reason.endswith("(skipped +offload: your overrides pin every key it changes)")
    assert overrides_of(decision.next_config) != overrides_of(first)  # type: ignore[arg-type]
    # Nothing pinned: the first rung stands.
    assert skip_pinned_rungs(plain, (), overrides_of, decide_from) is plain
