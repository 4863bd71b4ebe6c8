"""The one exception tree (exceptions.py): every exception the package defines belongs to it, the faces show its
messages, and the stdlib bases each class had before the tree are kept (``except ValueError`` still works)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import verl_async_dapo
from verl_async_dapo import exceptions as exc
from verl_async_dapo.errors import user_facing_error


def _package_exceptions() -> set[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for info in pkgutil.walk_packages(verl_async_dapo.__path__, prefix="verl_async_dapo."):
        if info.name.endswith(("__main__", ".server", ".server.app", ".server.http")):
            continue  # faces: importing them builds the MCP server; they define no exception outside the tree
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("verl_async_dapo."):
                found.add(obj)
    return found


def test_every_exception_of_the_package_is_in_the_tree() -> None:
    classes = _package_exceptions()
    assert len(classes) >= 20  # the walk found the tree (and the ray errors beside it), not nothing
    outside = sorted(c.__qualname__ for c in classes if not issubclass(c, exc.VerlAsyncDapoError))
    assert outside == []


@pytest.mark.parametrize(
    ("cls", "stdlib"),
    [
        (exc.UserInputError, ValueError), (exc.FlowError, ValueError), (exc.FeatureError, ValueError),
        (exc.PlanError, ValueError), (exc.OverrideError, ValueError), (exc.VersionError, ValueError),
        (exc.EnvError, ValueError), (exc.InvalidTargetInput, ValueError), (exc.TargetError, RuntimeError),
        (exc.StoreError, RuntimeError), (exc.SecretStoreError, RuntimeError), (exc.SecretNotFoundError, KeyError),
    ],
)  # fmt: skip
def test_the_stdlib_bases_are_kept(cls: type[Exception], stdlib: type[Exception]) -> None:
    assert issubclass(cls, stdlib)


def test_swanlab_config_errors_are_input_errors_but_not_value_errors() -> None:
    # A ValueError raised in a pydantic validator becomes a ValidationError that carries the rejected input (the key).
    assert issubclass(exc.SwanlabConfigError, exc.InputError)
    assert not issubclass(exc.SwanlabConfigError, ValueError)


def test_the_branches() -> None:
    assert issubclass(exc.InvalidTargetInput, exc.TargetError) and issubclass(exc.InvalidTargetInput, exc.InputError)
    assert issubclass(exc.TargetGone, exc.TargetUnavailable)
    assert issubclass(exc.StoreError, exc.StateError) and issubclass(exc.SecretStoreError, exc.StateError)
    assert not issubclass(exc.TargetError, exc.InputError)


def test_the_old_import_paths_name_the_same_classes() -> None:
    from verl_async_dapo.exceptions import FlowError, PlanError, StoreError, TargetError, UserInputError

    assert (FlowError, UserInputError, StoreError, TargetError, PlanError) == (
        exc.FlowError, exc.UserInputError, exc.StoreError, exc.TargetError, exc.PlanError,
    )  # fmt: skip


def test_faces_show_every_branch_and_keep_bugs_as_bugs() -> None:
    for error in (exc.FlowError("call select_container first"), exc.TargetGone("container gone"),
                  exc.StoreError("disk full"), exc.SwanlabConfigError("set SWANLAB_HOST"),
                  exc.SecretNotFoundError("secret s1 not found")):  # fmt: skip
        assert user_facing_error(error) == str(error)
    assert str(exc.SecretNotFoundError("secret s1 not found")) == "secret s1 not found"  # not KeyError's repr
    assert user_facing_error(ZeroDivisionError("bug")) is None
    assert user_facing_error(ValueError("a bare ValueError is a bug, not a message for the user")) is None
