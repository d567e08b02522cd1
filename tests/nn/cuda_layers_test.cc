// The CUDA layers (nn/cuda/layers.h) against the CPU layers (nn/layers/*.h) on the same random
// inputs, forward and backward, at a GPT-2-small-like shape and an odd one; each GPU layer run
// twice with the same bits; and a timing line per layer at GPT-2 small's shape.
//
// Without a CUDA device every test skips itself, so that CI (no GPU) passes;
// TROUPE_REQUIRE_GPU=1 turns that into a failure, for the GPU check (scripts/gpu_check.sh).
//
// Tolerances. A value passes when |gpu - cpu| <= rtol * (|cpu| + M), M the largest |cpu| of its
// tensor (as nn_gpt_parity_test):
//   encoder, residual:                   rtol 0 (the same additions in the same order: equal bits)
//   GELU, LayerNorm, cross-entropy:      rtol 1e-5 (expf against the CPU's exp_fast, FMA
//                                        contraction, sums in another order)
//   linear, attention (cuBLAS, K <= 768): rtol 1e-4 (GEMM sums in another order)
// Every gradient buffer starts at kPrefill, not 0, to check that backward passes accumulate.
// The worst error of each tensor is printed as a fraction of its tolerance.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nn/cuda/detail/cublas.h"
#include "nn/cuda/layers.h"
#include "nn/layers/attention.h"
#include "nn/layers/crossentropy.h"
#include "nn/layers/encoder.h"
#include "nn/layers/gelu.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/linear.h"
#include "nn/layers/residual.h"

