// nn::Tensor: factories and their errors, views (view, slice, select,
// transpose, permute) against index arithmetic, contiguous copies, dtype
// conversion and copy_from across strides, typed access, and the memory
// accounting of MemoryTracker (per category, live and peak, views counted once).
#include "nn/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "nn/device.h"
#include "nn/memory.h"

namespace troupe::nn {
namespace {

// Death tests re-run the binary rather than fork it: OpenMP's threads may be running.
const bool kThreadsafeDeathTests = [] {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return true;
}();

// 0, 1, 2, ... as a float32 tensor of `shape`.
Tensor iota(const Shape& shape, MemoryCategory category = MemoryCategory::kOther) {
  std::vector<float> values(static_cast<size_t>(shape.numel()));
  std::iota(values.begin(), values.end(), 0.0f);
  return Tensor::from_data(values, shape, category).value();
}

TEST(ShapeTest, RankNumelAndText) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.to_string(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1) << "a scalar";
  EXPECT_EQ((Shape{2, 0, 5}).numel(), 0);
  EXPECT_TRUE((Shape{2, 3}) == (Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3}) == (Shape{2, 3, 1}));
  EXPECT_DEATH((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), "9 dimensions; at most 8");
}

TEST(TensorTest, EmptyHasRowMajorStridesAndAlignedStorage) {
  const Tensor t = Tensor::empty({2, 3, 5}, DType::kBFloat16, MemoryCategory::kActivations).value();
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.nbytes(), 60);
  EXPECT_EQ(t.element_size(), 2u);
  EXPECT_EQ(std::vector<int64_t>(t.strides().begin(), t.strides().end()),
            (std::vector<int64_t>{15, 5, 1}));
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.stride(0), 15);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.device(), Device::kCpu);
  EXPECT_EQ(t.category(), MemoryCategory::kActivations);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(t.describe(), "bfloat16[2, 3, 5] cpu activations");
  const Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_EQ(undefined.numel(), 0);
  EXPECT_EQ(undefined.describe(), "undefined tensor");
}

TEST(TensorTest, ZerosScalarsAndEmptyTensors) {
  const Tensor z = Tensor::zeros({3, 4}, DType::kFloat32, MemoryCategory::kOther).value();
  EXPECT_EQ(z.to_vector(), std::vector<float>(12, 0.0f));
  const Tensor scalar =
      Tensor::from_data(std::vector<float>{7.5f}, {}, MemoryCategory::kOther).value();
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(*scalar.data<float>(), 7.5f);
  const Tensor none = Tensor::empty({4, 0}, DType::kFloat32, MemoryCategory::kOther).value();
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.data<float>(), nullptr);
  EXPECT_TRUE(none.to_vector().empty());
}

TEST(TensorTest, FactoriesReportErrors) {
  absl::StatusOr<Tensor> negative = Tensor::empty({2, -1}, DType::kFloat32, MemoryCategory::kOther);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("float32[2, -1]"), std::string::npos)
      << negative.status();
  absl::StatusOr<Tensor> huge =
      Tensor::empty({int64_t{1} << 40, int64_t{1} << 30}, DType::kFloat32, MemoryCategory::kOther);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument) << huge.status();
  absl::StatusOr<Tensor> wrong_count =
      Tensor::from_data(std::vector<float>(5), {2, 3}, MemoryCategory::kOther);
  EXPECT_EQ(wrong_count.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_count.status().message().find("5 values for a tensor of shape [2, 3]"),
            std::string::npos)
      << wrong_count.status();
  if (cuda_device_count() == 0) {
    absl::StatusOr<Tensor> gpu =
        Tensor::empty({4}, DType::kFloat32, MemoryCategory::kOther, Device::kCuda);
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition) << gpu.status();
  }
}

TEST(TensorTest, FromDataRoundsToTheDType) {
  const std::vector<float> values{1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 65520.0f};
  const Tensor bf16 =
      Tensor::from_data(values, {4}, MemoryCategory::kOther, DType::kBFloat16).value();
  EXPECT_EQ(bf16.data<uint16_t>()[1], 0x3f80) << "ties to even";
  EXPECT_EQ(bf16.to_vector(), (std::vector<float>{1.0f, 1.0f, 1.0f + 4 * 0x1p-8f, 65536.0f}));
  const Tensor half =
      Tensor::from_data(values, {4}, MemoryCategory::kOther, DType::kFloat16).value();
  EXPECT_EQ(half.data<uint16_t>()[3], 0x7c00) << "65520 overflows fp16 to inf";
}

