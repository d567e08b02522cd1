// The Llama model (nn/llama/llama.h) against Hugging Face's LlamaForCausalLM: logits, loss, every
// parameter gradient and ten AdamW steps, loaded from tests/reference/llama_fixture.bin (written by
// llama_reference.py, whose docstring gives the format), for grouped-query attention with its own
// and with a tied head, and for one KV head per query head. Also: two tensor-parallel ranks
// compute what one does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nn/llama/llama.h"
#include "nn/optim/adamw.h"
#include "tests/nn/simulated_group.h"

namespace troupe::nn {
namespace {

constexpr int32_t kFixtureMagic = 20260301;
constexpr int32_t kFixtureVersion = 1;

struct Case {
  LlamaConfig config;
  int B = 0, T = 0, num_steps = 0;
  AdamWConfig adamw;
  std::vector<int32_t> inputs, targets;
  std::vector<float> params, logits, grads, losses;
  float loss = 0;
};

absl::StatusOr<std::vector<Case>> load_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string regenerate = "; regenerate with python3 tests/reference/llama_reference.py";
  if (!in.good() && !in.eof()) {
    return absl::NotFoundError(absl::StrCat("llama fixture ", path, ": cannot read", regenerate));
  }
  size_t pos = 0;
  bool truncated = false;
  auto read = [&](auto* out, size_t n) {
    const size_t size = n * sizeof(*out);
    if (pos + size > bytes.size()) {
      truncated = true;
      return;
    }
    std::memcpy(out, bytes.data() + pos, size);
    pos += size;
  };
  auto read_vector = [&](auto& v, size_t n) {
    v.resize(n);
    read(v.data(), n);
  };
  int32_t file_header[4] = {};
  read(file_header, 4);
  if (truncated || file_header[0] != kFixtureMagic || file_header[1] != kFixtureVersion) {
    return absl::DataLossError(absl::StrCat("llama fixture ", path, ": bad header (magic ",
                                            file_header[0], ", version ", file_header[1], ")",
                                            regenerate));
  }
  std::vector<Case> cases(static_cast<size_t>(std::max(file_header[2], 0)));
  for (Case& c : cases) {
    int32_t h[16] = {};
    float hp[8] = {};
    read(h, 16);
    read(hp, 8);
    c.config = {.vocab_size = h[0],
                .hidden_size = h[6],
                .intermediate_size = h[7],
                .num_hidden_layers = h[3],
                .num_attention_heads = h[4],
                .num_key_value_heads = h[5],
                .max_position_embeddings = h[2],
                .rms_norm_eps = hp[5],
                .rope_theta = hp[6],
                .tie_word_embeddings = h[8] != 0,
                .padded_vocab_size = h[1]};
    c.B = h[9];
    c.T = h[10];
    c.num_steps = h[11];
    const size_t P = static_cast<size_t>(h[12]), BT = static_cast<size_t>(c.B) * c.T;
    c.adamw = {.lr = hp[0], .beta1 = hp[1], .beta2 = hp[2], .eps = hp[3], .weight_decay = hp[4]};
    read_vector(c.inputs, BT);
    read_vector(c.targets, BT);
    read_vector(c.params, P);
    read_vector(c.logits, BT * static_cast<size_t>(c.config.padded_vocab()));
    read(&c.loss, 1);
    read_vector(c.grads, P);
    read_vector(c.losses, static_cast<size_t>(c.num_steps));
  }
  if (truncated || pos != bytes.size()) {
    return absl::DataLossError(absl::StrCat("llama fixture ", path, ": ", bytes.size(),
                                            " bytes do not match its headers", regenerate));
  }
  return cases;
}

const std::vector<Case>& fixture() {
  static const std::vector<Case>* cases = [] {
    absl::StatusOr<std::vector<Case>> loaded = load_fixture(LLAMA_FIXTURE);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    return new std::vector<Case>(*std::move(loaded));
  }();
  return *cases;
}

Llama model_from(const Case& c) {
  absl::StatusOr<Llama> llama = Llama::create(c.config);
  if (!llama.ok()) {
    ADD_FAILURE() << llama.status();
    std::abort();
  }
  EXPECT_EQ(llama->num_params(), c.params.size());
  std::copy(c.params.begin(), c.params.end(), llama->params());
  return *std::move(llama);
}

// Every element must satisfy |got - want| <= rtol * |want| + atol * max|want| (atol scales with
// the tensor, so values near zero are held to the tensor's rounding level). Prints the errors.
void expect_close(const std::string& name, std::span<const float> got, std::span<const float> want,
                  float rtol, float atol) {
  ASSERT_EQ(got.size(), want.size()) << name;
  float scale = 0, max_abs = 0;
  for (float w : want)
    scale = std::max(scale, std::fabs(w));
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float err = std::fabs(got[i] - want[i]);
    max_abs = std::max(max_abs, err);
    if (!(err <= rtol * std::fabs(want[i]) + atol * scale)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  std::printf("  %-48s n %5zu  max|ref| %.3e  max abs err %.3e  rel %.3e\n", name.c_str(),
              want.size(), scale, max_abs, scale > 0 ? max_abs / scale : 0.0f);
  EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << want.size()
                     << " elements out of tolerance; first [" << first_bad << "]: got "
                     << got[first_bad] << ", want " << want[first_bad];
}

// Tolerances. Hugging Face runs deterministically in fp32 (one thread); the two implementations
// sum in different orders, so they agree to fp32 rounding.
constexpr float kRtol = 1e-5f;
constexpr float kAtol = 1e-5f;
constexpr float kLossRtol = 1e-6f;

std::string case_name(const Case& c) {
  return absl::StrCat("heads", c.config.num_attention_heads, "_kv", c.config.kv_heads(),
                      c.config.tie_word_embeddings ? "_tied" : "_untied");
}

class LlamaParityTest : public testing::TestWithParam<int> {
 protected:
  const Case& test_case() const { return fixture()[static_cast<size_t>(GetParam())]; }
};

TEST_P(LlamaParityTest, LogitsLossAndGradientsMatchHuggingFace) {
  const Case& c = test_case();
  Llama llama = model_from(c);
  absl::StatusOr<float> loss = llama.forward(c.inputs.data(), c.targets.data(), c.B, c.T);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(llama.backward().ok());
  std::printf("%s forward:\n", case_name(c).c_str());
  expect_close("logits", {llama.logits(), c.logits.size()}, c.logits, kRtol, kAtol);
  expect_close("loss", {&*loss, 1}, {&c.loss, 1}, kLossRtol, 0);
  std::printf("gradients:\n");
  for (const ParamTensor& t : llama.layout().tensors()) {
    expect_close(t.name, {llama.grads() + t.offset, t.size},
                 std::span(c.grads).subspan(t.offset, t.size), kRtol, kAtol);
  }
  // The padding rows of the embedding (and of an untied head) get no gradient at all.
  const size_t C = c.config.hidden_size, V = c.config.vocab_size, Vp = c.config.padded_vocab();
  std::vector<size_t> tables = {0};
  if (!c.config.tie_word_embeddings) tables.push_back(llama.llama_layout().lm_head());
  for (size_t table : tables) {
    for (size_t i = V * C; i < Vp * C; ++i)
      ASSERT_EQ(llama.grads()[table + i], 0.0f) << "padding row gradient at " << table + i;
  }
}

TEST_P(LlamaParityTest, TenAdamWStepsMatchHuggingFace) {
  const Case& c = test_case();
  Llama llama = model_from(c);
  const size_t n = llama.num_params();
  std::vector<float> m(n, 0.0f), v(n, 0.0f), losses;
  const std::vector<ParamRange> no_decay = llama.layout().no_decay_ranges();
  for (int step = 1; step <= c.num_steps; ++step) {
    llama.zero_grad();
    absl::StatusOr<float> loss = llama.forward(c.inputs.data(), c.targets.data(), c.B, c.T);
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE(llama.backward().ok());
    losses.push_back(*loss);
    adamw_update(llama.params(), llama.grads(), m.data(), v.data(), n, c.adamw, c.adamw.lr, step,
                 no_decay);
  }
  std::printf("%s:\n", case_name(c).c_str());
  expect_close("losses of 10 AdamW steps", losses, c.losses, kLossRtol, 0);
  EXPECT_LT(losses.back(), losses.front());
}

// Two ranks, each with its slice of the fixture's parameters, compute the whole model's loss,
// logits (their columns) and gradients (their slices) to fp32 rounding.
TEST_P(LlamaParityTest, TwoTensorParallelRanksComputeWhatOneDoes) {
  const Case& c = test_case();
  constexpr int kTp = 2;
  Llama whole = model_from(c);
  absl::StatusOr<float> whole_loss = whole.forward(c.inputs.data(), c.targets.data(), c.B, c.T);
  ASSERT_TRUE(whole_loss.ok() && whole.backward().ok());
  const ModelLayout& whole_layout = whole.layout();
  const size_t BT = static_cast<size_t>(c.B) * c.T, Vp = c.config.padded_vocab();
  const size_t Vl = Vp / kTp;
  std::vector<float> losses(kTp), logits(BT * Vp);
  std::vector<std::vector<float>> grads(kTp);
  std::vector<ModelLayout> layouts(kTp);
  SimulatedGroup group(kTp);
  group.run([&](int rank) {
    const TensorSlice slice{.rank = rank, .size = kTp};
    absl::StatusOr<Llama> llama = Llama::create(c.config, {}, {}, slice);
    if (!llama.ok()) {
      ADD_FAILURE() << llama.status();
      return;
    }
    const auto r = static_cast<size_t>(rank);
    layouts[r] = llama->layout();
    copy_to_slice(whole_layout, llama->layout(), c.params.data(), llama->params());
    llama->set_tensor_parallel(group.sum(rank), group.max(rank));
    absl::StatusOr<float> loss = llama->forward(c.inputs.data(), c.targets.data(), c.B, c.T);
    EXPECT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(llama->backward().ok());
    losses[r] = loss.value_or(NAN);
    grads[r].assign(llama->grads(), llama->grads() + llama->num_params());
    for (size_t i = 0; i < BT; ++i) {
      std::copy(llama->logits() + i * Vl, llama->logits() + (i + 1) * Vl,
                logits.begin() + static_cast<std::ptrdiff_t>(i * Vp + r * Vl));
    }
  });
  std::printf("%s, tensor-parallel %d against 1:\n", case_name(c).c_str(), kTp);
  expect_close("logits", logits, {whole.logits(), BT * Vp}, kRtol, kAtol);
  for (int r = 0; r < kTp; ++r) {
    const auto i = static_cast<size_t>(r);
    expect_close(absl::StrCat("rank ", r, " loss"), {&losses[i], 1}, {&*whole_loss, 1}, kLossRtol,
                 0);
    std::vector<float> want(layouts[i].num_params());
    copy_to_slice(whole_layout, layouts[i], whole.grads(), want.data());
    for (const ParamTensor& t : layouts[i].tensors()) {
      expect_close(absl::StrCat("rank ", r, " ", t.name),
                   std::span(grads[i]).subspan(t.offset, t.size),
                   std::span(want).subspan(t.offset, t.size), kRtol, kAtol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixture, LlamaParityTest, testing::Range(0, 3),
                         [](const testing::TestParamInfo<int>& param) {
                           return case_name(fixture()[static_cast<size_t>(param.param)]);
                         });

TEST(LlamaFixtureTest, HoldsTheThreeCases) {
  ASSERT_EQ(fixture().size(), 3u);
  EXPECT_LT(fixture()[0].config.kv_heads(), fixture()[0].config.num_attention_heads);
  EXPECT_TRUE(fixture()[1].config.tie_word_embeddings);
  EXPECT_EQ(fixture()[2].config.kv_heads(), fixture()[2].config.num_attention_heads);
}

}  // namespace
}  // namespace troupe::nn
