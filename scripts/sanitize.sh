#!/usr/bin/env bash
# The test suite under sanitizers (CUDA off), each build in a folder of its own.
#   scripts/sanitize.sh asan [CTEST ARGS...]  ASan + UBSan: the whole suite, fuzzing included (build-asan/)
#   scripts/sanitize.sh tsan [CTEST ARGS...]  TSan: the in-process actor tests (build-tsan/), against CAF
#                                             0.17.6 rebuilt under TSan from Debian's source package
#   scripts/sanitize.sh fuzz [RUNS]           the fuzz targets in the ASan build, RUNS frames each (default 10M)
#   scripts/sanitize.sh libfuzzer [SECONDS]   the fuzz targets coverage-guided (clang, libFuzzer, ASan +
#                                             UBSan; build-libfuzzer/), SECONDS each (default 120);
#                                             a crash's input is kept as build-libfuzzer/artifacts/TARGET-*
# Any finding fails (halt_on_error); the only ones let through are listed,
# with why, in tests/sanitizers/*.supp. Exit 77: TSan could not run here
# (CAF's source package could not be fetched), nothing was tested.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
mode=${1:-}
shift || true
jobs=${JOBS:-$(nproc)}

# (Without bench/'s programs: no test runs them, and they were 1.4 minutes
# of the ASan build on 2 cores.)
configure() { # DIR SANITIZERS
  [[ -f "$1/build.ninja" ]] && return
  cmake -S "$src" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
    -DCMAKE_C_FLAGS_RELEASE=-O1 -DGRADWIRE_CUDA=OFF -DGRADWIRE_BENCH=OFF -DGRADWIRE_SANITIZE="$2"
}

asan_env() {
  export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=0
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$src/tests/sanitizers/ubsan.supp
  export LSAN_OPTIONS=suppressions=$src/tests/sanitizers/lsan.supp
}

# CAF 0.17.6's libcaf_core (gradwire uses no other part of CAF) built with -fsanitize=thread, once,
# into $CAF_TSAN_DIR: Debian's libcaf is not instrumented, and TSan would
# see no ordering through the mailboxes. Prints the library folder. The
# build is kept outside the clone, keyed by CAF's version, the compiler and
# the flags, so that every clone on the machine (CI's included) reuses it:
# /var/cache/gradwire as root, else ~/.cache/gradwire.
caf_tsan_flags="-fsanitize=thread -O1 -include limits"
caf_tsan() {
  local key cache=/var/cache/gradwire
  [[ $(id -u) -eq 0 ]] || cache=${XDG_CACHE_HOME:-$HOME/.cache}/gradwire
  key=$( (echo "0.17.6 $caf_tsan_flags"; c++ --version | head -1) | sha1sum | cut -c1-12)
  local dir=${CAF_TSAN_DIR:-$cache/caf-0.17.6-tsan-$key}
  if [[ -f "$dir/lib/libcaf_core.so.0.17.6" ]]; then
    echo "sanitize.sh: CAF under TSan from $dir (kept from an earlier run)" >&2
  else
    echo "sanitize.sh: building CAF 0.17.6 under TSan into $dir" >&2
    local t0=$SECONDS
    local work=$dir/src
    mkdir -p "$work"
    if ! ls "$work"/actor-framework_0.17.6.orig.tar.gz >/dev/null 2>&1; then
      if ! apt-get source --help >/dev/null 2>&1 || ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d; then
        [[ $(id -u) -eq 0 ]] || { echo "sanitize.sh: TSan skipped: CAF's source needs a deb-src entry (run as root once)" >&2; exit 77; }
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
          > /etc/apt/sources.list.d/gradwire-deb-src.sources
        apt-get update -qq || { echo "sanitize.sh: TSan skipped: apt-get update failed" >&2; exit 77; }
      fi
      # Only the upstream tarball is needed (Debian's patch set may be gone from the mirror).
      (cd "$work" && apt-get source --download-only -qq actor-framework=0.17.6-2.1 >/dev/null 2>&1 || true)
      ls "$work"/actor-framework_0.17.6.orig.tar.gz >/dev/null 2>&1 ||
        { echo "sanitize.sh: TSan skipped: could not fetch CAF 0.17.6's source (apt-get source actor-framework)" >&2; exit 77; }
    fi
    rm -rf "$work/actor-framework-0.17.6" && tar xzf "$work"/actor-framework_0.17.6.orig.tar.gz -C "$work"
    # (-include limits: GCC 12 wants <limits> where CAF 0.17.6 uses numeric_limits without it.)
    cmake -S "$work/actor-framework-0.17.6" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS="$caf_tsan_flags" -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
      -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes -DCAF_NO_OPENSSL=yes -DCAF_NO_TOOLS=yes -DCAF_NO_PYTHON=yes \
      -DCAF_NO_OPENCL=yes -DCAF_NO_SUMMARY=yes -DCMAKE_INSTALL_PREFIX="$dir" >/dev/null
    cmake --build "$work/build" -j "$jobs" --target libcaf_core_shared >&2
    # Into place whole, or not at all: a run killed half-way leaves no
    # library that the check above would take for a finished build.
    mkdir -p "$dir/lib.new"
    cp -a "$work"/build/lib/libcaf_core.so* "$dir/lib.new/"
    rm -rf "$dir/lib" "$work" && mv "$dir/lib.new" "$dir/lib"
    echo "sanitize.sh: CAF under TSan built in $((SECONDS - t0)) s" >&2
  fi
  echo "$dir/lib"
}