TEST(TensorTest, ViewReshapesContiguousTensors) {
  const Tensor t = iota({2, 3, 4});
  const Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_TRUE(v.shares_storage_with(t));
  EXPECT_EQ(v.to_vector(), t.to_vector());
  EXPECT_EQ(t.reshape({24}).shape(), Shape{24});
  EXPECT_EQ(t.view({-1}).shape(), Shape{24});
  EXPECT_DEATH(t.view({5, 5}), "view\\[5, 5\\] of float32\\[2, 3, 4\\]");
  EXPECT_DEATH(t.transpose(0, 1).view({24}), "not contiguous");
}

// Element [i, j, k] of a view is storage[offset + i*s0 + j*s1 + k*s2];
// to_vector() walks the view in row-major index order.
TEST(TensorTest, SliceNarrowSelectFollowTheIndexArithmetic) {
  const Tensor t = iota({4, 5, 6});  // value == 30 i + 6 j + k
  const Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{4, 3, 6}));
  EXPECT_EQ(s.storage_offset(), 6);
  EXPECT_FALSE(s.is_contiguous());
  std::vector<float> expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 1; j < 4; ++j)
      for (int k = 0; k < 6; ++k)
        expected.push_back(30 * i + 6 * j + k);
  EXPECT_EQ(s.to_vector(), expected);
  EXPECT_EQ(t.narrow(1, 1, 3).to_vector(), expected);

  const Tensor stepped = t.slice(2, 1, 3, 2);  // k = 1, 3, 5
  expected.clear();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 1; k < 6; k += 2)
        expected.push_back(30 * i + 6 * j + k);
  EXPECT_EQ(stepped.to_vector(), expected);
  EXPECT_EQ(stepped.stride(2), 2);

  const Tensor row = t.select(0, 2);  // [5, 6], values 60 .. 89: contiguous
  EXPECT_EQ(row.shape(), (Shape{5, 6}));
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_EQ(row.to_vector().front(), 60.0f);
  EXPECT_EQ(t.select(-1, 5).to_vector()[1], 11.0f);  // [4, 5]: element [0, 1] is 6 + 5
  EXPECT_TRUE(t.slice(0, 1, 2).is_contiguous()) << "a slice of the outer dimension";
  EXPECT_EQ(t.slice(0, 4, 0).numel(), 0);
  EXPECT_DEATH(t.slice(1, 3, 3),
               "slice\\(dim 1, start 3, len 3, step 1\\) out of range for "
               "float32\\[4, 5, 6\\]");
  EXPECT_DEATH(t.select(3, 0), "dimension 3 out of range");
}

TEST(TensorTest, TransposeAndPermuteSwapStrides) {
  const Tensor t = iota({2, 3, 4});  // 12 i + 4 j + k
  const Tensor tr = t.transpose(0, 2);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(std::vector<int64_t>(tr.strides().begin(), tr.strides().end()),
            (std::vector<int64_t>{1, 4, 12}));
  EXPECT_FALSE(tr.is_contiguous());
  std::vector<float> expected;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i)
        expected.push_back(12 * i + 4 * j + k);
  EXPECT_EQ(tr.to_vector(), expected);

  const Tensor p = t.permute({1, 2, 0});  // [j, k, i]
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  expected.clear();
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i)
        expected.push_back(12 * i + 4 * j + k);
  EXPECT_EQ(p.to_vector(), expected);
  EXPECT_DEATH(t.permute({0, 0, 1}), "not a permutation");
  // Size-1 dimensions do not break contiguity, whatever their stride.
  EXPECT_TRUE(iota({3, 1}).transpose(0, 1).is_contiguous());
}

