#!/usr/bin/env bash
# The layer rule, checked file by file: kernels < models < actors <
# transport < scheduler/runtime < scheduler/app. A file may include its
# own layer and the layers below it, never one above. (The build enforces
# the same rule through include paths, cmake/Layers.cmake; this check names
# every offending line at once, in words.)
#   check_layers.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: check_layers.sh SOURCE_DIR}
cd "$src"
layers=(kernels models actors transport scheduler/runtime scheduler/app)

level_of() { # the layer index of a path or include ("" when none)
  local p=$1 i
  for ((i = ${#layers[@]} - 1; i >= 0; i--)); do
    if [[ $p == "${layers[i]}/"* ]]; then
      echo "$i"
      return
    fi
  done
}

bad=0
files=0
for ((i = 0; i < ${#layers[@]}; i++)); do
  while IFS= read -r f; do
    [[ $(level_of "$f") == "$i" ]] || continue # a deeper layer's file (scheduler/app under scheduler/)
    files=$((files + 1))
    while IFS=: read -r line inc; do
      lvl=$(level_of "$inc")
      if [[ -n $lvl ]] && ((lvl > i)); then
        echo "$f:$line: includes \"$inc\": ${layers[i]} may not include ${layers[lvl]} (a layer above it)" >&2
        bad=$((bad + 1))
      fi
    done < <(grep -noE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" | sed -E 's/^([0-9]+):.*"([^"]+)"/\1:\2/')
  done < <(find "${layers[i]}" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \))
done
if ((bad > 0)); then
  echo "$bad upward include(s): move the code down, or pass what it needs in from above (docs/architecture.md, layers)" >&2
  exit 1
fi
echo "$files files: every include points to its own layer or one below"
