"""Read an offline W&B run's transaction log (run-*.wandb) without W&B's own reader.

The file is a 7-byte W&B header followed by LevelDB-log-format records (32 KiB blocks, each record
chunk prefixed by crc32 (4 bytes), length (2) and type (1): full, first, middle, last), each record a
serialized `wandb.proto.wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def raw_records(data: bytes) -> Iterator[bytes]:
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # block trailer: zero padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:
            pos += left_in_block
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk


def read_run(path: Path) -> dict[str, Any]:
    """{'history': [row dicts], 'config': {...}, 'run': Record.run} of one run-*.wandb file."""
    from wandb.proto import wandb_internal_pb2 as pb

    history: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    run = None
    exit_code = None
    for raw in raw_records(path.read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append(
                {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            )
        elif kind == "run":
            run = rec.run
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in rec.config.update})
        elif kind == "exit":
            exit_code = rec.exit.exit_code
    return {"history": history, "config": config, "run": run, "exit_code": exit_code}
