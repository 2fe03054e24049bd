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

# -O1 in a Release build, for code that runs once a message, a run or a log
# line, never in a step's loops: the actors (their loops over parameters
# are kernels') and the application. Their objects are mostly CAF's and
# the parsers' templates, whose code generation at -O3 was a quarter of
# their compile and bought no speed of a run (bench/RESULTS.md, "Where the
# program's build goes"). The kernels and models keep -O3.
set(GRADWIRE_LOW_OPT $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O1>)
