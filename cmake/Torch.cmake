# model.kind = "torch" (models/torch_layer.hpp): the user's nn.Module runs in
# libgradwire_torch.so, an embedded Python with PyTorch, loaded by the
# program on the first torch model. Built when Python's embedding library,
# pybind11 and an interpreter that imports torch are found
# (GRADWIRE_TORCH=AUTO), never in sanitizer builds (libpython and torch
# are not instrumented). The core build never depends on either: without
# the module, a torch config gets an error that says how to build it.
set(GRADWIRE_TORCH AUTO CACHE STRING "Build the torch plug-in: AUTO (when Python, pybind11 and torch are found), ON, OFF")
set_property(CACHE GRADWIRE_TORCH PROPERTY STRINGS AUTO ON OFF)
set(GRADWIRE_HAVE_TORCH OFF)
# Both sides of models/torch_module.hpp are built with its hash; a module of
# another build is refused.
file(SHA1 ${PROJECT_SOURCE_DIR}/models/torch_module.hpp GRADWIRE_TORCH_ABI)
string(SUBSTRING ${GRADWIRE_TORCH_ABI} 0 16 GRADWIRE_TORCH_ABI)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/models/torch_module.hpp)
if(NOT GRADWIRE_TORCH STREQUAL "OFF" AND NOT GRADWIRE_SANITIZE)
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3) # Debian's, which has python3-torch
  endif()
  find_package(Python 3 COMPONENTS Interpreter Development.Embed QUIET)
  if(Python_FOUND)
    find_package(pybind11 CONFIG QUIET)
    execute_process(COMMAND ${Python_EXECUTABLE} -c "import torch" RESULT_VARIABLE _gw_torch_rc
                    OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND AND _gw_torch_rc EQUAL 0)
    set(GRADWIRE_HAVE_TORCH ON)
  elseif(GRADWIRE_TORCH STREQUAL "ON")
    message(FATAL_ERROR "GRADWIRE_TORCH=ON, but Python's embedding library, pybind11 or torch was not found "
                        "(Debian: python3-dev pybind11-dev python3-torch)")
  endif()
endif()