namespace troupe::nn {
namespace {

using Floats = std::vector<float>;
using Tokens = std::vector<int32_t>;
// Named tensors a layer produced, in a fixed order.
using Outputs = std::vector<std::pair<std::string, Floats>>;

constexpr float kPrefill = 0.25f;
constexpr double kExact = 0.0;
constexpr double kElementwiseRtol = 1e-5;
constexpr double kGemmRtol = 1e-4;

void check_cuda(cudaError_t code, const char* what) {
  if (code != cudaSuccess) {
    throw std::runtime_error(
        absl::StrCat(what, ": ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")"));
  }
}

void check(const absl::Status& status) {
  if (!status.ok()) throw std::runtime_error(status.ToString());
}

// Why these tests cannot run here; empty when a CUDA device is usable.
std::string missing_device() {
  int count = 0;
  cudaError_t code = cudaGetDeviceCount(&count);
  if (code == cudaSuccess && count > 0) return "";
  std::string why = "needs a CUDA device; found none";
  if (code != cudaSuccess) {
    absl::StrAppend(&why, " (cudaGetDeviceCount: ", cudaGetErrorName(code), ": ",
                    cudaGetErrorString(code), ")");
  }
  return why;
}

bool gpu_required() {
  const char* require = std::getenv("TROUPE_REQUIRE_GPU");
  return require != nullptr && std::string(require) == "1";
}

// n elements of T in device memory, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    void* data = nullptr;
    check_cuda(cudaMalloc(&data, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    data_ = static_cast<T*>(data);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    check_cuda(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice),
               "cudaMemcpy to device");
  }
  ~DeviceArray() { (void)cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    check_cuda(cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
               "cudaMemcpy to host");
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t n_;
};
using DeviceFloats = DeviceArray<float>;
using DeviceTokens = DeviceArray<int32_t>;

Floats random_floats(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats v(n);
  for (float& x : v)
    x = offset + scale * normal(rng);
  return v;
}

Tokens random_tokens(size_t n, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  Tokens v(n);
  for (int32_t& x : v)
    x = pick(rng);
  return v;
}

Floats prefilled(size_t n) {
  return Floats(n, kPrefill);
}

// Every tensor of gpu within rtol * (|cpu| + M) of the same tensor of cpu.
void expect_close(const std::string& layer, const Outputs& gpu, const Outputs& cpu, double rtol) {
  ASSERT_EQ(gpu.size(), cpu.size()) << layer;
  for (size_t t = 0; t < gpu.size(); t++) {
    const auto& [name, got] = gpu[t];
    const Floats& want = cpu[t].second;
    ASSERT_EQ(got.size(), want.size()) << layer << " " << name;
    double max_abs = 0.0;
    for (float w : want)
      max_abs = std::max(max_abs, std::abs(double{w}));
    double worst = 0.0;  // the largest |gpu - cpu| / tolerance (or the largest error at rtol 0)
    size_t at = 0;
    for (size_t i = 0; i < got.size(); i++) {
      const double err = std::abs(double{got[i]} - double{want[i]});
      const double tol = rtol * (std::abs(double{want[i]}) + max_abs);
      const double ratio = tol > 0.0 ? err / tol : err;
      if (!(ratio <= worst)) worst = ratio, at = i;
    }
    if (rtol > 0.0) {
      std::printf("[ accuracy ] %s %s: worst error %.3g of the tolerance (rtol %g)\n",
                  layer.c_str(), name.c_str(), worst, rtol);
      EXPECT_LE(worst, 1.0) << layer << " " << name << "[" << at << "] = " << got[at] << ", cpu "
                            << want[at];
    } else {
      EXPECT_EQ(worst, 0.0) << layer << " " << name << "[" << at << "] = " << got[at] << ", cpu "
                            << want[at] << " (must be equal)";
    }
  }
}

// Two GPU runs gave the same bits.
void expect_same_bits(const std::string& layer, const Outputs& first, const Outputs& second) {
  ASSERT_EQ(first.size(), second.size()) << layer;
  for (size_t t = 0; t < first.size(); t++) {
    const Floats& a = first[t].second;
    const Floats& b = second[t].second;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << layer << " " << first[t].first << " differs between two GPU runs";
  }
}

struct Shape {
  const char* name;
  int B, T, C, NH, V, Vp;
  int token_range;  // the encoder's token ids are drawn from [0, token_range): repeats
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name << " (B " << s.B << ", T " << s.T << ", C " << s.C << ", NH " << s.NH << ", V "
      << s.V << ", Vp " << s.Vp << ")";
}

// GPT-2-small-like (hs 32, V 1000 padded to 1024), and an odd one: C not a multiple of 32,
// hs 12, B*T = 291 (more positions than a block has threads), T prime, V and Vp odd sizes,
// tokens from 7 ids (every one repeats many times).
const Shape kShapes[] = {
    {"gpt2ish", 4, 64, 128, 4, 1000, 1024, 1000},
    {"odd", 3, 97, 72, 6, 203, 208, 7},
};

class CudaTest : public testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = missing_device(); !why.empty()) {
      // A fatal failure, so that the test body does not run.
      if (gpu_required()) FAIL() << "TROUPE_REQUIRE_GPU=1 but this test " << why;
      GTEST_SKIP() << why;
    }
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    absl::StatusOr<cuda::Cublas> blas = cuda::Cublas::create();
    ASSERT_TRUE(blas.ok()) << blas.status();
    blas_.emplace(std::move(*blas));
  }
  void TearDown() override {
    blas_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  void sync() { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  const cuda::Cublas& blas() const { return *blas_; }

  cudaStream_t stream_ = nullptr;
  std::optional<cuda::Cublas> blas_;
};

class CudaLayersTest : public CudaTest, public testing::WithParamInterface<Shape> {
 public:
  std::string layer(const char* name) const { return absl::StrCat(name, "/", GetParam().name); }
  cudaStream_t stream() const { return stream_; }
  void synchronize() { sync(); }
};

// cuBLAS is not mapped until a GPU needs it (libcublasLt holds ~150 MB resident in a process
// that maps it), and then it loads with every function nn calls. No GPU needed: ctest runs each
// test in a process of its own, so nothing before this one has loaded it.
TEST(CublasTest, LoadsOnFirstUseNotWhenTheProgramStarts) {
  auto mapped = [] {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
      if (line.find("libcublas") != std::string::npos) return true;
    return false;
  };
  EXPECT_FALSE(mapped()) << "cuBLAS was mapped before anything asked for it";
  absl::Status loaded = cuda::detail::load_cublas();
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_TRUE(cuda::detail::cublas_loaded());
  EXPECT_NE(cuda::detail::cublas().sgemm, nullptr);
  EXPECT_NE(cuda::detail::cublas().sgemm_strided_batched, nullptr);
  EXPECT_NE(cuda::detail::cublas().gemm_ex, nullptr);
  EXPECT_NE(cuda::detail::cublas().gemm_strided_batched_ex, nullptr);
  EXPECT_TRUE(mapped());
  EXPECT_EQ(cuda::detail::load_cublas(), loaded);  // once per process
}

TEST_P(CudaLayersTest, Encoder) {
  const Shape& s = GetParam();
  const int BT = s.B * s.T, maxT = s.T + 3;
  const Tokens inp = random_tokens(BT, s.token_range, 1);
  const Floats wte = random_floats(static_cast<size_t>(s.Vp) * s.C, 2);
  const Floats wpe = random_floats(static_cast<size_t>(maxT) * s.C, 3);
  const Floats dout = random_floats(static_cast<size_t>(BT) * s.C, 4);

  Floats out(dout.size()), dwte = prefilled(wte.size()), dwpe = prefilled(wpe.size());
  encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), s.B, s.T, s.C);
  const Outputs cpu = {{"out", out}, {"dwte", dwte}, {"dwpe", dwpe}};

