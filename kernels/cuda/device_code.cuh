#pragma once
/// @file device_code.cuh
/// What the kernels' device-code headers (*_kernels.cuh) share: they are
/// compiled by nvcc and, in the CPU suite, by the host compiler through
/// tests/kernels/host_sim.hpp, so they use nothing only nvcc knows.

#include <cstddef>

/// Before a loop of a fixed trip count: nvcc unrolls it; a host compiler
/// has no such pragma.
#ifdef __CUDACC__
#define GW_UNROLL _Pragma("unroll")
#else
#define GW_UNROLL
#endif

/// A function both sides call: host code (sizes in constant expressions)
/// and device code.
#ifdef __CUDACC__
#define GW_HOST_DEVICE __host__ __device__
#else
#define GW_HOST_DEVICE
#endif
