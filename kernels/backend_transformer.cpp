// The transformer passes of a backend that has none: a model that needs them
// is told which pass is missing on which device, instead of running wrong.
#include "kernels/backend.hpp"
#include "kernels/error.hpp"

namespace gradwire::kernels {

namespace {
[[noreturn]] void missing(const backend& be, const char* what) {
  throw error(std::string(what) + ": the transformer kernels are not implemented on " + to_string(be.dev()) +
              " (train.device = \"cpu\" runs them)");
}
} // namespace

void backend::layernorm_forward(const float*, float*, float*, float*, const float*, const float*, int, int, float) {
  missing(*this, "layernorm_forward");
}
void backend::layernorm_backward(const float*, const float*, const float*, const float*, const float*, float*,
                                 float*, float*, int, int) {
  missing(*this, "layernorm_backward");
}
void backend::dropout(float*, int, int, float, std::uint64_t, std::int64_t) { missing(*this, "dropout"); }
void backend::gelu_forward(const float*, float*, std::size_t) { missing(*this, "gelu_forward"); }
void backend::gelu_backward(const float*, const float*, float*, std::size_t) { missing(*this, "gelu_backward"); }
void backend::embedding_forward(const float*, const float*, const float*, float*, int, int, int, int) {
  missing(*this, "embedding_forward");
}
void backend::embedding_backward(const float*, const float*, float*, float*, int, int, int, int) {
  missing(*this, "embedding_backward");
}
void backend::attention_forward(const float*, float*, float*, int, int, int, int, const attention_dropout&) {
  missing(*this, "attention_forward");
}
void backend::attention_backward(const float*, const float*, const float*, const float*, float*, int, int, int,
                                 int, const attention_dropout&) {
  missing(*this, "attention_backward");
}

} // namespace gradwire::kernels