TEST(TensorTest, ContiguousCopiesOnlyWhenNeeded) {
  const Tensor t = iota({3, 4}, MemoryCategory::kActivations);
  EXPECT_TRUE(t.contiguous().value().shares_storage_with(t));
  const Tensor tr = t.transpose(0, 1);
  const Tensor c = tr.contiguous().value();
  EXPECT_FALSE(c.shares_storage_with(t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.category(), MemoryCategory::kActivations);
  EXPECT_EQ(c.to_vector(), tr.to_vector());
  EXPECT_EQ(c.data<float>()[1], 4.0f);  // [0, 1] of the transpose is [1, 0] of t
}

TEST(TensorTest, ToConvertsAndCopyFromHandlesStridesAndDTypes) {
  const Tensor t = iota({4, 6});
  EXPECT_TRUE(t.to(DType::kFloat32).value().shares_storage_with(t));
  const Tensor bf16 = t.transpose(0, 1).to(DType::kBFloat16, MemoryCategory::kParameters).value();
  EXPECT_EQ(bf16.dtype(), DType::kBFloat16);
  EXPECT_EQ(bf16.category(), MemoryCategory::kParameters);
  EXPECT_TRUE(bf16.is_contiguous());
  EXPECT_EQ(bf16.to_vector(), t.transpose(0, 1).to_vector()) << "small integers are exact";

  // A strided fp16 destination filled from a strided fp32 source.
  Tensor dst = Tensor::zeros({6, 8}, DType::kFloat16, MemoryCategory::kOther).value();
  Tensor window = dst.slice(1, 2, 4, 1);  // [6, 4] of the [6, 8]
  ASSERT_TRUE(window.copy_from(t.transpose(0, 1)).ok());
  const std::vector<float> all = dst.to_vector();
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 8; ++c) {
      const float expected = (c >= 2 && c < 6) ? static_cast<float>((c - 2) * 6 + r) : 0.0f;
      ASSERT_EQ(all[static_cast<size_t>(r * 8 + c)], expected) << r << "," << c;
    }
  }
  const absl::Status mismatch = dst.copy_from(t);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("float16[6, 8]"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.message().find("float32[4, 6]"), std::string::npos) << mismatch;
}

TEST(TensorTest, CopyFromLargeContiguousTensorsConverts) {
  constexpr int64_t kN = 300001;  // through the parallel conversion kernels
  std::vector<float> values(kN);
  for (int64_t i = 0; i < kN; ++i)
    values[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 0.25f;
  const Tensor src = Tensor::from_data(values, {kN}, MemoryCategory::kOther).value();
  Tensor half = Tensor::empty({kN}, DType::kFloat16, MemoryCategory::kOther).value();
  ASSERT_TRUE(half.copy_from(src).ok());
  Tensor back = Tensor::empty({kN}, DType::kFloat32, MemoryCategory::kOther).value();
  ASSERT_TRUE(back.copy_from(half).ok());
  EXPECT_EQ(back.to_vector(), values);  // multiples of 0.25 below 250 are exact in fp16
}

TEST(TensorTest, TypedAccessChecksTheDType) {
  Tensor bf16 = Tensor::zeros({2, 3}, DType::kBFloat16, MemoryCategory::kOther).value();
  EXPECT_NE(bf16.data<uint16_t>(), nullptr);
  EXPECT_DEATH(bf16.data<float>(), "data<float>\\(\\) on bfloat16\\[2, 3\\] cpu other");
  const Tensor f = iota({2});
  EXPECT_DEATH(f.data<uint16_t>(), "data<uint16_t>\\(\\) on float32\\[2\\]");
  EXPECT_DEATH(Tensor().data<float>(), "undefined tensor");
}

// Deltas of the global tracker: other tests in this binary run one at a time.
TEST(MemoryTest, TensorsAreCountedOnceUnderTheirCategory) {
  MemoryTracker& tracker = MemoryTracker::global();
  const int64_t params = tracker.live_bytes(MemoryCategory::kParameters);
  const int64_t grads = tracker.live_bytes(MemoryCategory::kGradients);
  const int64_t total = tracker.total_live_bytes();
  {
    Tensor w = Tensor::empty({1000}, DType::kFloat32, MemoryCategory::kParameters).value();
    EXPECT_EQ(tracker.live_bytes(MemoryCategory::kParameters) - params, 4032) << "4000 -> 64s";
    {
      const Tensor v1 = w.view({10, 100});
      const Tensor v2 = v1.transpose(0, 1).slice(0, 3, 5);
      const Tensor copy_of_handle = w;
      EXPECT_EQ(tracker.live_bytes(MemoryCategory::kParameters) - params, 4032)
          << "views are not counted again";
    }
    const Tensor g = Tensor::zeros({10, 100}, DType::kBFloat16, MemoryCategory::kGradients).value();
    EXPECT_EQ(tracker.live_bytes(MemoryCategory::kGradients) - grads, 2048);
    EXPECT_EQ(tracker.total_live_bytes() - total, 4032 + 2048);
    w = Tensor();  // the last view of the parameters goes
    EXPECT_EQ(tracker.live_bytes(MemoryCategory::kParameters), params);
  }
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kGradients), grads);
  EXPECT_EQ(tracker.total_live_bytes(), total);
}