  auto run = [&] {
    DeviceTokens d_inp(inp);
    DeviceFloats d_wte(wte), d_wpe(wpe), d_dout(dout), d_out(out.size());
    DeviceFloats d_dwte(prefilled(wte.size())), d_dwpe(prefilled(wpe.size()));
    check(cuda::encoder_forward(d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C,
                                stream_));
    check(cuda::encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_inp.get(), s.B, s.T,
                                 s.C, stream_));
    sync();
    return Outputs{
        {"out", d_out.to_host()}, {"dwte", d_dwte.to_host()}, {"dwpe", d_dwpe.to_host()}};
  };
  const Outputs first = run();
  expect_close(layer("encoder"), first, cpu, kExact);
  expect_same_bits(layer("encoder"), first, run());
}

TEST_P(CudaLayersTest, LayerNorm) {
  const Shape& s = GetParam();
  const int BT = s.B * s.T, C = s.C;
  const size_t n = static_cast<size_t>(BT) * C;
  const Floats inp = random_floats(n, 1, 2.0f, 0.5f), dout = random_floats(n, 4);
  const Floats weight = random_floats(C, 2, 0.2f, 1.0f), bias = random_floats(C, 3);

  Floats out(n), mean(BT), rstd(BT), dinp = prefilled(n), dweight = prefilled(C),
                                     dbias = prefilled(C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                    s.B, s.T, C);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                     weight.data(), mean.data(), rstd.data(), s.B, s.T, C);
  const Outputs cpu = {{"out", out},   {"mean", mean},       {"rstd", rstd},
                       {"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias}};

  auto run = [&] {
    DeviceFloats d_inp(inp), d_w(weight), d_b(bias), d_dout(dout), d_out(n), d_mean(BT), d_rstd(BT),
        d_dinp(prefilled(n)), d_dw(prefilled(C)), d_db(prefilled(C));
    check(cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(),
                                  d_b.get(), s.B, s.T, C, stream_));
    check(cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                                   d_w.get(), d_mean.get(), d_rstd.get(), s.B, s.T, C, stream_));
    sync();
    return Outputs{{"out", d_out.to_host()},    {"mean", d_mean.to_host()},
                   {"rstd", d_rstd.to_host()},  {"dinp", d_dinp.to_host()},
                   {"dweight", d_dw.to_host()}, {"dbias", d_db.to_host()}};
  };
  const Outputs first = run();
  expect_close(layer("layernorm"), first, cpu, kElementwiseRtol);
  expect_same_bits(layer("layernorm"), first, run());
}

