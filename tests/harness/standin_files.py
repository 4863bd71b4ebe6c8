"""The model directory and data files a run reads, as small as preflight accepts (issue 28: an empty model dir
and 0-byte parquet files no longer pass). The stand-in trainer reads neither; preflight reads both.

``parquet_bytes`` writes a real parquet file with zero rows: ``PAR1``, the Thrift compact FileMetaData (version 1,
a root schema element with one optional BYTE_ARRAY column per name, num_rows 0, no row groups), its length, ``PAR1``
(the layout of apache/parquet-format's parquet.thrift). ``model_files`` are a config.json and one weights file.
"""

from __future__ import annotations

import json
from pathlib import Path

MODEL_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
# A safetensors file with an empty header: an 8-byte little-endian header length, then the JSON header.
MODEL_FILES = {"config.json": json.dumps(MODEL_CONFIG).encode(), "model.safetensors": b"\x02\x00\x00\x00\x00\x00\x00\x00{}"}
DATA_NAMES = ("dapo-math-17k.parquet", "aime-2024.parquet")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(field_header: int, text: str) -> bytes:
    raw = text.encode()
    return bytes([field_header]) + _varint(len(raw)) + raw


def parquet_bytes(columns: tuple[str, ...] = ("prompt", "reward_model")) -> bytes:
    """A parquet file with these BYTE_ARRAY columns and no rows."""
    elements = [_string(0x48, "schema") + b"\x15" + _varint(2 * len(columns)) + b"\x00"]  # name, num_children
    for name in columns:  # type=BYTE_ARRAY (6), repetition_type=OPTIONAL (1), name
        elements.append(b"\x15\x0c\x25\x02" + _string(0x18, name) + b"\x00")
    count = len(elements)
    header = bytes([(count << 4) | 0x0C]) if count < 15 else b"\xfc" + _varint(count)
    meta = b"\x15\x02" + b"\x19" + header + b"".join(elements) + b"\x16\x00" + b"\x19\x0c" + b"\x00"
    return b"PAR1" + meta + len(meta).to_bytes(4, "little") + b"PAR1"


def write_model(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in MODEL_FILES.items():
        (directory / name).write_bytes(content)
    return directory


def write_data(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in DATA_NAMES:
        (data_dir / name).write_bytes(parquet_bytes())


def write_tree(verl_home: Path, model: str = "Qwen3-8B") -> None:
    """MODEL_PATH (default name) and both data files under a host VERL_HOME."""
    write_model(verl_home / "models" / model)
    write_data(verl_home / "data")


def put_tree(container: object, verl_home: str = "/verl", model: str = "Qwen3-8B") -> None:
    """The same inside a container."""
    from harness.fixtures import exec_argv, put_file

    made = exec_argv(container, ["mkdir", "-p", f"{verl_home}/models/{model}", f"{verl_home}/data"])  # type: ignore[arg-type]
    assert made.exit_code == 0, made.output
    for name, content in MODEL_FILES.items():
        put_file(container, f"{verl_home}/models/{model}/{name}", content)  # type: ignore[arg-type]
    for name in DATA_NAMES:
        put_file(container, f"{verl_home}/data/{name}", parquet_bytes())  # type: ignore[arg-type]
