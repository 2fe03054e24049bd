# The built-in MLP (784-64-10) as a torch module, for torch_model.sh: with
# [model.args] init naming a model.safetensors of the built-in MLP, it
# starts from those weights (the built-in's names: INDEX.linear.PARAM).
import json
import struct

import torch
from torch import nn


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {name: torch.frombuffer(bytearray(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]),
                                   dtype=torch.float32).view(t["shape"]) for name, t in header.items()}


def model(cfg):
    args = cfg["model"]["args"]
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, args.get("hidden", 64)), nn.ReLU(),
                        nn.Linear(args.get("hidden", 64), 10))
    if args.get("init"):
        state = {k.replace(".linear.", "."): v for k, v in read_safetensors(args["init"]).items()}
        net.load_state_dict(state)
    return net
