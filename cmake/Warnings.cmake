# Project-wide warning flags, applied through an interface target so that
# third-party code is not affected.
add_library(gradwire_warnings INTERFACE)
target_compile_options(gradwire_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                            -Wold-style-cast -Wcast-align -Woverloaded-virtual>)

add_library(gradwire_cpu_tuning INTERFACE)
if(GRADWIRE_NATIVE)
  target_compile_options(gradwire_cpu_tuning INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
