"""The eight training features, their priority rules and the OOM escalation policy.

Pure: no I/O. The mapping of a feature to Hydra overrides lives in ``verl_async_dapo.verl``
because it depends on the verl version and the framework; this module only decides *which*
features a launch gets.

Priority (from the original skill): the user's explicit choice > the default performance
features > memory features appended after an OOM. An explicit choice is never removed, and a
feature the user explicitly turned off (``no_<name>``) is never appended by the OOM ladder.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

from verl_async_dapo.exceptions import FeatureError


class Feature(str, Enum):
    FLASH_ATTN = "flash_attn"
    DYNAMIC_BATCH = "dynamic_batch"
    REMOVE_PADDING = "remove_padding"
    GRADIENT_CHECKPOINTING = "gradient_checkpointing"
    OFFLOAD = "offload"
    RECOMPUTE = "recompute"
    PREFIX_CACHE = "prefix_cache"
    CHUNKED_PREFILL = "chunked_prefill"


class FeatureClass(str, Enum):
    PERFORMANCE = "performance"
    MEMORY = "memory"
    OPTIONAL = "optional"


@dataclass(frozen=True)
class FeatureInfo:
    feature: Feature
    klass: FeatureClass
    default_on: bool
    label_zh: str
    label_en: str


FEATURES: dict[Feature, FeatureInfo] = {
    info.feature: info
    for info in (
        FeatureInfo(Feature.FLASH_ATTN, FeatureClass.PERFORMANCE, True, "Flash Attention 加速", "Flash Attention"),
        FeatureInfo(Feature.DYNAMIC_BATCH, FeatureClass.PERFORMANCE, True, "动态 Batch Size", "dynamic batch size"),
        FeatureInfo(Feature.REMOVE_PADDING, FeatureClass.PERFORMANCE, True, "Remove Padding 优化", "remove padding"),
        FeatureInfo(
            Feature.GRADIENT_CHECKPOINTING, FeatureClass.PERFORMANCE, True, "梯度检查点", "gradient checkpointing"
        ),
        FeatureInfo(Feature.OFFLOAD, FeatureClass.MEMORY, False, "参数/优化器卸载", "param/optimizer offload"),
        FeatureInfo(Feature.RECOMPUTE, FeatureClass.MEMORY, False, "重计算", "recompute"),
        FeatureInfo(Feature.PREFIX_CACHE, FeatureClass.OPTIONAL, False, "Prefix Cache", "prefix caching"),
        FeatureInfo(Feature.CHUNKED_PREFILL, FeatureClass.OPTIONAL, False, "Chunked Prefill", "chunked prefill"),
    )
}

# Canonical order: how features are listed to the user and in plans.
FEATURE_ORDER: tuple[Feature, ...] = tuple(FEATURES)
DEFAULT_FEATURES: frozenset[Feature] = frozenset(f for f, i in FEATURES.items() if i.default_on)
# The OOM ladder for GPU out-of-memory during training, cheapest first.
GPU_OOM_LADDER: tuple[Feature, ...] = (Feature.OFFLOAD, Feature.RECOMPUTE)

# Words that mean "use the defaults" (the original skill asks the user to reply "默认").
DEFAULT_WORDS = frozenset({"default", "defaults", "默认", ""})
DISABLE_PREFIX = "no_"


def valid_names_text() -> str:
    names = ", ".join(f.value for f in FEATURE_ORDER)
    return f"valid features: {names} (prefix {DISABLE_PREFIX}<name> to turn one off, or 'default')"


@dataclass(frozen=True)
class FeatureChoice:
    """What the user said explicitly: features turned on and features turned off."""

    enabled: frozenset[Feature] = frozenset()
    disabled: frozenset[Feature] = frozenset()

    @property
    def is_default(self) -> bool:
        return not self.enabled and not self.disabled

    def to_names(self) -> list[str]:
        on = [f.value for f in FEATURE_ORDER if f in self.enabled]
        off = [DISABLE_PREFIX + f.value for f in FEATURE_ORDER if f in self.disabled]
        return on + off

    def merged(self, other: FeatureChoice) -> FeatureChoice:
        """``other`` wins where both speak of the same feature."""
        enabled = (self.enabled - other.disabled) | other.enabled
        disabled = (self.disabled - other.enabled) | other.disabled
        return FeatureChoice(frozenset(enabled), frozenset(disabled))


def parse_feature_names(names: Iterable[str]) -> FeatureChoice:
    """Parse user-given names such as ``["offload", "no_flash_attn"]`` or ``["default"]``.

    Raises :class:`FeatureError` naming the bad entry and the valid names; a name may not be
    both on and off.
    """
    enabled: set[Feature] = set()
    disabled: set[Feature] = set()
    for raw in names:
        if not isinstance(raw, str):
            raise FeatureError(f"feature names must be strings, got {type(raw).__name__}; {valid_names_text()}")
        name = raw.strip().lower().replace("-", "_")
        if name in DEFAULT_WORDS:
            continue
        target = disabled if name.startswith(DISABLE_PREFIX) else enabled
        base = name[len(DISABLE_PREFIX) :] if name.startswith(DISABLE_PREFIX) else name
        try:
            target.add(Feature(base))
        except ValueError:
            shown = raw if len(raw) <= 40 else raw[:40] + "…"
            raise FeatureError(f"unknown feature {shown!r}; {valid_names_text()}") from None
    both = enabled & disabled
    if both:
        names_both = ", ".join(sorted(f.value for f in both))
        raise FeatureError(f"feature(s) {names_both} both enabled and disabled; choose one")
    return FeatureChoice(frozenset(enabled), frozenset(disabled))


def parse_user_features(value: str | None) -> FeatureChoice:
    """Parse the ``USER_FEATURES`` environment variable (comma-separated, empty = defaults)."""
    if value is None:
        return FeatureChoice()
    return parse_feature_names(part for part in value.replace(";", ",").split(",") if part.strip())


_TRUE = frozenset({"1", "true", "yes", "on", "y", "t"})
_FALSE = frozenset({"0", "false", "no", "off", "n", "f", ""})


def parse_bool(value: str | bool | None, *, name: str) -> bool:
    """Parse a boolean environment value such as ``ENABLE_OFFLOAD=True``; reject anything else."""
    if isinstance(value, bool):
        return value
    text = (value or "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


def choice_from_env(user_features: str | None, enable_offload: str | bool | None) -> FeatureChoice:
    """``USER_FEATURES`` plus ``ENABLE_OFFLOAD=True`` (an explicit request for offload)."""
    choice = parse_user_features(user_features)
    if parse_bool(enable_offload, name="ENABLE_OFFLOAD"):
        choice = choice.merged(FeatureChoice(enabled=frozenset({Feature.OFFLOAD})))
    return choice


@dataclass(frozen=True)
class FeatureSet:
    """The features of one attempt, with where each came from."""

    explicit: FeatureChoice = field(default_factory=FeatureChoice)
    oom_appended: tuple[Feature, ...] = ()

    @property
    def defaults(self) -> frozenset[Feature]:
        """Default performance features still in force (the user did not turn them off)."""
        return DEFAULT_FEATURES - self.explicit.disabled

    @property
    def effective(self) -> tuple[Feature, ...]:
        on = self.defaults | self.explicit.enabled | (set(self.oom_appended) - self.explicit.disabled)
        return tuple(f for f in FEATURE_ORDER if f in on)

    def has(self, feature: Feature) -> bool:
        return feature in self.effective

    def with_appended(self, feature: Feature) -> FeatureSet:
        if feature in self.explicit.disabled:
            raise ValueError(f"{feature.value} was turned off by the user and cannot be appended")
        if self.has(feature):
            return self
        return replace(self, oom_appended=(*self.oom_appended, feature))

    def describe(self) -> dict[str, list[str]]:
        return {
            "effective": [f.value for f in self.effective],
            "explicit": self.explicit.to_names(),
            "default": [f.value for f in FEATURE_ORDER if f in self.defaults],
            "oom_appended": [f.value for f in self.oom_appended],
        }