TEST(MemoryTest, StorageLivesWhileAnyViewDoes) {
  MemoryTracker& tracker = MemoryTracker::global();
  const int64_t before = tracker.live_bytes(MemoryCategory::kActivations);
  Tensor view;
  {
    const Tensor t = iota({64}, MemoryCategory::kActivations);
    view = t.slice(0, 10, 4);
  }
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kActivations) - before, 256);
  EXPECT_EQ(view.to_vector(), (std::vector<float>{10, 11, 12, 13}));
  view = Tensor();
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kActivations), before);
}

TEST(MemoryTest, PeaksPerCategoryAndInTotal) {
  MemoryTracker tracker;
  tracker.on_allocate(Device::kCpu, MemoryCategory::kActivations, 1000);
  tracker.on_allocate(Device::kCpu, MemoryCategory::kParameters, 500);
  tracker.on_free(Device::kCpu, MemoryCategory::kActivations, 1000);
  tracker.on_allocate(Device::kCpu, MemoryCategory::kOptimizerState, 800);
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kActivations), 0);
  EXPECT_EQ(tracker.peak_bytes(MemoryCategory::kActivations), 1000);
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kOptimizerState), 800);
  EXPECT_EQ(tracker.total_live_bytes(), 1300);
  EXPECT_EQ(tracker.total_peak_bytes(), 1500) << "the peak of the total, not the sum of peaks";
  EXPECT_EQ(tracker.total_peak_bytes(Device::kCuda), 0);
  const std::string summary = tracker.summary();
  EXPECT_NE(summary.find("cpu: live 1.27 KiB (peak 1.46 KiB)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("activations 0 B (peak 1000 B)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("optimizer_state 800 B"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("cuda"), std::string::npos) << "no line for an unused device";

  tracker.reset_peak();
  EXPECT_EQ(tracker.peak_bytes(MemoryCategory::kActivations), 0);
  EXPECT_EQ(tracker.total_peak_bytes(), 1300);
  tracker.on_allocate(Device::kCuda, MemoryCategory::kGradients, 1 << 20);
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kGradients, Device::kCuda), 1 << 20);
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kGradients), 0) << "devices are apart";
  EXPECT_NE(tracker.summary().find("cuda: live 1.00 MiB"), std::string::npos) << tracker.summary();
}

TEST(MemoryTest, CountersAreExactUnderConcurrentUse) {
  MemoryTracker tracker;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tracker, t] {
      const auto category = static_cast<MemoryCategory>(t % kNumMemoryCategories);
      for (int i = 0; i < 20000; ++i) {
        tracker.on_allocate(Device::kCpu, category, 64);
        tracker.on_free(Device::kCpu, category, 64);
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  EXPECT_EQ(tracker.total_live_bytes(), 0);
  EXPECT_GE(tracker.total_peak_bytes(), 64);
  EXPECT_LE(tracker.total_peak_bytes(), 4 * 64);
  for (int c = 0; c < kNumMemoryCategories; ++c)
    EXPECT_EQ(tracker.live_bytes(static_cast<MemoryCategory>(c)), 0);
}

// Runs only where there is a GPU: a round trip through device memory, counted
// under the CUDA device.
TEST(TensorCudaTest, RoundTripThroughDeviceMemory) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << describe_devices();
  MemoryTracker& tracker = MemoryTracker::global();
  const int64_t before = tracker.live_bytes(MemoryCategory::kParameters, Device::kCuda);
  const Tensor host = iota({3, 5}, MemoryCategory::kParameters);
  const Tensor gpu = host.to(Device::kCuda).value();
  EXPECT_EQ(gpu.device(), Device::kCuda);
  EXPECT_EQ(tracker.live_bytes(MemoryCategory::kParameters, Device::kCuda) - before, 64);
  EXPECT_EQ(gpu.to_vector(), host.to_vector());
  Tensor zeros =
      Tensor::zeros({3, 5}, DType::kFloat32, MemoryCategory::kOther, Device::kCuda).value();
  EXPECT_EQ(zeros.to_vector(), std::vector<float>(15, 0.0f));
  ASSERT_TRUE(zeros.copy_from(gpu).ok());
  EXPECT_EQ(zeros.to(Device::kCpu).value().to_vector(), host.to_vector());
}

}  // namespace
}  // namespace troupe::nn
