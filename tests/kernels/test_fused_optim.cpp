// The fused ring update (kernels/cpu/fused_optim.hpp) against add +
// sgd_update: the same bits, on both of its paths.
#include "kernels/backend.hpp"
#include "kernels/cpu/fused_optim.hpp"
#include "reference.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

namespace gk = gradwire::kernels;
using gwtest::random_vec;

TEST_CASE("fused ring update: sgd_update_sum is add + sgd_update bit for bit, streamed or not, at any alignment") {
  // Lengths below and above stream_min_floats (the streaming path), weights
  // starting 0..3 floats past a 16-byte boundary (its scalar head) and odd
  // tails; one or two gradient contributions; plain, momentum, Nesterov.
  auto& be = gk::backend_for(gk::device::cpu());
  const std::size_t stream_min = gk::cpu::stream_min_floats;
  for (const std::size_t n : {std::size_t{37}, stream_min + 7, 3 * stream_min + 2}) {
    for (std::size_t shift = 0; shift < 4; ++shift) {
      for (const bool two : {false, true}) {
        for (const int mode : {0, 1, 2}) { // momentum 0 / 0.9 / 0.9 Nesterov
          const float momentum = mode == 0 ? 0.f : 0.9f, s = 0.5f;
          const bool nesterov = mode == 2;
          const auto original = random_vec(n + 8, 21);
          auto store = original; // w lies inside, 4 + shift floats in
          float* w = store.data() + 4 + shift;
          std::vector<float> w_ref(w, w + n);
          const auto g0 = random_vec(n, 22), g1 = random_vec(n, 23);
          auto v = random_vec(n, 24);
          auto v_ref = v;
          std::vector<float> sum(n);
          for (int step = 0; step < 2; ++step) {
            gk::cpu::sgd_update_sum(n, 0.1f, momentum, 0.01f, nesterov, w, g0.data(), two ? g1.data() : nullptr, s,
                                    v.data(), nullptr);
            if (two)
              be.add(n, g0.data(), g1.data(), sum.data(), s);
            else
              for (std::size_t i = 0; i < n; ++i)
                sum[i] = g0[i] * s;
            be.sgd_update(n, 0.1f, momentum, 0.01f, nesterov, w_ref.data(), sum.data(), v_ref.data());
          }
          INFO("n " << n << ", shift " << shift << ", two " << two << ", mode " << mode);
          CHECK(std::equal(w_ref.begin(), w_ref.end(), w));
          if (momentum != 0.f)
            CHECK(v == v_ref);
          CHECK(std::equal(store.begin(), store.begin() + 4 + static_cast<std::ptrdiff_t>(shift), original.begin()));
          CHECK(std::equal(w + n, store.data() + store.size(), original.data() + 4 + shift + n)); // nothing past w
        }
      }
    }
  }
}
