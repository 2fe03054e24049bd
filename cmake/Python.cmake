# The Python module (python/): built when pybind11 and Python's headers are
# found (GRADWIRE_PYTHON=AUTO), never in sanitizer builds (an interpreter
# would have to preload the sanitizer's runtime).
#
# The module links gradwire's static libraries into a shared object, so
# with it every library is compiled position-independent;
# -fno-semantic-interposition lets calls within a library stay direct and
# inlinable, as in the program.
set(GRADWIRE_PYTHON AUTO CACHE STRING "Build the Python module: AUTO (when pybind11 is found), ON, OFF")
set_property(CACHE GRADWIRE_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(GRADWIRE_HAVE_PYTHON OFF)
if(NOT GRADWIRE_PYTHON STREQUAL "OFF" AND NOT GRADWIRE_SANITIZE)
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    # Debian's interpreter: the module's own dependencies (pandas) are Debian packages.
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  set(PYBIND11_FINDPYTHON ON)
  find_package(Python 3 COMPONENTS Interpreter Development.Module QUIET)
  if(Python_FOUND)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND)
    set(GRADWIRE_HAVE_PYTHON ON)
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fno-semantic-interposition>)
  elseif(GRADWIRE_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "GRADWIRE_PYTHON=ON, but pybind11 or Python's headers were not found "
                        "(Debian: pybind11-dev python3-dev)")
  endif()
endif()
