#!/usr/bin/env bash
# The typed protocols are checked by the compiler: protocol_misuse.cpp
# compiles with its correct uses (MISUSE=0), and each wrong use (a message
# a shard, the barrier, the coordinator or a worker does not take, a reply handler of the wrong shape,
# a shard or a worker's behavior that forgets a handler or has one too many)
# fails to compile with CAF's diagnostic for it.
# Usage: protocol_misuse.sh CXX SOURCE_DIR CAF_INCLUDE_DIR
set -u
cxx=$1
src=$2
caf=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# The headers every compile parses (CAF's most of all), precompiled once:
# the compiles then parse only the file itself.
printf '#include "actors/barrier.hpp"\n#include "actors/coordinator_protocol.hpp"\n#include "actors/gossip_mixer.hpp"\n#include "actors/reduce_protocol.hpp"\n#include "actors/shard_protocol.hpp"\n#include "actors/worker_protocol.hpp"\n#include "scheduler/runtime/virtual_reform.hpp"\n#include <caf/all.hpp>\n' >"$tmp/pre.hpp"
"$cxx" -std=c++17 -I"$src" -I"$caf" -x c++-header "$tmp/pre.hpp" -o "$tmp/pre.hpp.gch" 2>"$tmp/pch.txt" ||
  { echo "FAIL: the protocol headers do not compile:"; head -20 "$tmp/pch.txt"; exit 1; }
compile() {
  "$cxx" -std=c++17 -fsyntax-only -Winvalid-pch -include "$tmp/pre.hpp" -I"$src" -I"$caf" -DMISUSE="$1" \
    "$src/tests/actors/protocol_misuse.cpp" >"$tmp/out.txt" 2>&1
}
if compile 0; then
  echo "ok: the correct uses compile"
else
  echo "FAIL: the correct uses do not compile:"
  head -20 "$tmp/out.txt"
  fail=1
fi
expect() { # MISUSE, what it is, the diagnostic
  if compile "$1"; then
    echo "FAIL: $2: compiled"
    fail=1
  elif grep -q "$3" "$tmp/out.txt"; then
    echo "ok: refused by the compiler: $2"
  else
    echo "FAIL: $2: failed to compile, but not with \"$3\":"
    grep -m3 "error" "$tmp/out.txt"
    fail=1
  fi
}
expect 1 "a reform's generation as a 64-bit integer" "receiver does not accept given message"
expect 2 "a pin sent as a snapshot with a flag" "receiver does not accept given message"
expect 3 "a push's samples as an int" "no matching function for call to.*request"
expect 4 "a ring worker's message sent to a shard" "receiver does not accept given message"
expect 5 "a push's reply taken as a push-pull's" "wrong functor signature"
expect 6 "a pull's reply without the seconds it was held" "wrong functor signature"
expect 7 "a shard that forgets a message of its protocol" "not enough message handlers"
expect 8 "a bucket's scale as a double" "receiver does not accept given message"
expect 9 "a shard's message sent to an allreduce peer" "receiver does not accept given message"
expect 10 "a barrier's epoch as a 64-bit integer" "receiver does not accept given message"
expect 11 "the barrier's missing ranks taken as a list of ints" "wrong functor signature"
expect 12 "an average's step as an int" "no matching function for call to.*request"
expect 13 "a worker's step count as an int" "receiver does not accept given message"
expect 14 "a shard's message sent to the coordinator" "receiver does not accept given message"
expect 15 "a worker's progress sent to a ring's reformer" "receiver does not accept given message"
expect 16 "a lost worker named by its rank alone" "receiver does not accept given message"
expect 17 "a worker's last step as an int" "receiver does not accept given message"
expect 18 "a ring worker's re-form sent to a parameter-server worker" "receiver does not accept given message"
expect 19 "a gossip worker wired as a ring worker is" "receiver does not accept given message"
expect 20 "the coordinator's message sent to a worker" "receiver does not accept given message"
expect 21 "a compressed payload sent to a plain ring worker" "receiver does not accept given message"
expect 22 "a kill named to virtual time's reformer by its rank alone" "receiver does not accept given message"
expect 23 "a bucket's failure sent as a reduced bucket" "receiver does not accept given message"
expect 24 "a worker's behavior that forgets a message of its family's list" "not enough message handlers"
expect 25 "a worker's behavior with a handler its family's list does not name" "too many message handlers"
expect 26 "a worker's handler that takes a payload as another type" "unexpected handler at index"
exit $fail
