#pragma once
/// @file host_vector.hpp
/// Element-wise passes over host (CPU) float buffers: the updates the
/// actors apply once a push, a round or an exchange (a pseudo-gradient, a
/// pull toward the global parameters, DC-ASGD's delay compensation), and
/// the trainer's finite check of each step's gradient. They live here so
/// that they vectorise (AVX-512, AVX2 and SSE2 clones) while the actor
/// layer, message handling only, compiles at a low optimisation level.
/// Each element is computed on its own, with no FMA contraction, so a
/// result is the same bits whatever the vector width or the machine.

#include <cstddef>

namespace gradwire::kernels {

/// out = a - b, out apart from a and b.
void subtract(std::size_t n, const float* a, const float* b, float* out);

/// x = a - x, in place.
void subtract_from(std::size_t n, const float* a, float* x);

/// x = g + alpha (x - g): x moved to g, keeping alpha of its own distance
/// (alpha 0: x becomes g). x apart from g.
void pull_toward(std::size_t n, float alpha, const float* g, float* x);

/// out = g + lambda g g (w - w_read): a gradient read at w_read, corrected
/// to w by the diagonal of its outer product (DC-ASGD, Zheng et al. 2017).
/// out apart from the others.
void delay_compensate(std::size_t n, float lambda, const float* g, const float* w, const float* w_read,
                      float* out);

/// pull = alpha (global - sent); w += pull; base = sent + pull: a local
/// copy w merged with the global answer to what was sent from it, base
/// becoming the point that answer is measured from next time. The four
/// buffers are apart.
void merge_answer(std::size_t n, float alpha, const float* global, const float* sent, float* w, float* base);

/// Whether x holds no NaN and no infinity: no element's exponent bits are
/// all ones. A compare and an or per element, which vectorise at every
/// instruction set (a float sum would be one serial chain of adds).
bool all_finite(std::size_t n, const float* x);

} // namespace gradwire::kernels
