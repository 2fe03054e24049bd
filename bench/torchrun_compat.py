#!/usr/bin/python3
"""torchrun for bench/recovery_vs_torchrun.sh. Debian's python3-torch 1.13
under Python 3.11 cannot parse its own --redirects/--tee defaults
(Std.from_str returns None, and torchrun fails before it starts a worker).
This parses them as torch 2.x does, then runs torchrun unchanged."""
import re
import sys

from torch.distributed.elastic.multiprocessing.api import Std


def from_str(vm):
    if re.fullmatch(r"[0-3]", vm):
        return Std(int(vm))
    return {int(k): Std(int(v)) for k, v in (kv.split(":") for kv in vm.split(","))}


Std.from_str = staticmethod(from_str)

from torch.distributed.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
