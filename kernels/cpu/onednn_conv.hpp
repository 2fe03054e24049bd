#pragma once
/// @file onednn_conv.hpp
/// oneDNN's convolution primitives on the blocked layouts they prefer, for
/// the convolutions where bench/conv_libs.cpp measured them faster than
/// gradwire's own kernels even with the reorders from and to NCHW each call
/// (ResNet's layers of 16 channels and more). Activations stay NCHW between
/// layers: each pass reorders its inputs into the primitive's layout and its
/// outputs back, through buffers in the layer's workspace; the input in
/// oneDNN's layout is kept there from forward to the weight gradient.
///
/// Which convolutions go to oneDNN is a fixed rule by shape (never a timing
/// taken during a run: a run's bits must not depend on the machine's load),
/// GRADWIRE_CONV_LIB=gradwire|onednn|auto overrides it. Each call runs on
/// the calling thread alone (its OpenMP team set to 1): gradwire's thread
/// pool splits the batch. Built where oneDNN's headers are (libdnnl-dev);
/// elsewhere serves() is false and gradwire's kernels run every convolution.

#include "kernels/backend.hpp"

#include <cstddef>
#include <string>

namespace gradwire::kernels::onednn_conv {

/// Whether oneDNN runs `g`'s three passes on this build and machine.
bool serves(const conv_geom& g);

/// Tests of gradwire's own kernels turn oneDNN off (process-wide; on by default).
void set_enabled(bool on);
/// Activations move between NCHW and oneDNN's nChw8c / nChw16c through
/// gradwire's 8x8 AVX transposes (on by default); off: oneDNN's reorders,
/// for tests and A/B runs. For convolutions planned after the call.
void set_fast_reorders(bool on);

/// The channel block of the activations oneDNN's convolutions take on this
/// machine (8: nChw8c on AVX2, 16: nChw16c on AVX-512; what it picks for a
/// ResNet layer), or 0 when it serves none, or takes another layout.
/// A geometry with conv_geom::block set has its activations in that layout,
/// and its primitives are made for it: no reorders around them.
int activation_block();

/// The workspace a layer of geometry `g` needs on this path.
std::size_t workspace_bytes(const conv_geom& g);

/// y = conv(x, w), NCHW and OIHW; `workspace` keeps x's reordered copy for backward.
void forward(const conv_geom& g, const float* x, const float* w, float* y, void* workspace);

/// dw += dW; dx = dX when dx is not null; `workspace` as forward left it.
void backward(const conv_geom& g, const float* x, const float* w, const float* dy, float* dx, float* dw,
              void* workspace);

/// "oneDNN 2.6 convolutions for 16+ channels" or why not, for `gradwire info` and the bench.
std::string status();

} // namespace gradwire::kernels::onednn_conv
