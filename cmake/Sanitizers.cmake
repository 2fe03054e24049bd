# GRADWIRE_SANITIZE: build everything (gradwire, its tests) with sanitizers.
#   ""                   off (default)
#   "address,undefined"  ASan + UBSan; any UBSan finding aborts the test
#   "thread"             TSan (put a TSan-built CAF first on LD_LIBRARY_PATH,
#                        see scripts/sanitize.sh, or every mailbox is a race)
#   "fuzzer"             the fuzz targets only (clang): libFuzzer + ASan + UBSan
# scripts/sanitize.sh builds and runs these.
set(GRADWIRE_SANITIZE "" CACHE STRING "Sanitizers: \"\", \"address,undefined\", \"thread\"")
if(GRADWIRE_SANITIZE)
  set(_gw_san -fsanitize=${GRADWIRE_SANITIZE} -fno-omit-frame-pointer)
  if(GRADWIRE_SANITIZE MATCHES "undefined")
    list(APPEND _gw_san -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_gw_san}) # CUDA is off in sanitizer builds
  add_link_options(${_gw_san})
  message(STATUS "gradwire: sanitizers ${GRADWIRE_SANITIZE}")
endif()
