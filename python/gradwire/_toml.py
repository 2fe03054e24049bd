"""Python values to TOML text: --set values, sweep values, and a whole
config given as a dict (shaped like the TOML file)."""

import json
import math


def value(v):
    """One TOML value: a string, number, boolean or (nested) list."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return ("-" if v < 0 else "") + ("nan" if math.isnan(v) else "inf")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    raise TypeError(f"gradwire: a config value must be a str, int, float, bool or list, not {type(v).__name__}: {v!r}")


def _is_table_array(v):
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, dict) for x in v)


def pretty(path):
    """train.lr -> config["train"]["lr"], as the caller wrote it."""
    return "config" + "".join(f"[{k!r}]" for k in path.split("."))


def _table(lines, where, path, table, keys):
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    if path and (scalars or not table):
        lines.append(f"[{path}]")
        where.append(path)
    for k, v in scalars.items():
        lines.append(f"{k} = {value(v)}")
        where.append(f"{path}.{k}" if path else k)
    for k, v in table.items():
        sub = f"{path}.{k}" if path else k
        if isinstance(v, dict):
            if sub in keys:  # a key's value given as a dict: not a section
                raise ValueError(f"{pretty(sub)} is a dict, but {sub} is a key, not a section: give it a "
                                 f"{keys[sub].get('type', 'value')} ({keys[sub].get('doc', '')[:80]})")
            _table(lines, where, sub, v, keys)
        elif _is_table_array(v):
            for i, entry in enumerate(v):
                lines.append(f"[[{sub}]]")
                where.append(f"{sub}[{i}]")
                for ek, ev in entry.items():
                    lines.append(f"{ek} = {value(ev)}")
                    where.append(f"{sub}[{i}].{ek}")


def document(config, keys=None):
    """A whole config (a dict of sections) as TOML text, and the key path
    of each of its lines (line n is where[n - 1]). `keys`: the schema, to
    refuse a dict given as a key's value."""
    if not isinstance(config, dict):
        raise TypeError("gradwire: a config is a path or a dict shaped like the TOML file")
    lines, where = [], []
    _table(lines, where, "", config, keys or {})
    return "\n".join(lines) + "\n", where
