// The blocked-activation passes of a backend that has none: activation_block()
// is 0 there, so a network never asks for them; if something does, it is told.
#include "kernels/backend.hpp"
#include "kernels/error.hpp"

namespace gradwire::kernels {

namespace {
[[noreturn]] void none(const backend& be, const char* what) {
  throw error(std::string(what) + ": blocked activations are not implemented on " + to_string(be.dev()));
}
} // namespace

void backend::relayout(const float*, float*, int, int, int, int, bool) { none(*this, "relayout"); }

void backend::batchnorm_forward_train_blocked(const float*, float*, int, int, int, int, const float*, const float*,
                                              float*, float*, float*, float*, float, float, bool) {
  none(*this, "batchnorm_forward_train_blocked");
}

void backend::batchnorm_forward_eval_blocked(const float*, float*, int, int, int, int, const float*, const float*,
                                             const float*, const float*, float, bool) {
  none(*this, "batchnorm_forward_eval_blocked");
}

void backend::batchnorm_backward_blocked(const float*, const float*, float*, int, int, int, int, const float*,
                                         const float*, const float*, float*, float*, const float*) {
  none(*this, "batchnorm_backward_blocked");
}

} // namespace gradwire::kernels
