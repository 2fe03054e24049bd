#!/usr/bin/env python3
"""Reads gradwire's records and model files for tests/scheduler/replay.sh,
independently of gradwire's own reader (actors/update_record.hpp holds the
format).

  record_tool.py entries RECORD_DIR      one line per shard: its entries, as JSON
  record_tool.py same-tensors A B        exit 0 when two model.safetensors
                                         hold the same tensor bytes
  record_tool.py stalenesses RECORD_DIR  every apply's staleness, in order
  record_tool.py tamper FILE K           rewrites FILE with its K-th apply's
                                         staleness one higher
"""
import json
import os
import sys


def entries(path):
    data = open(path, "rb").read()
    assert data[:8] == b"GWREC001", path
    n = int.from_bytes(data[8:12], "little")
    pos = 12 + n
    last, out = {}, []

    def varint():
        nonlocal pos
        v, shift = 0, 0
        while True:
            if pos >= len(data):
                raise EOFError
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    try:
        while pos < len(data):
            who, d = varint(), varint()
            rank, serve = who >> 1, who & 1
            step = last.get(rank, 0) + ((d >> 1) ^ -(d & 1))
            last[rank] = step
            out.append(["s", rank, step] if serve else ["a", rank, step, varint()])
    except EOFError:
        pass
    return out


def varint_bytes(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tamper(path, k):
    data = open(path, "rb").read()
    head = data[:12 + int.from_bytes(data[8:12], "little")]
    body, last, applies = bytearray(), {}, 0
    for e in entries(path):
        d = e[2] - last.get(e[1], 0)
        last[e[1]] = e[2]
        body += varint_bytes(e[1] * 2 + (e[0] == "s")) + varint_bytes(2 * d if d >= 0 else -2 * d - 1)
        if e[0] == "a":
            body += varint_bytes(e[3] + (applies == k))
            applies += 1
    open(path, "wb").write(head + bytes(body))


def shards(folder):
    names = sorted((f for f in os.listdir(folder) if f.endswith(".gwr")), key=lambda f: int(f[6:-4]))
    return [entries(os.path.join(folder, f)) for f in names]


def tensor_bytes(path):
    data = open(path, "rb").read()
    return data[8 + int.from_bytes(data[:8], "little"):]


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "entries":
        for s in shards(sys.argv[2]):
            print(json.dumps(s))
    elif cmd == "stalenesses":
        print(json.dumps([[e[3] for e in s if e[0] == "a"] for s in shards(sys.argv[2])]))
    elif cmd == "tamper":
        tamper(sys.argv[2], int(sys.argv[3]))
    elif cmd == "same-tensors":
        sys.exit(0 if tensor_bytes(sys.argv[2]) == tensor_bytes(sys.argv[3]) else 1)
    else:
        sys.exit("unknown command " + cmd)
