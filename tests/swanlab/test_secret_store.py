"""The secret store: owner-only files, refs that can't be paths, values for redaction."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from verl_async_dapo.exceptions import InsecureFileError, SecretNotFoundError, SecretStoreError
from verl_async_dapo.secret_store import SecretStore


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_put_get_delete(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "secrets")
    ref = store.put("s3cr3t-value", label="swanlab_api_key")
    assert SecretStore.is_ref(ref) and ref.startswith("sec_")
    assert store.get(ref) == "s3cr3t-value"
    assert store.label(ref) == "swanlab_api_key"
    store.delete(ref)
    with pytest.raises(SecretNotFoundError, match="no secret stored"):
        store.get(ref)
    store.delete(ref)  # idempotent


def test_files_and_dir_are_owner_only_even_with_open_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = SecretStore(tmp_path / "a" / "secrets")
        ref = store.put("v", label="x")
    finally:
        os.umask(old)
    assert _mode(store.root) == 0o700
    assert _mode(store.root / ref) == 0o600
    assert sorted(p.name for p in store.root.iterdir()) == [ref]  # no temp files left


def test_existing_loose_store_dir_is_tightened(tmp_path: Path) -> None:
    root = tmp_path / "secrets"
    root.mkdir()
    os.chmod(root, 0o755)  # noqa: S103 - the loose directory under test
    SecretStore(root)
    assert _mode(root) == 0o700


def test_refs_are_unique_and_unguessable(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "s")
    refs = {store.put("same", label="x") for _ in range(50)}
    assert len(refs) == 50
    assert all(len(ref) == len("sec_") + 32 for ref in refs)


@pytest.mark.parametrize(
    "ref",
    [
        "../etc/passwd",
        "sec_../../../../etc/passwd",
        "/etc/passwd",
        "sec_" + "a" * 31 + "/",
        "sec_" + "a" * 31 + ".",
        "sec_" + "a" * 33,
        "sec_" + "a" * 31,
        "SEC_" + "a" * 32,
        "sec_" + "a" * 31 + "\x00",
        "",
    ],
)
def test_malformed_refs_are_refused_before_touching_the_disk(tmp_path: Path, ref: str) -> None:
    store = SecretStore(tmp_path / "s")
    for action in (store.get, store.delete, store.label):
        with pytest.raises(SecretStoreError, match="malformed secret reference"):
            action(ref)


def test_group_readable_secret_file_is_refused(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "s")
    ref = store.put("v", label="x")
    os.chmod(store.root / ref, 0o640)
    with pytest.raises(InsecureFileError, match="chmod 600"):
        store.get(ref)
    # still redacted: leaving it out of known_values would let it leak
    assert store.known_values() == ["v"]


def test_corrupt_secret_file(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "s")
    ref = store.put("v", label="x")
    (store.root / ref).write_text("not json")
    with pytest.raises(SecretStoreError, match="corrupt"):
        store.get(ref)


def test_known_values_longest_first_and_ignores_foreign_files(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "s")
    store.put("abc", label="x")
    store.put("abcdef", label="y")
    store.put("abc", label="z")
    (store.root / "README").write_text("not a secret")
    (store.root / ".sec_x.tmp").write_text('{"value": "half-written"}')
    assert store.known_values() == ["abcdef", "abc"]


@pytest.mark.parametrize("value", ["", "a\x00b"])
def test_bad_values_are_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(SecretStoreError):
        SecretStore(tmp_path / "s").put(value, label="x")


@pytest.mark.parametrize("label", ["", "../x", "a b", "x" * 65])
def test_bad_labels_are_refused(tmp_path: Path, label: str) -> None:
    with pytest.raises(SecretStoreError, match="invalid secret label"):
        SecretStore(tmp_path / "s").put("v", label=label)


def test_unicode_and_long_values_round_trip(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "s")
    value = "ключ-🔑-" + "x" * 5000
    assert store.get(store.put(value, label="x")) == value


def test_store_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises((SecretStoreError, FileExistsError)):
        SecretStore(path)
