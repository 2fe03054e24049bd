#pragma once
/// @file denormals.hpp
/// Flush-to-zero and denormals-are-zero for the calling thread.
///
/// Why: SGD momentum for a weight whose gradient is always zero (say, an
/// input pixel that is black in every Fashion-MNIST image) decays by mu per
/// step into the subnormal range, where x86 arithmetic is two orders of
/// magnitude slower, and sgd_update came to dominate a step after a
/// thousand steps (bench/RESULTS.md, "Figures behind the code"). Every thread that runs kernels calls this (it only sets the
/// thread's MXCSR register; values that small are meaningless for training).

namespace gradwire::kernels {

void flush_denormals_on_this_thread();

} // namespace gradwire::kernels
