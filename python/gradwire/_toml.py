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


def _table(lines, path, table):
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    if path and (scalars or not table):
        lines.append(f"[{path}]")
    for k, v in scalars.items():
        lines.append(f"{k} = {value(v)}")
    for k, v in table.items():
        sub = f"{path}.{k}" if path else k
        if isinstance(v, dict):
            _table(lines, sub, v)
        elif _is_table_array(v):
            for entry in v:
                lines.append(f"[[{sub}]]")
                for ek, ev in entry.items():
                    lines.append(f"{ek} = {value(ev)}")


def document(config):
    """A whole config (a dict of sections) as TOML text."""
    if not isinstance(config, dict):
        raise TypeError("gradwire: a config is a path or a dict shaped like the TOML file")
    lines = []
    _table(lines, "", config)
    return "\n".join(lines) + "\n"