TEST_P(CudaLayersTest, Linear) {
  const Shape& s = GetParam();
  const int BT = s.B * s.T;
  struct Case {
    const char* name;
    int C, OC;
    bool bias, dinp;
  };
  // GPT-2's four linears and its tied LM head (no bias, no dinp at the first step of a stage),
  // and an input of 768 channels (GPT-2 small's C: the longest GEMM sum in these tests).
  const Case cases[] = {
      {"qkv", s.C, 3 * s.C, true, true},   {"attproj", s.C, s.C, true, true},
      {"fc", s.C, 4 * s.C, true, true},    {"fcproj", 4 * s.C, s.C, true, true},
      {"lmhead", s.C, s.Vp, false, false}, {"wide", 768, 96, true, true},
  };
  for (const Case& c : cases) {
    const std::string name = layer(absl::StrCat("linear_", c.name).c_str());
    const size_t nin = static_cast<size_t>(BT) * c.C, nout = static_cast<size_t>(BT) * c.OC;
    const size_t nw = static_cast<size_t>(c.OC) * c.C;
    const Floats inp = random_floats(nin, 1), weight = random_floats(nw, 2, 0.1f);
    const Floats bias = random_floats(c.OC, 3), dout = random_floats(nout, 4);

    Floats out(nout), dinp = prefilled(nin), dweight = prefilled(nw), dbias = prefilled(c.OC);
    linear_forward(out.data(), inp.data(), weight.data(), c.bias ? bias.data() : nullptr, s.B, s.T,
                   c.C, c.OC);
    linear_backward(c.dinp ? dinp.data() : nullptr, dweight.data(), c.bias ? dbias.data() : nullptr,
                    dout.data(), inp.data(), weight.data(), s.B, s.T, c.C, c.OC);
    const Outputs cpu = {{"out", out}, {"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias}};

    auto run = [&] {
      DeviceFloats d_inp(inp), d_w(weight), d_b(bias), d_dout(dout), d_out(nout),
          d_dinp(prefilled(nin)), d_dw(prefilled(nw)), d_db(prefilled(c.OC));
      check(cuda::linear_forward(blas(), d_out.get(), d_inp.get(), d_w.get(),
                                 c.bias ? d_b.get() : nullptr, s.B, s.T, c.C, c.OC, stream_));
      check(cuda::linear_backward(blas(), c.dinp ? d_dinp.get() : nullptr, d_dw.get(),
                                  c.bias ? d_db.get() : nullptr, d_dout.get(), d_inp.get(),
                                  d_w.get(), s.B, s.T, c.C, c.OC, stream_));
      sync();
      return Outputs{{"out", d_out.to_host()},
                     {"dinp", d_dinp.to_host()},
                     {"dweight", d_dw.to_host()},
                     {"dbias", d_db.to_host()}};
    };
    const Outputs first = run();
    expect_close(name, first, cpu, kGemmRtol);
    expect_same_bits(name, first, run());
  }
}

// Attention through `handle` against the CPU layer, to `rtol`: the output, the probabilities
// (exactly 0 above the diagonal, as on the CPU) and the input's gradient; the same bits twice.
void check_attention(CudaLayersTest& test, const cuda::Cublas& handle, const std::string& name,
                     double rtol) {
  const Shape& s = test.GetParam();
  const size_t nqkv = static_cast<size_t>(s.B) * s.T * 3 * s.C;
  const size_t nout = static_cast<size_t>(s.B) * s.T * s.C;
  const size_t natt = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
  const Floats inp = random_floats(nqkv, 1), dout = random_floats(nout, 2);

  Floats out(nout), att(natt), dinp = prefilled(nqkv);
  attention_forward(out.data(), att.data(), inp.data(), s.B, s.T, s.C, s.NH);
  attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), s.B, s.T, s.C, s.NH);
  const Outputs cpu = {{"out", out}, {"att", att}, {"dinp", dinp}};

  auto run = [&] {
    // att and the scratch start as NaN: every element must be written.
    DeviceFloats d_inp(inp), d_dout(dout), d_out(nout), d_att(Floats(natt, NAN)),
        d_datt(Floats(natt, NAN)), d_dinp(prefilled(nqkv));
    check(cuda::attention_forward(handle, d_out.get(), d_att.get(), d_inp.get(), s.B, s.T, s.C,
                                  s.NH, test.stream()));
    check(cuda::attention_backward(handle, d_dinp.get(), d_datt.get(), d_dout.get(), d_inp.get(),
                                   d_att.get(), s.B, s.T, s.C, s.NH, test.stream()));
    test.synchronize();
    return Outputs{{"out", d_out.to_host()}, {"att", d_att.to_host()}, {"dinp", d_dinp.to_host()}};
  };
  const Outputs first = run();
  expect_close(test.layer(name.c_str()), first, cpu, rtol);
  expect_same_bits(test.layer(name.c_str()), first, run());
  const Floats& gpu_att = first[1].second;
  for (size_t r = 0; r < natt / s.T; r++) {
    const int t = static_cast<int>(r % s.T);
    for (int t2 = t + 1; t2 < s.T; t2++)
      ASSERT_EQ(gpu_att[r * s.T + t2], 0.0f) << "att row " << r << " column " << t2;
  }
}

