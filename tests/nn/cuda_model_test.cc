// GPT-2 and Llama on a CUDA device (nn/cuda/gpt.h, nn/cuda/llama.h) against the CPU models on
// the same weights and batch:
// the loss, the logits and every gradient, whole, in a pipeline's pieces and in tensor-parallel
// ranks, made through
// nn::create_model as a stage makes it. fp32 with cuBLAS in pedantic fp32 (no TF32): within
// 1e-5 of the largest value of each tensor (the CPU layers' own parity with PyTorch is 1e-5 to
// 1e-4; nn_cuda_layers_test holds each layer to its tolerance). Without a CUDA device every test
// skips, saying why; TROUPE_REQUIRE_GPU=1 turns that into a failure (scripts/gpu_check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nn/device.h"
#include "nn/device_backend.h"
#include "nn/dtype.h"
#include "nn/gpt2/config.h"
#include "nn/llama/config.h"
#include "nn/memory.h"
#include "nn/model/model.h"
#include "tests/nn/simulated_group.h"

namespace troupe::nn {
namespace {

constexpr Device kGpu = Device::cuda(0);

GPTConfig small_gpt() {
  return {.max_seq_len = 64,
          .vocab_size = 203,
          .padded_vocab_size = 208,
          .num_layers = 3,
          .num_heads = 4,
          .channels = 64};
}

// Grouped-query attention (4 query heads over 2 key/value heads), an untied head.
LlamaConfig small_llama() {
  LlamaConfig c;
  c.vocab_size = 203;
  c.padded_vocab_size = 208;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

// The largest |cpu - gpu| over the tensor, as a fraction of the largest |cpu|.
double relative_error(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < cpu.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(cpu[i]) - gpu[i]));
    scale = std::max(scale, std::abs(static_cast<double>(cpu[i])));
  }
  return worst / scale;
}

std::vector<float> to_host(const float* device, size_t n) {
  std::vector<float> host(n);
  EXPECT_TRUE(
      copy_bytes(host.data(), Device::cpu(), device, kGpu, static_cast<int64_t>(n * sizeof(float)))
          .ok());
  return host;
}

std::vector<float> read(Device device, const float* p, size_t n) {
  return device.is_cpu() ? std::vector<float>(p, p + n) : to_host(p, n);
}

// A host all-reduce over a device buffer: copied out, reduced, copied back (as a collective group
// stages a device buffer when its members share one device).
AllReduceFn on_host(AllReduceFn host) {
  return [host = std::move(host)](float* data, size_t n) -> absl::Status {
    std::vector<float> staged = to_host(data, n);
    if (absl::Status s = host(staged.data(), n); !s.ok()) return s;
    return copy_bytes(data, kGpu, staged.data(), Device::cpu(),
                      static_cast<int64_t>(n * sizeof(float)));
  };
}

class CudaModelTest : public ::testing::TestWithParam<ModelConfig> {
 protected:
  void SetUp() override {
    if (cuda_device_count() > 0) return;
    const std::string why = absl::StrCat("needs a CUDA device: ", describe_devices());
    const char* require = std::getenv("TROUPE_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") {
      FAIL() << "TROUPE_REQUIRE_GPU=1 but this test " << why;
    }
    GTEST_SKIP() << why;
  }

  // A CPU model and a GPU model holding the same initial weights.
  void make_models(const ModelStorage& gpu_storage = {.device = kGpu}) {
    absl::StatusOr<std::unique_ptr<Model>> cpu = create_model(config_);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
    cpu_->init_parameters(42);
    absl::StatusOr<std::unique_ptr<Model>> gpu = create_model(config_, {}, gpu_storage);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    EXPECT_EQ(gpu_->device(), kGpu);
    if (gpu_storage.parameters) {
      ASSERT_TRUE(copy_bytes(gpu_->params(), kGpu, cpu_->params(), Device::cpu(),
                             static_cast<int64_t>(cpu_->num_params() * sizeof(float)))
                      .ok());
    }
  }

  void make_batch(int B, int T) {
    B_ = B;
    T_ = T;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> token(0, config_.vocab_size() - 1);
    inputs_.resize(static_cast<size_t>(B) * T);
    targets_.resize(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      inputs_[i] = token(rng);
      targets_[i] = token(rng);
    }
  }

