#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

// Convolution through cuDNN, NCHW float. Each geometry gets a plan once
// (descriptors and algorithms, kept for the backend's life). Algorithms are
// timed by cuDNN on first use (cudnnFind*, as PyTorch's cudnn.benchmark =
// True does) and the fastest is kept among
//  - deterministic ones, so that a run repeats bit for bit;
//  - plain FP32 arithmetic (CUDNN_FMA_MATH: no TF32 tensor cores), so that
//    GPU results follow the CPU reference to float rounding;
//  - those needing a workspace of at most max_workspace.
// When none qualifies, the always-supported algorithms (implicit precomputed
// GEMM forward, algorithm 1 for both backward passes) are used.
// Timing the choice beat both the fixed algorithms and the heuristics'
// first deterministic choice, one of whose weight-gradient GEMMs took a
// quarter of a step (bench/gpu_train_vs_torch.sh; bench/RESULTS.md,
// "Figures behind the code").
// The weight gradient is then timed against gradwire's own deterministic
// paths (wgrad.cu, wgrad_direct.cu) and the fastest of the three is kept:
// on an H200, ResNet-20 at batch 256 went from 18,486 to 31,890 samples/s
// with those and norm.cu's BatchNorm (bench/RESULTS.md).

namespace gradwire::kernels {
namespace {

constexpr std::size_t max_workspace = std::size_t{256} << 20;

bool plain_fp32(cudnnMathType_t m) { return m == CUDNN_DEFAULT_MATH || m == CUDNN_FMA_MATH; }

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && *v != '0';
}

/// The first usable entry of a list ranked fastest first, else `fallback`.
/// GRADWIRE_CUDNN_LOG=1 prints the whole list; GRADWIRE_CUDNN_NONDET=1 (a
/// diagnostic: what determinism costs) lets nondeterministic ones qualify.
template <class Perf, class Algo>
Algo pick(const char* what, const conv_geom& g, const Perf* perf, int count, Algo fallback,
          float* ms = nullptr) {
  static const bool log = env_on("GRADWIRE_CUDNN_LOG"), any = env_on("GRADWIRE_CUDNN_NONDET");
  int chosen = -1;
  for (int i = 0; i < count && chosen < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        (any || perf[i].determinism == CUDNN_DETERMINISTIC) && plain_fp32(perf[i].mathType) &&
        perf[i].memory <= max_workspace)
      chosen = i;
  if (log) {
    std::string line = std::string("cudnn ") + what + " " + op_timer::geom_name(g) + ":";
    char one[96];
    for (int i = 0; i < count; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) {
        std::snprintf(one, sizeof one, " %s%d:%.3fms%s%s%s", i == chosen ? "*" : "", static_cast<int>(perf[i].algo),
                      perf[i].time, perf[i].determinism == CUDNN_DETERMINISTIC ? "" : ",nondet",
                      plain_fp32(perf[i].mathType) ? "" : ",tf32", perf[i].memory > max_workspace ? ",bigws" : "");
        line += one;
      }
    cuda_detail::log_line(line + (chosen < 0 ? " (none usable: fallback)" : ""));
  }
  if (ms != nullptr)
    *ms = chosen < 0 ? std::numeric_limits<float>::infinity() : perf[chosen].time;
  return chosen < 0 ? fallback : perf[chosen].algo;
}

/// GRADWIRE_CUDA_WGRAD=cudnn, gemm or direct forces the weight-gradient path
/// (tests); otherwise the fastest on this GPU is kept.
const char* wgrad_forced() {
  const char* v = std::getenv("GRADWIRE_CUDA_WGRAD");
  return v != nullptr && *v != '\0' ? v : nullptr;
}

const char* path_name(conv_plan::wgrad_path p) {
  return p == conv_plan::wgrad_path::gemm ? "gemm" : p == conv_plan::wgrad_path::direct ? "direct" : "cudnn";
}

} // namespace

conv_plan::~conv_plan() {
  if (conv != nullptr)
    cudnnDestroyConvolutionDescriptor(conv);
  if (w != nullptr)
    cudnnDestroyFilterDescriptor(w);
  if (y != nullptr)
    cudnnDestroyTensorDescriptor(y);
  if (x != nullptr)
    cudnnDestroyTensorDescriptor(x);
}

