#pragma once
/// @file op_timer.hpp
/// Where a GPU step's time goes, per backend operation: with
/// GRADWIRE_CUDA_PROFILE=1 each timed call records a CUDA event before and
/// after its work on the backend's stream. The backend's first synchronize()
/// starts the count (what came before is warm-up: cuDNN's algorithm search,
/// first allocations); each later one folds the finished pairs into totals
/// by name. The table goes to the log when the backend is destroyed: GPU time
/// per operation, and how busy the GPU was between the first event counted
/// and the last. Off, the default, a timed call costs one branch. A
/// diagnostic for bench runs: each call then records two events.

#include "kernels/backend.hpp"
#include "kernels/cuda/module_log.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::kernels {

class op_timer {
public:
  op_timer() {
    const char* v = std::getenv("GRADWIRE_CUDA_PROFILE");
    on_ = v != nullptr && *v != '\0' && *v != '0';
  }
  ~op_timer() {
    if (!on_)
      return;
    if (started_)
      fold(false);
    print();
    for (auto& p : pending_) {
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.stop);
    }
    for (auto e : free_)
      cudaEventDestroy(e);
  }
  op_timer(const op_timer&) = delete;
  op_timer& operator=(const op_timer&) = delete;

  bool on() const { return on_; }

  /// Times the work a backend call issues on `s` between construction and
  /// destruction.
  class scope {
  public:
    scope() = default;
    scope(op_timer* t, cudaStream_t s, std::string name) : t_(t), s_(s) {
      start_ = t_->event();
      cudaEventRecord(start_, s_);
      name_ = std::move(name);
    }
    ~scope() {
      if (t_ != nullptr) {
        cudaEvent_t stop = t_->event();
        cudaEventRecord(stop, s_);
        t_->add(std::move(name_), start_, stop);
      }
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

  private:
    op_timer* t_ = nullptr;
    cudaStream_t s_ = nullptr;
    cudaEvent_t start_ = nullptr;
    std::string name_;
  };

  scope time(cudaStream_t s, const char* what) {
    if (!on_)
      return scope();
    return scope(this, s, what);
  }
  scope time(cudaStream_t s, const char* what, const conv_geom& g) {
    if (!on_)
      return scope();
    return scope(this, s, std::string(what) + " " + geom_name(g));
  }
  /// `what` with an NCHW shape (hw = H*W), e.g. batch norm's.
  scope time(cudaStream_t s, const char* what, int n, int c, int hw) {
    if (!on_)
      return scope();
    return scope(this, s, std::string(what) + " " + std::to_string(n) + "x" + std::to_string(c) +
                            "x" + std::to_string(hw));
  }

  static std::string geom_name(const conv_geom& g) {
    char b[96];
    std::snprintf(b, sizeof b, "%dx%dx%dx%d k%d %dx%d/%d", g.n, g.c, g.h, g.w, g.k, g.r, g.s,
                  g.stride);
    return b;
  }

  /// The backend's stream was just synchronised: the first time, forget the
  /// warm-up; later, fold every pair into the totals.
  void synchronized() {
    if (!on_)
      return;
    if (!started_) {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& p : pending_) {
        free_.push_back(p.start);
        free_.push_back(p.stop);
      }
      pending_.clear();
      started_ = true;
      return;
    }
    fold(true);
  }

private:
  /// Folds every finished pair into the totals; with `wait`, all of them.
  void fold(bool wait) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<pair> left;
    for (auto& p : pending_) {
      if (!wait && cudaEventQuery(p.stop) != cudaSuccess) {
        left.push_back(p);
        continue;
      }
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
        auto& t = totals_[p.name];
        t.first += 1;
        t.second += ms;
        if (first_ == nullptr) {
          first_ = p.start;
        } else {
          float since = 0;
          if (cudaEventElapsedTime(&since, first_, p.stop) == cudaSuccess)
            span_ms_ = std::max(span_ms_, static_cast<double>(since));
        }
      }
      if (p.start != first_)
        free_.push_back(p.start);
      free_.push_back(p.stop);
    }
    pending_ = std::move(left);
  }

  struct pair {
    std::string name;
    cudaEvent_t start, stop;
  };

  cudaEvent_t event() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    cudaEventCreate(&e);
    return e;
  }
  void add(std::string name, cudaEvent_t a, cudaEvent_t b) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back({std::move(name), a, b});
  }
  void print() const {
    std::vector<std::pair<std::string, std::pair<long, double>>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    double sum = 0;
    for (const auto& r : rows)
      sum += r.second.second;
    char line[256];
    cuda_detail::log_line("GPU time per operation (GRADWIRE_CUDA_PROFILE):");
    std::snprintf(line, sizeof line, "%-44s %8s %11s %10s %7s", "operation", "calls", "total ms", "mean us", "share");
    cuda_detail::log_line(line);
    for (const auto& r : rows) {
      std::snprintf(line, sizeof line, "%-44s %8ld %11.3f %10.2f %6.1f%%", r.first.c_str(), r.second.first,
                    r.second.second, 1e3 * r.second.second / static_cast<double>(r.second.first),
                    sum > 0 ? 100.0 * r.second.second / sum : 0.0);
      cuda_detail::log_line(line);
    }
    std::snprintf(line, sizeof line, "timed GPU work %.3f ms over a span of %.3f ms (%.1f%% busy)", sum, span_ms_,
                  span_ms_ > 0 ? 100.0 * sum / span_ms_ : 0.0);
    cuda_detail::log_line(line);
  }

  bool on_ = false;
  bool started_ = false;
  std::mutex mu_;
  std::vector<pair> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, std::pair<long, double>> totals_;
  cudaEvent_t first_ = nullptr;
  double span_ms_ = 0;
};

} // namespace gradwire::kernels