TEST_P(CudaLayersTest, Attention) {
  check_attention(*this, blas(), "attention", kGemmRtol);
}

// Attention's products on bf16 operands (a bf16 model's handle): the fp32 CPU layer within the
// rounding of 8-bit mantissas, 1% of each output's largest value; the same bits run after run.
TEST_P(CudaLayersTest, AttentionOnBf16Operands) {
  absl::StatusOr<cuda::Cublas> bf16 = cuda::Cublas::create(cuda::GemmInputs::kBFloat16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  check_attention(*this, *bf16, "attention_bf16", 1e-2);
}

TEST_P(CudaLayersTest, Gelu) {
  const Shape& s = GetParam();
  const size_t n = static_cast<size_t>(s.B) * s.T * 4 * s.C;
  const Floats inp = random_floats(n, 1, 3.0f), dout = random_floats(n, 2);
  Floats out(n), dinp = prefilled(n);
  gelu_forward(out.data(), inp.data(), n);
  gelu_backward(dinp.data(), dout.data(), inp.data(), n);
  const Outputs cpu = {{"out", out}, {"dinp", dinp}};

  auto run = [&] {
    DeviceFloats d_inp(inp), d_dout(dout), d_out(n), d_dinp(prefilled(n));
    check(cuda::gelu_forward(d_out.get(), d_inp.get(), n, stream_));
    check(cuda::gelu_backward(d_dinp.get(), d_dout.get(), d_inp.get(), n, stream_));
    sync();
    return Outputs{{"out", d_out.to_host()}, {"dinp", d_dinp.to_host()}};
  };
  const Outputs first = run();
  expect_close(layer("gelu"), first, cpu, kElementwiseRtol);
  expect_same_bits(layer("gelu"), first, run());
}

TEST_P(CudaLayersTest, Residual) {
  const Shape& s = GetParam();
  const size_t n = static_cast<size_t>(s.B) * s.T * s.C;
  const Floats a = random_floats(n, 1), b = random_floats(n, 2), dout = random_floats(n, 3);
  Floats out(n), d1 = prefilled(n), d2 = prefilled(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  residual_backward(d1.data(), d2.data(), dout.data(), n);
  const Outputs cpu = {{"out", out}, {"dinp1", d1}, {"dinp2", d2}, {"dinp2_only", d2}};

  auto run = [&] {
    DeviceFloats d_a(a), d_b(b), d_dout(dout), d_out(n), d_d1(prefilled(n)), d_d2(prefilled(n)),
        d_only(prefilled(n));
    check(cuda::residual_forward(d_out.get(), d_a.get(), d_b.get(), n, stream_));
    check(cuda::residual_backward(d_d1.get(), d_d2.get(), d_dout.get(), n, stream_));
    check(cuda::residual_backward(nullptr, d_only.get(), d_dout.get(), n, stream_));
    sync();
    return Outputs{{"out", d_out.to_host()},
                   {"dinp1", d_d1.to_host()},
                   {"dinp2", d_d2.to_host()},
                   {"dinp2_only", d_only.to_host()}};
  };
  const Outputs first = run();
  expect_close(layer("residual"), first, cpu, kExact);
  expect_same_bits(layer("residual"), first, run());
}

TEST_P(CudaLayersTest, CrossEntropy) {
  const Shape& s = GetParam();
  const int BT = s.B * s.T, V = s.V, Vp = s.Vp;
  const size_t n = static_cast<size_t>(BT) * Vp;
  const float dloss = 0.7f;
  Floats logits = random_floats(n, 1, 3.0f);
  for (int r = 0; r < BT; r++)
    for (int i = V; i < Vp; i++)
      logits[static_cast<size_t>(r) * Vp + i] = 1e4f;  // padding must not count
  const Tokens targets = random_tokens(BT, V, 2);

  Floats losses(BT), lse(BT), dlogits = prefilled(n), probs(n);
  const float loss = crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(),
                                          s.B, s.T, V, Vp);
  crossentropy_backward(dlogits.data(), dloss, logits.data(), lse.data(), targets.data(), s.B, s.T,
                        V, Vp);
  softmax_forward(probs.data(), logits.data(), s.B, s.T, V, Vp);
  const Outputs cpu = {{"loss", {loss}},     {"loss_without_losses", {loss}},
                       {"losses", losses},   {"lse", lse},
                       {"dlogits", dlogits}, {"probs", probs}};

  auto run = [&] {
    DeviceFloats d_logits(logits), d_loss(1), d_loss2(1), d_losses(BT), d_lse(BT),
        d_dlogits(prefilled(n)), d_probs(Floats(n, NAN));
    DeviceTokens d_targets(targets);
    check(cuda::crossentropy_forward(d_loss.get(), d_losses.get(), d_lse.get(), d_logits.get(),
                                     d_targets.get(), s.B, s.T, V, Vp, stream_));
    check(cuda::crossentropy_forward(d_loss2.get(), nullptr, d_lse.get(), d_logits.get(),
                                     d_targets.get(), s.B, s.T, V, Vp, stream_));
    check(cuda::crossentropy_backward(d_dlogits.get(), dloss, d_logits.get(), d_lse.get(),
                                      d_targets.get(), s.B, s.T, V, Vp, stream_));
    check(cuda::softmax_forward(d_probs.get(), d_logits.get(), s.B, s.T, V, Vp, stream_));
    sync();
    return Outputs{{"loss", d_loss.to_host()},       {"loss_without_losses", d_loss2.to_host()},
                   {"losses", d_losses.to_host()},   {"lse", d_lse.to_host()},
                   {"dlogits", d_dlogits.to_host()}, {"probs", d_probs.to_host()}};
  };
  const Outputs first = run();
  expect_close(layer("crossentropy"), first, cpu, kElementwiseRtol);
  expect_same_bits(layer("crossentropy"), first, run());
  // The padding gets no gradient: exactly the prefill.
  const Floats& gpu_dlogits = first[4].second;
  for (int r = 0; r < BT; r++)
    for (int i = V; i < Vp; i++)
      ASSERT_EQ(gpu_dlogits[static_cast<size_t>(r) * Vp + i], kPrefill) << r << ", " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLayersTest, testing::ValuesIn(kShapes),
                         [](const testing::TestParamInfo<Shape>& param) {
                           return std::string(param.param.name);
                         });

// --- Timing at GPT-2 small's shape (B 4, T 1024, C 768, NH 12, V 50257 padded to 50304). ---

// Values for timing only: a cheap generator, to fill ~200M floats quickly.
Floats cheap_floats(size_t n, uint32_t seed) {
  Floats v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
  }
  return v;
}