# Each test binary's shared_ptr release must be the instrumented copy (see
# tests/sanitizers/instrumented_inlines.cpp): with an uninstrumented one
# TSan sees no ordering through reference counts and reports false races.
check_instrumented() { # DIR TEST...
  local dir=$1 t sym=_ZNSt16_Sp_counted_baseILN9__gnu_cxx12_Lock_policyE2EE10_M_releaseEv
  shift
  for t in "$@"; do
    local addr
    addr=$(nm "$dir/$t" | awk -v s="$sym" '$3 == s { print $1 }')
    [[ -n "$addr" ]] || continue # inlined everywhere: nothing to pick wrongly
    objdump -d --no-show-raw-insn "$dir/$t" --start-address=0x"$addr" --stop-address=$((0x$addr + 64)) |
      grep -q "__tsan_func_entry" ||
      { echo "sanitize.sh: $t links an uninstrumented shared_ptr release (tests/sanitizers/instrumented_inlines.cpp)" >&2; exit 1; }
  done
}

case "$mode" in
asan)
  configure build-asan "address,undefined"
  cmake --build build-asan -j "$jobs"
  asan_env
  cd build-asan
  # What sanitizers uniquely find is in the code's own paths: the unit
  # tests, the fuzzers, the transport and rendezvous scripts (real
  # processes, hostile ranks, injected faults) and the command line's short
  # runs and refusals. Left out, each still run by the plain stage
  # (scripts/test.sh), with where its code runs under ASan here:
  # - three trainer tests that train a full epoch to an accuracy: their
  #   kernels in test_gradcheck, test_conv_pool, the other trainer tests and
  #   test_topologies;
  # - the end-to-end scripts whose time is many runs of paths tested here
  #   already: bit-exact resume (checkpoints: test_single_run, fuzz_checkpoint),
  #   replay (test_adpsgd_replay, test_update_record, fuzz_record),
  #   compression (test_compress, test_compressed_ring/pushes/gossip),
  #   streaming DiLoCo (test_streaming_diloco), virtual time from the CLI
  #   (test_virtual_time/faults/costs), a stop in the middle of a GPT step of
  #   seconds (test_trainer's stop flag), a suspended job and a stuck worker
  #   (a minute of waiting each; test_faults), every example config (the
  #   wirings are test_topologies', the command line cli's);
  # - those whose time goes to other programs: srun and mpirun (their
  #   environments are test_launch_env's), PyTorch loading a model file
  #   (bad files are fuzz_model's) and the GPT against PyTorch (test_gpt),
  #   chromium rendering a report (test_report writes it);
  # - those that run no code of gradwire's: the include check, the case
  #   names, the compiler refusing a wrong message.
  slow="test_trainer:(MLP reaches 82|LeNet-5 reaches 80|ResNet-20 learns synthetic)"
  others="examples: |checkpoints: resume is bit-exact|replay: recorded async|streaming DiLoCo: across|compression: every mode"
  others+="|cli: virtual time|faults: a suspended job|faults: a worker stuck|transport: srun and mpirun"
  others+="|model: loads in PyTorch|gpt: 20 AdamW steps|report: renders in chromium"
  others+="|layers: no include|tests: case names|protocol: the compiler refuses|cli: a stop ends a long step"
  "$src/scripts/ctest_tails.sh" --output-on-failure -j "$jobs" -E "$slow|$others" "$@"
  ;;