namespace {

/// The plan's cuDNN descriptors for `g`: NCHW fp32, plain FMA math.
void describe(conv_plan& p, const conv_geom& g) {
  GW_CUDNN(cudnnCreateTensorDescriptor(&p.x));
  GW_CUDNN(cudnnCreateTensorDescriptor(&p.y));
  GW_CUDNN(cudnnCreateFilterDescriptor(&p.w));
  GW_CUDNN(cudnnCreateConvolutionDescriptor(&p.conv));
  GW_CUDNN(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w));
  GW_CUDNN(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k, g.out_h(),
                                      g.out_w()));
  GW_CUDNN(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c, g.r, g.s));
  GW_CUDNN(cudnnSetConvolution2dDescriptor(p.conv, g.pad, g.pad, g.stride, g.stride, 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  GW_CUDNN(cudnnSetConvolutionMathType(p.conv, CUDNN_FMA_MATH));
}

/// cuDNN's algorithms for the three passes, timed by cudnnFind* (which
/// allocates its own buffers); returns the chosen weight gradient's ms.
float find_algorithms(cudnnHandle_t dnn, conv_plan& p, const conv_geom& g) {
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  GW_CUDNN(cudnnFindConvolutionForwardAlgorithm(dnn, p.x, p.w, p.conv, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                fwd));
  p.fwd = pick("fwd", g, fwd, n, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  GW_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(dnn, p.w, p.y, p.conv, p.x,
                                                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
  p.bwd_data = pick("dgrad", g, bd, n, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  GW_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(dnn, p.x, p.y, p.conv, p.w,
                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
  float cudnn_ms = 0;
  p.bwd_filter = pick("wgrad", g, bf, n, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &cudnn_ms);
  return cudnn_ms;
}

/// The largest workspace the plan's three algorithms ask.
std::size_t workspace_of(cudnnHandle_t dnn, const conv_plan& p) {
  std::size_t f = 0, bdw = 0, bfw = 0;
  GW_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(dnn, p.x, p.w, p.conv, p.y, p.fwd, &f));
  GW_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, p.w, p.y, p.conv, p.x, p.bwd_data, &bdw));
  GW_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, p.x, p.y, p.conv, p.w, p.bwd_filter, &bfw));
  return std::max({f, bdw, bfw});
}

} // namespace

void cuda_backend::choose_wgrad(conv_plan& p, const conv_geom& g, float cudnn_ms) {
  p.wgrad.choose(g, 8192);
  using path = conv_plan::wgrad_path;
  if (const char* forced = wgrad_forced()) {
    const std::string f = forced;
    if (f == "gemm" && p.wgrad.usable)
      p.wgrad_by = path::gemm;
    else if (f == "direct" && wgrad_direct_fits(g))
      p.wgrad_by = path::direct;
    return;
  }
  // cuDNN's deterministic choice, GEMMs summing 2K, 8K or 32K values
  // each, and the direct kernel: the fastest is kept.
  float best = cudnn_ms, gemm_ms = std::numeric_limits<float>::infinity();
  for (int reduction : {2048, 8192, 32768}) {
    wgrad_shape ws;
    ws.choose(g, reduction);
    const float ms = time_wgrad(g, &ws);
    gemm_ms = std::min(gemm_ms, ms);
    if (ms < best) {
      best = ms;
      p.wgrad = ws;
      p.wgrad_by = path::gemm;
    }
  }
  const float direct_ms = time_wgrad(g, nullptr);
  if (direct_ms < best)
    p.wgrad_by = path::direct;
  if (env_on("GRADWIRE_CUDNN_LOG")) {
    char line[256];
    std::snprintf(line, sizeof line, "wgrad %s: cudnn %.3fms, gemm %.3fms, direct %.3fms: %s",
                  op_timer::geom_name(g).c_str(), cudnn_ms, gemm_ms, direct_ms, path_name(p.wgrad_by));
    cuda_detail::log_line(line);
  }
}

const conv_plan& cuda_backend::plan_for(const conv_geom& g) {
  const std::array<int, 9> key = {g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride, g.pad};
  std::lock_guard<std::mutex> lock(host_mu_);
  auto& slot = plans_[key];
  if (slot)
    return *slot;
  auto p = std::make_unique<conv_plan>();
  describe(*p, g);
  GW_CUDA(cudaSetDevice(index_));
  choose_wgrad(*p, g, find_algorithms(dnn_, *p, g));
  p->workspace = workspace_of(dnn_, *p);
  slot = std::move(p);
  return *slot;
}

std::size_t cuda_backend::conv2d_workspace_bytes(const conv_geom& g) { return plan_for(g).workspace; }

void cuda_backend::conv2d_forward(const conv_geom& g, const float* x, const float* w, float* y,
                                  void* workspace) {
  const conv_plan& p = plan_for(g); // plans live as long as the backend
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "conv fwd", g);
  const float one = 1.f, zero = 0.f;
  GW_CUDNN(cudnnConvolutionForward(dnn_, &one, p.x, x, p.w, w, p.conv, p.fwd, workspace,
                                   p.workspace, &zero, p.y, y));
}

void cuda_backend::conv2d_backward(const conv_geom& g, const float* x, const float* w,
                                   const float* dy, float* dx, float* dw, void* workspace) {
  const conv_plan& p = plan_for(g);
  std::lock_guard<std::mutex> lock(host_mu_);
  const float one = 1.f, zero = 0.f;
  {
    const auto gw_timed = timer_.time(stream_, "conv wgrad", g);
    if (p.wgrad_by == conv_plan::wgrad_path::gemm)
      wgrad_gemm(g, p.wgrad, x, dy, dw);
    else if (p.wgrad_by == conv_plan::wgrad_path::direct)
      wgrad_direct(g, x, dy, dw);
    else
      GW_CUDNN(cudnnConvolutionBackwardFilter(dnn_, &one, p.x, x, p.y, dy, p.conv, p.bwd_filter,
                                              workspace, p.workspace, &one, p.w, dw));
  }
  if (dx != nullptr) {
    const auto gw_timed = timer_.time(stream_, "conv dgrad", g);
    GW_CUDNN(cudnnConvolutionBackwardData(dnn_, &one, p.w, w, p.y, dy, p.conv, p.bwd_data,
                                          workspace, p.workspace, &zero, p.x, dx));
  }
}

} // namespace gradwire::kernels