  void expect_same_gradients(const float* gpu_grads) {
    const size_t n = cpu_->num_params();
    const std::vector<float> gpu = to_host(gpu_grads, n);
    const std::vector<float> cpu(cpu_->grads(), cpu_->grads() + n);
    for (const ParamTensor& t : cpu_->layout().tensors()) {
      const std::vector<float> c(cpu.begin() + static_cast<ptrdiff_t>(t.offset),
                                 cpu.begin() + static_cast<ptrdiff_t>(t.offset + t.size));
      const std::vector<float> g(gpu.begin() + static_cast<ptrdiff_t>(t.offset),
                                 gpu.begin() + static_cast<ptrdiff_t>(t.offset + t.size));
      EXPECT_LT(relative_error(c, g), 1e-5) << t.name;
    }
  }

  ModelConfig config_ = GetParam();
  std::unique_ptr<Model> cpu_, gpu_;
  int B_ = 0, T_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

TEST_P(CudaModelTest, LossLogitsAndGradientsMatchTheCpuModel) {
  make_models();
  make_batch(3, 37);
  for (int step = 0; step < 2; ++step) {  // the second accumulates onto the first
    absl::StatusOr<float> cpu_loss = cpu_->forward(inputs_.data(), targets_.data(), B_, T_);
    absl::StatusOr<float> gpu_loss = gpu_->forward(inputs_.data(), targets_.data(), B_, T_);
    ASSERT_TRUE(cpu_loss.ok() && gpu_loss.ok()) << gpu_loss.status();
    EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-5 * std::abs(*cpu_loss));
    ASSERT_TRUE(cpu_->backward(0.5f).ok());
    ASSERT_TRUE(gpu_->backward(0.5f).ok());
  }
  const size_t logits = static_cast<size_t>(B_) * T_ * config_.padded_vocab();
  EXPECT_LT(relative_error(std::vector<float>(cpu_->logits(), cpu_->logits() + logits),
                           to_host(gpu_->logits(), logits)),
            1e-5);
  expect_same_gradients(gpu_->grads());

  // The same step again gives the same bits on the device.
  std::vector<float> first = to_host(gpu_->grads(), gpu_->num_params());
  gpu_->zero_grad();
  ASSERT_TRUE(gpu_->forward(inputs_.data(), targets_.data(), B_, T_).ok());
  ASSERT_TRUE(gpu_->backward(0.5f).ok());
  ASSERT_TRUE(gpu_->forward(inputs_.data(), targets_.data(), B_, T_).ok());
  ASSERT_TRUE(gpu_->backward(0.5f).ok());
  EXPECT_EQ(to_host(gpu_->grads(), gpu_->num_params()), first);
}

// A pipeline's two stages in one process: blocks [0, 2) and [2, 3) with the head, each on
// buffers it binds, two micro-batches in flight, the activation handed over through the host.
TEST_P(CudaModelTest, PiecesWithSlotsAndBoundBuffersMatchTheWholeModel) {
  make_models({.parameters = false, .gradients = false, .device = kGpu});
  make_batch(2, 64);
  const size_t n = cpu_->num_params();
  absl::StatusOr<void*> params = allocate(kGpu, MemoryCategory::kParameters, n * sizeof(float));
  absl::StatusOr<void*> grads = allocate(kGpu, MemoryCategory::kGradients, n * sizeof(float));
  ASSERT_TRUE(params.ok() && grads.ok());
  auto* p = static_cast<float*>(*params);
  auto* g = static_cast<float*>(*grads);
  ASSERT_TRUE(copy_bytes(p, kGpu, cpu_->params(), Device::cpu(), n * sizeof(float)).ok());
  ASSERT_TRUE(zero_bytes(g, kGpu, n * sizeof(float)).ok());
  ASSERT_TRUE(gpu_->bind_parameters(0, n, p).ok());
  ASSERT_TRUE(gpu_->bind_gradients(0, n, g).ok());
  ASSERT_TRUE(gpu_->set_activation_slots(2).ok());
  cpu_->zero_grad();

  std::vector<float> losses;
  for (int j = 0; j < 2; ++j) {
    gpu_->use_slot(j);
    ASSERT_TRUE(gpu_->prepare(B_, T_).ok());
    ASSERT_TRUE(gpu_->embed_forward(inputs_.data()).ok());
    ASSERT_TRUE(gpu_->forward_blocks(0, 2).ok());
    ASSERT_TRUE(gpu_->forward_blocks(2, 3).ok());
    absl::StatusOr<float> loss = gpu_->head_forward(targets_.data());
    ASSERT_TRUE(loss.ok()) << loss.status();
    losses.push_back(*loss);
  }
  std::vector<size_t> finals;
  for (int j = 1; j >= 0; --j) {
    gpu_->use_slot(j);
    ASSERT_TRUE(gpu_->head_backward(0.5f).ok());
    ASSERT_TRUE(gpu_->backward_blocks(0, 3, [&](size_t from) { finals.push_back(from); }).ok());
    ASSERT_TRUE(gpu_->embed_backward().ok());
  }
  absl::StatusOr<float> cpu_loss = cpu_->forward(inputs_.data(), targets_.data(), B_, T_);
  ASSERT_TRUE(cpu_loss.ok());
  ASSERT_TRUE(cpu_->backward(1.0f).ok());  // the two half-weighted micro-batches
  EXPECT_NEAR(losses[0], *cpu_loss, 1e-5 * std::abs(*cpu_loss));
  EXPECT_EQ(losses[0], losses[1]);
  expect_same_gradients(g);
  ASSERT_EQ(finals.size(), 2u * 3 * 6);
  EXPECT_TRUE(std::is_sorted(finals.begin(), finals.begin() + 18, std::greater<size_t>()));
  deallocate(kGpu, MemoryCategory::kParameters, p, n * sizeof(float));
  deallocate(kGpu, MemoryCategory::kGradients, g, n * sizeof(float));
}