tsan)
  caflib=$(caf_tsan)
  configure build-tsan thread
  # Every test of tests/actors/ (a new one is picked up without an edit here), and the log's.
  mapfile -t actor_tests < <(cd "$src/tests/actors" && ls test_*.cpp | sed 's/\.cpp$//')
  actor_tests+=(test_log)
  # (They are the executables tests_actors and, for the log's, tests_kernels.)
  cmake --build build-tsan -j "$jobs" --target tests_actors tests_kernels
  export LD_LIBRARY_PATH=$caflib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$src/tests/sanitizers/tsan.supp"
  export UCX_MEM_MMAP_HOOK_MODE=none # UCX's mmap hook crashes TSan at thread exit
  check_instrumented build-tsan/tests tests_actors tests_kernels
  cd build-tsan
  # Left out: five tests that compare the speed of slowed workers with the
  # others' (TSan's instrumentation, 5-15x, stretches the fast workers'
  # steps until a fixed delay no longer makes the slow one much slower).
  skip='slowed worker|speed balancing|SSP: the fastest|a slow worker holds up no one|shared budget'
  "$src/scripts/ctest_tails.sh" --output-on-failure -j "$jobs" -R "^($(IFS='|'; echo "${actor_tests[*]}")):" -E "$skip" "$@"
  ;;
fuzz)
  runs=${1:-10000000}
  configure build-asan "address,undefined"
  cmake --build build-asan -j "$jobs" --target fuzz_frame fuzz_hello fuzz_shm fuzz_lane fuzz_config fuzz_model fuzz_checkpoint fuzz_record
  asan_env
  t=tests/fuzz
  build-asan/tests/fuzz_frame "$runs" "${SEED:-1}" $t/corpus/frame
  build-asan/tests/fuzz_hello "$((runs / 10))" "${SEED:-1}" $t/corpus/hello
  build-asan/tests/fuzz_shm "$((runs / 10))" "${SEED:-1}" $t/corpus/shm
  build-asan/tests/fuzz_lane "$((runs / 10))" "${SEED:-1}"
  build-asan/tests/fuzz_config "$((runs / 100))" "${SEED:-1}" examples $t/corpus/config
  build-asan/tests/fuzz_model "$((runs / 10))" "${SEED:-1}" $t/corpus/model
  build-asan/tests/fuzz_checkpoint "$((runs / 10))" "${SEED:-1}" $t/corpus/checkpoint
  build-asan/tests/fuzz_record "$((runs / 10))" "${SEED:-1}"
  ;;
libfuzzer)
  secs=${1:-120}
  dir=build-libfuzzer
  command -v clang++ >/dev/null || { echo "sanitize.sh: libfuzzer needs clang: apt-get install clang libclang-rt-dev" >&2; exit 2; }
  if [[ ! -f $dir/build.ninja ]]; then
    CC=clang CXX=clang++ cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" -DCMAKE_C_FLAGS_RELEASE="-O1 -g" -DGRADWIRE_CUDA=OFF -DGRADWIRE_BENCH=OFF \
      -DGRADWIRE_SANITIZE="address,undefined,fuzzer-no-link" -DGRADWIRE_LIBFUZZER=ON
  fi
  t=tests/fuzz
  declare -A dirs=([frame]="$t/corpus/frame" [hello]="$t/corpus/hello" [shm]="$t/corpus/shm" [lane]=""
    [config]="examples $t/corpus/config" [model]="$t/corpus/model" [checkpoint]="$t/corpus/checkpoint" [record]="")
  names=(frame hello shm lane config model checkpoint record)
  cmake --build "$dir" -j "$jobs" --target $(for n in "${names[@]}"; do echo fuzz_$n fuzz_${n}_libfuzzer; done)
  asan_env
  mkdir -p "$dir/artifacts"
  failed=()
  for n in "${names[@]}"; do
    # The corpus grows in build-libfuzzer/corpus/TARGET across runs; new
    # inputs worth keeping as regression seeds go to tests/fuzz/corpus/.
    work=$dir/corpus/$n
    "$dir/tests/fuzz_$n" --write-seeds "$work" >/dev/null
    existing=()
    for d in ${dirs[$n]}; do [[ -d $d ]] && existing+=("$d"); done
    echo "== fuzz_$n: ${secs} s, coverage-guided" >&2
    if ! "$dir/tests/fuzz_${n}_libfuzzer" -max_total_time="$secs" -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/$n-" "$work" "${existing[@]}" 2>"$dir/fuzz_$n.log"; then
      failed+=("$n")
      tail -60 "$dir/fuzz_$n.log" >&2
    else
      grep -E "stat::number_of_executed_units|stat::new_units_added|cov:" "$dir/fuzz_$n.log" | tail -3 >&2
    fi
  done
  [[ ${#failed[@]} -eq 0 ]] || { echo "sanitize.sh: libFuzzer found crashes in: ${failed[*]} (inputs in $dir/artifacts/)" >&2; exit 1; }
  ;;
*)
  sed -n '2,9p' "$0" >&2
  exit 2
  ;;
esac
