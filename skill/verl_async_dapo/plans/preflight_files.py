"""Preflight's look inside the files a run reads (issue 28): that a path exists is not enough.

An empty model directory, a 0-byte "parquet" and a verl tree whose recipe has no config directory all passed as
``[ok]``; the run then failed seconds to minutes after "starting". Each check here reads what the run will read:

- the model directory holds ``config.json`` and at least one weights file (``*.safetensors``, ``*.bin``, …);
- a data file is a non-empty parquet (``PAR1`` at both ends) whose schema names the prompt column: the schema
  is in the footer (Thrift compact protocol: a string is its varint length, then its bytes), read with
  ``read_tail`` — nothing is imported in the target, no pyarrow needed;
- the entry's Hydra config (``<config_path>/<config_name>.yaml``) exists under VERL_HOME.

Each returns ``(status, detail, fix)`` lines for preflight to add; the I/O is the target's (run, read_tail,
paths_exist), the decisions are the pure functions below (tested directly).
"""

from __future__ import annotations

import posixpath
from typing import Literal

import anyio

from verl_async_dapo.exceptions import TargetError, VersionError
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.targets.base import Target
from verl_async_dapo.verl.profiles import profile_for_version
from verl_async_dapo.wording import Say, Text, setting

Status = Literal["ok", "warning", "error"]
Line = tuple[Status, str, Text | None]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".safetensors.index.json", ".bin.index.json")
FOOTER_READ_BYTES = 1 << 20  # a parquet footer is a few KiB; 1 MiB covers wide schemas
_MAGIC = b"PAR1"


def judge_model_dir(path: str, names: list[str]) -> Line:
    """The model directory's listing → one line."""
    weights = [n for n in names if n.endswith(WEIGHT_SUFFIXES)]
    fix = Say("download the whole model there (config.json, tokenizer, *.safetensors; e.g. `huggingface-cli "
              "download ORG/NAME --local-dir {path}`) or set {v}", path=path, v=setting("MODEL_PATH", "model_path"))
    if "config.json" not in names:
        what = "is empty" if not names else f"has no config.json ({len(names)} entries)"
        return "error", f"{path} {what}: not a Hugging Face model directory", fix
    if not weights:
        return "error", f"{path} has config.json but no weights (*.safetensors / *.bin)", fix
    return "ok", f"{path} (config.json, {len(weights)} weight file(s))", None


def judge_parquet(path: str, tail: bytes, prompt_key: str | None, variable: str, arg: str) -> Line:
    """A data file's last bytes (up to FOOTER_READ_BYTES) → one line. ``prompt_key`` None: the schema is not
    looked at (the validation file's prompt column is the same key, checked once on the training file)."""
    fix = Say("put a parquet file there (verl's examples/data_preprocess/ write them) or set {v}",
              v=setting(variable, arg))  # fmt: skip
    if not tail:
        return "error", f"{path} is empty (0 bytes)", fix
    if len(tail) < 12 or not tail.endswith(_MAGIC):
        return "error", f"{path} is not a parquet file (no PAR1 footer)", fix
    if prompt_key is None:
        return "ok", path, None
    footer_len = int.from_bytes(tail[-8:-4], "little")
    if footer_len + 8 > len(tail):  # a footer larger than what was read: the schema is not judged
        return "ok", f"{path} (schema not read: footer over {FOOTER_READ_BYTES >> 20} MiB)", None
    footer = tail[-8 - footer_len : -8]
    key = prompt_key.encode()
    named = (bytes([len(key)]) + key) in footer if len(key) < 128 else key in footer
    if not named:
        return "error", f"{path} has no column {prompt_key!r} (the prompt key)", Say(
            "set {v} to the column that holds the prompts, or convert the data (verl's examples/data_preprocess/)",
            v=setting("PROMPT_KEY", "prompt_key"))  # fmt: skip
    return "ok", f"{path} (parquet, column {prompt_key!r})", None


async def model_dir_line(target: Target, path: str) -> Line:
    res = await target.run(["ls", "-1A", "--", path], timeout=30)
    if res.exit_code != 0:  # a file, not a directory, or unreadable
        return "error", f"{path} is not a readable directory", Say(
            "point {v} at the model's directory", v=setting("MODEL_PATH", "model_path"))  # fmt: skip
    return judge_model_dir(path, [n for n in res.stdout.splitlines() if n.strip()])


async def parquet_line(target: Target, path: str, prompt_key: str | None, variable: str, arg: str) -> Line:
    return judge_parquet(path, await target.read_tail(path, FOOTER_READ_BYTES), prompt_key, variable, arg)


async def contents(target: Target, settings: TrainingSettings, present: list[tuple[str, str]]) -> dict[str, Line]:
    """The content lines of the paths that exist (MODEL_PATH, TRAIN_FILE, VAL_FILE), read side by side: one
    exec's latency in a container, not three."""
    lines: dict[str, Line] = {}

    async def look(name: str, path: str) -> None:
        try:  # caught here: out of a task group a TargetError would come wrapped in an ExceptionGroup
            if name == "MODEL_PATH":
                lines[name] = await model_dir_line(target, path)
            elif name in ("TRAIN_FILE", "VAL_FILE"):
                key = settings.prompt_key if name == "TRAIN_FILE" else None  # the same key: checked once
                lines[name] = await parquet_line(target, path, key, name, name.lower())
        except TargetError as exc:
            lines[name] = ("error", f"could not read {path}: {exc}", "make sure the target is running")

    async with anyio.create_task_group() as tg:
        for name, path in present:
            tg.start_soon(look, name, path)
    return lines


def config_file(settings: TrainingSettings, verl_version: str | None) -> tuple[str, str] | None:
    """(path, config name) of the entry's Hydra config under VERL_HOME; None when the version (so the layout) is
    unknown. Checked in the same paths_exist call as the entry module (one exec in a container)."""
    try:
        entry = profile_for_version(verl_version or "").entry(settings.mode)
    except VersionError:
        return None
    name = entry.config_name(settings.framework)
    return posixpath.join(settings.verl_home, entry.config_path, name + ".yaml"), name


def config_line(settings: TrainingSettings, verl_version: str | None, found: dict[str, bool]) -> Line | None:
    where = config_file(settings, verl_version)
    if where is None:
        return None
    path, name = where
    if found.get(path):
        return "ok", path, None
    config_dir = posixpath.relpath(posixpath.dirname(path), settings.verl_home)
    return "error", f"{path} missing: the recipe has no Hydra config {name!r} (verl {verl_version})", (
        f"restore the recipe's config directory: `git submodule update --init --recursive recipe` (or "
        f"`git checkout -- {config_dir}`) in {settings.verl_home}")  # fmt: skip
