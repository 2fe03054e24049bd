# Finds every dependency from DEPS.md and wraps the ones without proper
# CMake targets into imported targets named gradwire::<lib>.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

# --- CAF 0.17: no CMake config, no pkg-config --------------------------------
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
# Only libcaf_core: processes talk over gradwire's own transport (UCX,
# transport/), never CAF's io middleman.
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
add_library(gradwire::caf INTERFACE IMPORTED)
target_include_directories(gradwire::caf INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(gradwire::caf INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)

# --- UCX: ucp lacks its own dependencies, link ucs too -----------------------
find_package(ucx REQUIRED)
add_library(gradwire::ucx INTERFACE IMPORTED)
target_link_libraries(gradwire::ucx INTERFACE ucx::ucp ucx::ucs)

# --- Cap'n Proto (schemas are generated at build time) -----------------------
find_package(CapnProto CONFIG REQUIRED)

# --- OpenBLAS: variables only ------------------------------------------------
find_package(OpenBLAS CONFIG REQUIRED)
add_library(gradwire::openblas INTERFACE IMPORTED)
target_include_directories(gradwire::openblas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(gradwire::openblas INTERFACE ${OpenBLAS_LIBRARIES})

find_package(tomlplusplus REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(ZLIB REQUIRED)
# --- protobuf: TensorBoard's event records (scheduler/app/tensorboard*) ------
find_package(Protobuf REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
find_package(Catch2 REQUIRED)
