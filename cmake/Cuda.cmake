# Decides whether the CUDA kernels are built. AUTO builds them when nvcc,
# cuBLAS and cuDNN are all found; ON requires them; OFF skips the search.
set(GRADWIRE_HAVE_CUDA OFF)
if(NOT GRADWIRE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CUDAToolkit_FOUND)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  endif()
  if(CUDAToolkit_FOUND AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper's machine code, and Ampere's PTX, which the driver compiles
      # once for an A100 (and for newer GPUs) and caches. Machine code for
      # both doubled the module's build (attention.cu: 97 s against 63 s
      # on 2 cores, AMD EPYC). sm_70 is unsupported in CUDA 13; "native"
      # fails on machines without a GPU. -DCMAKE_CUDA_ARCHITECTURES=80 for
      # an A100's own code.
      set(CMAKE_CUDA_ARCHITECTURES "80-virtual;90-real")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    add_library(gradwire::cudnn INTERFACE IMPORTED)
    target_include_directories(gradwire::cudnn INTERFACE ${CUDNN_INCLUDE_DIR})
    target_link_libraries(gradwire::cudnn INTERFACE ${CUDNN_LIBRARY})
    set(GRADWIRE_HAVE_CUDA ON)
  elseif(GRADWIRE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GRADWIRE_CUDA=ON but the CUDA toolkit, cuBLAS or cuDNN was not found "
                        "(looked for nvcc, CUDAToolkit and cudnn.h/libcudnn under /usr/local/cuda)")
  else()
    message(STATUS "gradwire: CUDA toolkit or cuDNN not found; building CPU kernels only")
  endif()
endif()
