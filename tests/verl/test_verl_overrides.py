"""Hydra override rendering (checked with Hydra's own parser) and override diffs."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_async_dapo.exceptions import OverrideError
from verl_async_dapo.verl import Override, override_diff, render_value, split_override
from verl_async_dapo.verl.overrides import OverrideList

PARSER = OverridesParser.create()


def parsed(text: str) -> object:
    return PARSER.parse_override(text).value()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "True"),
        (False, "False"),
        (None, "null"),
        (0, "0"),
        (-1, "-1"),
        (0.6, "0.6"),
        (1e-6, "1e-06"),
        ("fsdp2", "fsdp2"),
        ("token-mean", "token-mean"),
        ("/verl/data/dapo-math-17k.parquet", "/verl/data/dapo-math-17k.parquet"),
        ("true", "'true'"),
        ("null", "'null'"),
        ("123", "'123'"),
        ("has space", "'has space'"),
        ("it's", "'it\\'s'"),
        (("console", "swanlab"), '["console","swanlab"]'),
    ],
)
def test_render(value: object, text: str) -> None:
    assert render_value(value) == text  # type: ignore[arg-type]
    assert parsed(f"k={text}") == (list(value) if isinstance(value, tuple) else value)


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r"), max_size=40
).filter(lambda s: "${" not in s)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_any_string_round_trips_through_hydra(value: str) -> None:
    assert parsed(f"a.b={render_value(value)}") == value


@settings(max_examples=100, deadline=None)
@given(st.lists(_text, max_size=4))
def test_string_lists_round_trip_through_hydra(values: list[str]) -> None:
    assert parsed(f"a.b={render_value(tuple(values))}") == values


@pytest.mark.parametrize("value", ["${oc.env:HOME}", "a\nb", float("nan"), float("inf"), object()])
def test_unsafe_values_are_refused(value: object) -> None:
    with pytest.raises(OverrideError):
        render_value(value)  # type: ignore[arg-type]


def test_override_render_and_prefix() -> None:
    assert Override("a.b", 1).render() == "a.b=1"
    assert Override("a.b", None, "++").render() == "++a.b=null"
    with pytest.raises(OverrideError, match="invalid override key"):
        Override("a..b", 1)
    with pytest.raises(OverrideError, match="invalid override key"):
        Override("a.b=c", 1)


def test_override_list_refuses_duplicates() -> None:
    items = OverrideList()
    items.set("a.b", 1)
    with pytest.raises(OverrideError, match="set twice"):
        items.set("a.b", 2, "++")
    assert items.rendered() == ("a.b=1",)


def test_split_override() -> None:
    assert split_override("++a.b=1") == ("++", "a.b", "1")
    assert split_override("+a.b=x=y") == ("+", "a.b", "x=y")
    assert split_override("a=") == ("", "a", "")
    assert split_override("~a.b") == ("~", "a.b", "")
    with pytest.raises(OverrideError):
        split_override("a.b")


def test_override_diff() -> None:
    prev = ["a=1", "b=x", "+c.d=2", "e=True"]
    new = ["a=1", "b=y", "++c.d=2", "f=[1,2]"]
    assert override_diff(prev, new) == ["b: x → y", "c.d: +=2 → ++=2", "+f=[1,2]", "-e=True"]
    assert override_diff(new, new) == []
    assert override_diff([], ["a=1"]) == ["+a=1"]
