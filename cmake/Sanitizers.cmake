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
  message(STATUS "gradwire: sanitizers ${GRADWIRE_SANITIZE}")
endif()
