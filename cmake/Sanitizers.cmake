# GRADWIRE_SANITIZE: build everything (gradwire, its tests) with sanitizers.
#   ""                   off (default)
#   "address,undefined"  ASan + UBSan
#   "thread"             TSan (put a TSan-built CAF first on LD_LIBRARY_PATH,
#                        as scripts/sanitize.sh tsan does, or every mailbox
#                        is a race)
# UBSan's checks stay recoverable so that tests/sanitizers/ubsan.supp can
# name the findings outside gradwire; scripts/sanitize.sh runs with
# halt_on_error=1, so any other finding fails its test.
set(GRADWIRE_SANITIZE "" CACHE STRING "Sanitizers: \"\", \"address,undefined\", \"thread\"")
if(GRADWIRE_SANITIZE)
  set(_gw_san -fsanitize=${GRADWIRE_SANITIZE} -fno-omit-frame-pointer)
  add_compile_options(${_gw_san}) # CUDA is off in sanitizer builds
  add_link_options(${_gw_san})
  if(GRADWIRE_SANITIZE MATCHES "address")
    # Position-dependent programs under ASan: a PIE build's 190 MB gradwire
    # had 3.1 million relative relocations (ASan's and UBSan's metadata),
    # and the pages they touch made each start 0.5-0.6 s of CPU, paid by
    # every test case and every run a test script starts. (TSan keeps PIE.)
    add_compile_options(-fno-pie)
    add_link_options(-no-pie)
  endif()
  if(GRADWIRE_SANITIZE MATCHES "undefined")
    # The actor and scheduler layers (CAF behaviours, configs, results) are
    # built without UBSan's null and alignment checks (GRADWIRE_UBSAN_TRIM,
    # their targets' own option): both instrument every access through a
    # pointer or reference, and in these layers' template-heavy code they
    # were most of UBSan's compile time (a scheduler/app batch on AVX2:
    # 140 s with UBSan, 74 s without the two, 63 s under ASan alone). A
    # null dereference still stops under ASan (page 0 is unmapped); these
    # layers' byte decoders (records, checkpoints, model files) read through
    # memcpy; the layers that take bytes off the wire (transport), the
    # models and the kernels keep every check.
    set(GRADWIRE_UBSAN_TRIM -fno-sanitize=null,alignment)
  endif()
  message(STATUS "gradwire: sanitizers ${GRADWIRE_SANITIZE}")
endif()
