#include "kernels/backend.hpp"
#include "kernels/error.hpp"
#include "kernels/tensor.hpp"
#include "kernels/thread_pool.hpp"

#include <catch2/catch.hpp>

#include <atomic>

using namespace gradwire;
using namespace gradwire::kernels;

TEST_CASE("tensors are views of shared storage") {
  auto t = tensor::zeros({4, 3});
  CHECK(t.numel() == 12);
  CHECK(t.shape() == shape_t{4, 3});
  auto r = t.rows(1, 2);
  r.data()[0] = 5.f;
  CHECK(t.data()[3] == 5.f); // row 1, column 0
  CHECK(r.shared_storage() == t.shared_storage());
  auto v = t.view(6, {2, 3});
  CHECK(v.data()[0] == t.data()[6]);
  CHECK(t.reshape({12}).numel() == 12);
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);
}

TEST_CASE("bad views and reshapes are errors, not crashes") {
  auto t = tensor::zeros({4, 3});
  CHECK_THROWS_AS(t.reshape({5, 3}), gradwire::error);
  CHECK_THROWS_AS(t.view(10, {1, 3}), gradwire::error);
  CHECK_THROWS_AS(t.rows(3, 2), gradwire::error);
  CHECK_THROWS_WITH(t.data_i32(), Catch::Contains("not i32"));
}

TEST_CASE("copy and to_vector round-trip") {
  auto a = tensor::from({1, 2, 3, 4}, {2, 2});
  auto b = tensor::empty({4});
  copy(a, b);
  CHECK(b.to_vector() == std::vector<float>{1, 2, 3, 4});
  CHECK_THROWS_AS(copy(a, tensor::empty({3})), gradwire::error);
}

TEST_CASE("devices parse and print") {
  CHECK(to_string(parse_device("cpu")) == "cpu");
  CHECK(to_string(parse_device("cuda:1")) == "cuda:1");
  CHECK(parse_device("cuda") == device::cuda(0));
  CHECK_THROWS_WITH(parse_device("gpu0"), Catch::Contains("unknown device 'gpu0'"));
  CHECK_THROWS_AS(parse_device("cuda:x"), gradwire::error);
}

TEST_CASE("a CUDA device that is not there is a clear error") {
  if (cuda_device_count() > 0)
    return; // there is a GPU: nothing to check here
  CHECK_THROWS_WITH(backend_for(device::cuda(0)), Catch::Contains("cuda:0"));
}

TEST_CASE("thread pool runs every task once and propagates errors") {
  for (std::size_t threads : {1u, 2u, 4u}) {
    thread_pool pool(threads);
    std::vector<std::atomic<int>> hits(threads);
    for (int round = 0; round < 100; ++round)
      pool.run(threads, [&](std::size_t i) { hits[i]++; });
    for (auto& h : hits)
      CHECK(h.load() == 100);
    CHECK_THROWS_WITH(pool.run(threads, [&](std::size_t i) {
                        if (i + 1 == threads)
                          throw gradwire::error("task failed");
                      }),
                      "task failed");
    pool.run(1, [](std::size_t) {}); // usable after an error
    CHECK_THROWS_AS(pool.run(threads + 1, [](std::size_t) {}), gradwire::error);
  }
}
