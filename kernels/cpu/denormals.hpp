#pragma once
/// @file denormals.hpp
/// Flush-to-zero and denormals-are-zero for the calling thread.
///
/// Why: SGD momentum for a weight whose gradient is always zero (say, an
/// input pixel that is black in every Fashion-MNIST image) decays by mu per
/// step into the subnormal range, where x86 arithmetic is ~100x slower;
/// measured here, sgd_update went from 6% to 35% of a step after ~1000
/// steps. Every thread that runs kernels calls this (it only sets the
/// thread's MXCSR register; values that small are meaningless for training).

namespace gradwire::kernels {

void flush_denormals_on_this_thread();

} // namespace gradwire::kernels