// Products on bf16 operands (ModelOptions::matmul, as a bf16 run's stage asks) against the CPU's
// fp32: a bf16 operand keeps 8 bits of mantissa, so the loss within 1% and each gradient within
// 5% of its tensor's largest value (the stated tolerance of mixed precision here).
TEST_P(CudaModelTest, Bf16ProductsStayWithinTheirTolerance) {
  absl::StatusOr<std::unique_ptr<Model>> cpu = create_model(config_);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  (*cpu)->init_parameters(42);
  absl::StatusOr<std::unique_ptr<Model>> gpu =
      create_model(config_, {.matmul = DType::kBFloat16}, {.device = kGpu});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const size_t n = (*cpu)->num_params();
  ASSERT_TRUE(copy_bytes((*gpu)->params(), kGpu, (*cpu)->params(), Device::cpu(),
                         static_cast<int64_t>(n * sizeof(float)))
                  .ok());
  make_batch(2, 48);
  absl::StatusOr<float> cpu_loss = (*cpu)->forward(inputs_.data(), targets_.data(), B_, T_);
  absl::StatusOr<float> gpu_loss = (*gpu)->forward(inputs_.data(), targets_.data(), B_, T_);
  ASSERT_TRUE(cpu_loss.ok() && gpu_loss.ok()) << gpu_loss.status();
  EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-2 * std::abs(*cpu_loss));
  ASSERT_TRUE((*cpu)->backward().ok());
  ASSERT_TRUE((*gpu)->backward().ok());
  const std::vector<float> g = to_host((*gpu)->grads(), n);
  for (const ParamTensor& t : (*cpu)->layout().tensors()) {
    const auto from = static_cast<ptrdiff_t>(t.offset),
               to = static_cast<ptrdiff_t>(t.offset + t.size);
    EXPECT_LT(relative_error(std::vector<float>((*cpu)->grads() + from, (*cpu)->grads() + to),
                             std::vector<float>(g.begin() + from, g.begin() + to)),
              5e-2)
        << t.name;
  }
}