class CudaLayersTiming : public CudaTest {
 protected:
  // Mean milliseconds of one gpu() after a warm-up, over kIters runs timed by events on the
  // stream; and of one cpu() on the host (after its own warm-up, none: the buffers are touched).
  void report(const char* what, const std::function<void()>& gpu,
              const std::function<void()>& cpu) {
    constexpr int kIters = 10;
    gpu();
    cudaEvent_t start, stop;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    check_cuda(cudaEventRecord(start, stream_), "cudaEventRecord");
    for (int i = 0; i < kIters; i++)
      gpu();
    check_cuda(cudaEventRecord(stop, stream_), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float total = 0.0f;
    check_cuda(cudaEventElapsedTime(&total, start, stop), "cudaEventElapsedTime");
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    const double gpu_ms = total / kIters;
    const auto t0 = std::chrono::steady_clock::now();
    cpu();
    const double cpu_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ timing ] %-24s gpu %9.3f ms   cpu %9.1f ms   (cpu / gpu %.0fx)\n", what, gpu_ms,
                cpu_ms, cpu_ms / gpu_ms);
    std::fflush(stdout);
  }
};

TEST_F(CudaLayersTiming, Gpt2SmallShapes) {
  const int B = 4, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304, BT = B * T;
  const size_t nc = static_cast<size_t>(BT) * C, n4c = 4 * nc;
  const size_t natt = static_cast<size_t>(B) * NH * T * T, nlogits = static_cast<size_t>(BT) * Vp;
  std::printf("[ timing ] B %d, T %d, C %d, NH %d, V %d (Vp %d); gpu: mean of 10 runs, cpu: one\n",
              B, T, C, NH, V, Vp);
  Tokens tokens = random_tokens(BT, V, 1);
  Floats x = cheap_floats(n4c, 1), g = cheap_floats(n4c, 2), y(n4c), dx(n4c);
  Floats w = cheap_floats(static_cast<size_t>(4) * C * C, 3), dw(w.size()), bias(4 * C),
         dbias(4 * C), mean(BT), rstd(BT);
  Floats wte = cheap_floats(static_cast<size_t>(Vp) * C, 4), dwte(wte.size()), dwpe(nc / B);
  Floats att(natt), logits = cheap_floats(nlogits, 5), dlogits(nlogits), lse(BT);
  DeviceTokens d_tokens(tokens);
  DeviceFloats d_x(x), d_g(g), d_y(n4c), d_dx(n4c), d_w(w), d_dw(w.size()), d_bias(bias),
      d_dbias(bias.size()), d_mean(BT), d_rstd(BT), d_wte(wte), d_dwte(wte.size()),
      d_dwpe(dwpe.size()), d_att(natt), d_datt(natt), d_logits(logits), d_dlogits(nlogits),
      d_lse(BT), d_loss(1);
  cudaStream_t st = stream_;

  report(
      "encoder forward",
      [&] {
        check(
            cuda::encoder_forward(d_y.get(), d_tokens.get(), d_wte.get(), d_x.get(), B, T, C, st));
      },
      [&] { encoder_forward(y.data(), tokens.data(), wte.data(), x.data(), B, T, C); });
  report(
      "encoder backward",
      [&] {
        check(cuda::encoder_backward(d_dwte.get(), d_dwpe.get(), d_g.get(), d_tokens.get(), B, T, C,
                                     st));
      },
      [&] { encoder_backward(dwte.data(), dwpe.data(), g.data(), tokens.data(), B, T, C); });
  report(
      "layernorm forward",
      [&] {
        check(cuda::layernorm_forward(d_y.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(),
                                      d_bias.get(), B, T, C, st));
      },
      [&] {
        layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), B, T,
                          C);
      });
  report(
      "layernorm backward",
      [&] {
        check(cuda::layernorm_backward(d_dx.get(), d_dw.get(), d_dbias.get(), d_g.get(), d_x.get(),
                                       d_w.get(), d_mean.get(), d_rstd.get(), B, T, C, st));
      },
      [&] {
        layernorm_backward(dx.data(), dw.data(), dbias.data(), g.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), B, T, C);
      });
  report(
      "linear fc forward",  // [BT, C] -> [BT, 4C]
      [&] {
        check(cuda::linear_forward(blas(), d_y.get(), d_x.get(), d_w.get(), d_bias.get(), B, T, C,
                                   4 * C, st));
      },
      [&] { linear_forward(y.data(), x.data(), w.data(), bias.data(), B, T, C, 4 * C); });
  report(
      "linear fc backward",
      [&] {
        check(cuda::linear_backward(blas(), d_dx.get(), d_dw.get(), d_dbias.get(), d_g.get(),
                                    d_x.get(), d_w.get(), B, T, C, 4 * C, st));
      },
      [&] {
        linear_backward(dx.data(), dw.data(), dbias.data(), g.data(), x.data(), w.data(), B, T, C,
                        4 * C);
      });
  report(
      "attention forward",  // qkv [BT, 3C] from x
      [&] {
        check(cuda::attention_forward(blas(), d_y.get(), d_att.get(), d_x.get(), B, T, C, NH, st));
      },
      [&] { attention_forward(y.data(), att.data(), x.data(), B, T, C, NH); });
  report(
      "attention backward",
      [&] {
        check(cuda::attention_backward(blas(), d_dx.get(), d_datt.get(), d_g.get(), d_x.get(),
                                       d_att.get(), B, T, C, NH, st));
      },
      [&] { attention_backward(dx.data(), g.data(), x.data(), att.data(), B, T, C, NH); });
  report(
      "gelu forward",  // B*T*4C
      [&] { check(cuda::gelu_forward(d_y.get(), d_x.get(), n4c, st)); },
      [&] { gelu_forward(y.data(), x.data(), n4c); });
  report(
      "gelu backward",
      [&] { check(cuda::gelu_backward(d_dx.get(), d_g.get(), d_x.get(), n4c, st)); },
      [&] { gelu_backward(dx.data(), g.data(), x.data(), n4c); });
  report(
      "residual forward",  // B*T*C
      [&] { check(cuda::residual_forward(d_y.get(), d_x.get(), d_g.get(), nc, st)); },
      [&] { residual_forward(y.data(), x.data(), g.data(), nc); });
  report(
      "residual backward",
      [&] { check(cuda::residual_backward(d_dx.get(), d_y.get(), d_g.get(), nc, st)); },
      [&] { residual_backward(dx.data(), y.data(), g.data(), nc); });
  report(
      "crossentropy forward",
      [&] {
        check(cuda::crossentropy_forward(d_loss.get(), nullptr, d_lse.get(), d_logits.get(),
                                         d_tokens.get(), B, T, V, Vp, st));
      },
      [&] {
        (void)crossentropy_forward(nullptr, lse.data(), logits.data(), tokens.data(), B, T, V, Vp);
      });
  report(
      "crossentropy backward",
      [&] {
        check(cuda::crossentropy_backward(d_dlogits.get(), 1.0f, d_logits.get(), d_lse.get(),
                                          d_tokens.get(), B, T, V, Vp, st));
      },
      [&] {
        crossentropy_backward(dlogits.data(), 1.0f, logits.data(), lse.data(), tokens.data(), B, T,
                              V, Vp);
      });
}

}  // namespace
}  // namespace troupe::nn