// Recomputed activations (ModelOptions::recompute_activations): the same kernels on the same
// inputs in backward, so the same loss and gradients, bit for bit, as keeping every block's.
TEST_P(CudaModelTest, RecomputedActivationsGiveTheSameBits) {
  absl::StatusOr<std::unique_ptr<Model>> kept = create_model(config_, {}, {.device = kGpu});
  absl::StatusOr<std::unique_ptr<Model>> recomputed =
      create_model(config_, {.recompute_activations = true}, {.device = kGpu});
  ASSERT_TRUE(kept.ok() && recomputed.ok()) << recomputed.status();
  (*kept)->init_parameters(42);
  (*recomputed)->init_parameters(42);
  make_batch(2, 40);
  absl::StatusOr<float> a = (*kept)->forward(inputs_.data(), targets_.data(), B_, T_);
  absl::StatusOr<float> b = (*recomputed)->forward(inputs_.data(), targets_.data(), B_, T_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  ASSERT_TRUE((*kept)->backward().ok());
  ASSERT_TRUE((*recomputed)->backward().ok());
  const size_t n = (*kept)->num_params();
  EXPECT_EQ(to_host((*kept)->grads(), n), to_host((*recomputed)->grads(), n));
  EXPECT_LT((*recomputed)->memory().activations, (*kept)->memory().activations);
}

// Tensor parallelism: two ranks of the CUDA model (threads sharing the device, their group's
// all-reduces staged through the host as a collective group stages them) against the same two
// ranks of the CPU model. The loss, each rank's logits (its columns of the vocabulary) and each
// rank's gradients (its slice of every tensor) within the fp32 tolerance above.
TEST_P(CudaModelTest, TensorParallelRanksMatchTheCpuRanks) {
  constexpr int kTp = 2;
  make_batch(2, 24);
  struct Result {
    float loss = NAN;
    std::vector<float> logits, grads;
  };
  auto run = [&](Device device) {
    std::vector<Result> results(kTp);
    SimulatedGroup group(kTp);
    group.run([&](int rank) {
      absl::StatusOr<std::unique_ptr<Model>> m =
          create_model(config_, {.recompute_activations = rank == 1}, {.device = device},
                       {.rank = rank, .size = kTp});
      if (!m.ok()) {
        ADD_FAILURE() << m.status();
        group.leave();  // the other rank's collectives fail rather than wait for this one
        return;
      }
      (*m)->init_parameters(42);
      if (device.is_cpu()) {
        (*m)->set_tensor_parallel(group.sum(rank), group.max(rank));
      } else {
        (*m)->set_tensor_parallel(on_host(group.sum(rank)), on_host(group.max(rank)));
      }
      absl::StatusOr<float> loss = (*m)->forward(inputs_.data(), targets_.data(), B_, T_);
      absl::Status backward = loss.ok() ? (*m)->backward(0.5f) : loss.status();
      if (!backward.ok()) {
        ADD_FAILURE() << "rank " << rank << ": " << backward;
        group.leave();
        return;
      }
      const size_t logits =
          static_cast<size_t>(B_) * T_ * static_cast<size_t>(config_.padded_vocab() / kTp);
      Result& r = results[static_cast<size_t>(rank)];
      r.loss = *loss;
      r.logits = read(device, (*m)->logits(), logits);
      r.grads = read(device, (*m)->grads(), (*m)->num_params());
    });
    return results;
  };
  const std::vector<Result> cpu = run(Device::cpu());
  const std::vector<Result> gpu = run(kGpu);
  const ModelLayout layout = model_layout(config_, {.rank = 0, .size = kTp});
  for (int rank = 0; rank < kTp; ++rank) {
    const Result& c = cpu[static_cast<size_t>(rank)];
    const Result& g = gpu[static_cast<size_t>(rank)];
    ASSERT_FALSE(std::isnan(c.loss) || std::isnan(g.loss)) << "rank " << rank << " did not finish";
    EXPECT_NEAR(g.loss, c.loss, 1e-5 * std::abs(c.loss)) << "rank " << rank;
    ASSERT_EQ(c.logits.size(), g.logits.size());
    EXPECT_LT(relative_error(c.logits, g.logits), 1e-5) << "rank " << rank;
    ASSERT_EQ(c.grads.size(), g.grads.size());
    for (const ParamTensor& t : layout.tensors()) {
      const auto from = static_cast<ptrdiff_t>(t.offset),
                 to = static_cast<ptrdiff_t>(t.offset + t.size);
      EXPECT_LT(relative_error(std::vector<float>(c.grads.begin() + from, c.grads.begin() + to),
                               std::vector<float>(g.grads.begin() + from, g.grads.begin() + to)),
                1e-5)
          << "rank " << rank << " " << t.name;
    }
  }
}

TEST_P(CudaModelTest, ATensorParallelRankWithoutAGroupSaysSo) {
  absl::StatusOr<std::unique_ptr<Model>> tp =
      create_model(config_, {}, {.device = kGpu}, {.rank = 0, .size = 2});
  ASSERT_TRUE(tp.ok()) << tp.status();
  make_batch(1, 8);
  absl::StatusOr<float> loss = (*tp)->forward(inputs_.data(), targets_.data(), B_, T_);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loss.status().message().find("set_tensor_parallel"), std::string_view::npos);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaModelTest,
                         ::testing::Values(ModelConfig(small_gpt()), ModelConfig(small_llama())),
                         [](const ::testing::TestParamInfo<ModelConfig>& p) {
                           return std::string(p.param.gpt2() != nullptr ? "Gpt2" : "Llama");
                         });

// On every machine: a CUDA model where there is no GPU is a refusal that says so.
TEST(CudaModelRefusalTest, NoDeviceNoModel) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  absl::StatusOr<std::unique_ptr<Model>> gpu = create_model(small_gpt(), {}, {.device = kGpu});
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition) << gpu.status();
  EXPECT_NE(gpu.status().message().find("cuda:0"), std::string_view::npos) << gpu.status();
}

}  // namespace
}  // namespace troupe::nn
