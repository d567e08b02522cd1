// The GPT model (nn/gpt.h) against PyTorch: logits, loss, every parameter gradient and ten AdamW
// steps, loaded from tests/reference/gpt_fixture.bin (written by gpt_reference.py, whose
// docstring gives the format). Also: recomputed activations give the stored ones' gradients
// bit for bit, runs repeat bit for bit, and pipeline stages give the whole model's result.
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
#include "nn/gpt2/gpt.h"
#include "nn/optim/adamw.h"

namespace troupe::nn {
namespace {

constexpr int32_t kFixtureMagic = 20251129;
constexpr int32_t kFixtureVersion = 1;

struct Fixture {
  GPTConfig config;
  int B = 0, T = 0, num_steps = 0;
  bool decay_2d_only = false;  // else every parameter decays
  AdamWConfig adamw;
  std::vector<int32_t> inputs, targets;
  std::vector<float> params, logits, grads, losses, final_params;
  float loss = 0;
};

absl::StatusOr<Fixture> load_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string regenerate = "; regenerate with python3 tests/reference/gpt_reference.py";
  if (!in.good() && !in.eof()) {
    return absl::NotFoundError(absl::StrCat("gpt fixture ", path, ": cannot read", regenerate));
  }
  size_t pos = 0;
  bool truncated = false;
  auto read = [&](auto* out, size_t n) {
    size_t size = n * sizeof(*out);
    if (pos + size > bytes.size()) {
      truncated = true;
      return;
    }
    std::memcpy(out, bytes.data() + pos, size);
    pos += size;
  };
  int32_t h[16] = {};
  float hp[8] = {};
  read(h, 16);
  read(hp, 8);
  if (truncated || h[0] != kFixtureMagic || h[1] != kFixtureVersion) {
    return absl::DataLossError(absl::StrCat("gpt fixture ", path, ": bad header (magic ", h[0],
                                            ", version ", h[1], ")", regenerate));
  }
  Fixture f;
  f.config = {.max_seq_len = h[4],
              .vocab_size = h[2],
              .padded_vocab_size = h[3],
              .num_layers = h[5],
              .num_heads = h[6],
              .channels = h[7]};
  f.B = h[8];
  f.T = h[9];
  f.num_steps = h[10];
  f.decay_2d_only = h[11] == 1;
  const size_t P = h[12], BT = static_cast<size_t>(f.B) * f.T;
  f.adamw = {.lr = hp[0], .beta1 = hp[1], .beta2 = hp[2], .eps = hp[3], .weight_decay = hp[4]};
  auto read_vector = [&](auto& v, size_t n) {
    v.resize(n);
    read(v.data(), n);
  };
  read_vector(f.inputs, BT);
  read_vector(f.targets, BT);
  read_vector(f.params, P);
  read_vector(f.logits, BT * f.config.padded_vocab());
  read(&f.loss, 1);
  read_vector(f.grads, P);
  read_vector(f.losses, f.num_steps);
  read_vector(f.final_params, P);
  if (truncated || pos != bytes.size()) {
    return absl::DataLossError(absl::StrCat("gpt fixture ", path, ": ", bytes.size(),
                                            " bytes do not match its header", regenerate));
  }
  return f;
}

const Fixture& fixture() {
  static const Fixture* f = [] {
    absl::StatusOr<Fixture> loaded = load_fixture(GPT_FIXTURE);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    return new Fixture(*std::move(loaded));
  }();
  return *f;
}

GPT model_from_fixture(const ModelOptions& options = {}) {
  const Fixture& f = fixture();
  absl::StatusOr<GPT> gpt = GPT::create(f.config, options);
  if (!gpt.ok()) {
    ADD_FAILURE() << gpt.status();
    std::abort();
  }
  EXPECT_EQ(gpt->num_params(), f.params.size());
  std::copy(f.params.begin(), f.params.end(), gpt->params());
  return *std::move(gpt);
}

// Every element must satisfy |got - want| <= rtol * |want| + atol * max|want| (atol scales with
// the tensor, so values near zero are held to the tensor's rounding level). Prints the errors:
// max abs, and max abs over max|want| ("rel").
void expect_close(const std::string& name, std::span<const float> got, std::span<const float> want,
                  float rtol, float atol) {
  ASSERT_EQ(got.size(), want.size()) << name;
  float scale = 0, max_abs = 0;
  for (float w : want)
    scale = std::max(scale, std::fabs(w));
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    float err = std::fabs(got[i] - want[i]);
    max_abs = std::max(max_abs, err);
    if (!(err <= rtol * std::fabs(want[i]) + atol * scale)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  std::printf("  %-12s n %6zu  max|ref| %.3e  max abs err %.3e  rel %.3e\n", name.c_str(),
              want.size(), scale, max_abs, scale > 0 ? max_abs / scale : 0.0f);
  EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << want.size()
                     << " elements out of tolerance; first [" << first_bad << "]: got "
                     << got[first_bad] << ", want " << want[first_bad];
}

void expect_bitwise_equal(const std::string& what, std::span<const float> a,
                          std::span<const float> b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << what << " differ in their bits";
}

std::span<const float> grads_of(const GPT& gpt) {
  return {gpt.grads(), gpt.num_params()};
}
std::span<const float> params_of(const GPT& gpt) {
  return {gpt.params(), gpt.num_params()};
}
std::span<const float> logits_of(const GPT& gpt) {
  const Fixture& f = fixture();
  return {gpt.logits(), static_cast<size_t>(f.B) * f.T * f.config.padded_vocab()};
}

// Tolerances. PyTorch runs deterministically in fp32 (one thread); the two implementations sum in
// different orders, so they agree to fp32 rounding: measured differences are ~1e-6 of each
// tensor's largest value (PyTorch fp32 itself is ~4e-7 from an fp64 run).
constexpr float kRtol = 1e-5f;
constexpr float kAtol = 1e-5f;

TEST(GPTParityTest, LogitsLossAndGradientsMatchPyTorch) {
  const Fixture& f = fixture();
  GPT gpt = model_from_fixture();
  absl::StatusOr<float> loss = gpt.forward(f.inputs.data(), f.targets.data(), f.B, f.T);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(gpt.backward().ok());
  std::printf("forward:\n");
  expect_close("logits", logits_of(gpt), f.logits, kRtol, kAtol);
  expect_close("loss", {&*loss, 1}, {&f.loss, 1}, kRtol, 0);
  std::printf("gradients:\n");
  for (const ParamTensor& t : gpt.param_layout().tensors()) {
    expect_close(t.name, grads_of(gpt).subspan(t.offset, t.size),
                 std::span(f.grads).subspan(t.offset, t.size), kRtol, kAtol);
  }
  // The padding rows of wte get no gradient at all.
  const size_t C = f.config.channels, V = f.config.vocab_size;
  for (size_t i = V * C; i < f.config.padded_vocab() * C; ++i)
    ASSERT_EQ(gpt.grads()[i], 0.0f);
}

// Runs num_steps steps of forward, backward and AdamW on the fixture's batch; returns the losses.
std::vector<float> train(GPT& gpt, int num_steps) {
  const Fixture& f = fixture();
  std::vector<float> m(gpt.num_params(), 0.0f), v(gpt.num_params(), 0.0f), losses;
  std::vector<ParamRange> no_decay;
  if (f.decay_2d_only) no_decay = gpt.layout().no_decay_ranges();
  for (int step = 1; step <= num_steps; ++step) {
    gpt.zero_grad();
    absl::StatusOr<float> loss = gpt.forward(f.inputs.data(), f.targets.data(), f.B, f.T);
    EXPECT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(gpt.backward().ok());
    losses.push_back(loss.value_or(NAN));
    adamw_update(gpt.params(), gpt.grads(), m.data(), v.data(), gpt.num_params(), f.adamw,
                 f.adamw.lr, step, no_decay);
  }
  return losses;
}

TEST(GPTParityTest, AdamWStepsMatchPyTorch) {
  const Fixture& f = fixture();
  ASSERT_TRUE(validate(f.adamw).ok());
  GPT gpt = model_from_fixture();
  std::vector<float> losses = train(gpt, f.num_steps);
  std::printf("losses over %d AdamW steps (%.6f -> %.6f):\n", f.num_steps, f.losses.front(),
              f.losses.back());
  expect_close("step losses", losses, f.losses, kRtol, 0);
  // Parameters after the steps. Adam divides each gradient by its own running magnitude, so a
  // gradient that is only rounding noise becomes a full +-lr step in a random direction. The key
  // biases (qkvb[C, 2C)) are such: softmax over keys ignores a shift common to all keys, so their
  // true gradient is 0. They may differ by up to 2 lr per step (and do not affect the loss).
  // Every other parameter is held to rtol and 10x the usual atol: Adam also magnifies the
  // gradients' rounding differences where |m| is small against sqrt(v) (measured up to ~3e-6 of a
  // tensor's largest value after 10 steps; one step's update is ~1e-2 of it).
  std::printf("parameters after %d steps:\n", f.num_steps);
  const size_t C = f.config.channels;
  for (const ParamTensor& t : gpt.param_layout().tensors()) {
    std::span<const float> got = params_of(gpt).subspan(t.offset, t.size);
    std::span<const float> want = std::span(f.final_params).subspan(t.offset, t.size);
    if (t.name.ends_with(".qkvb")) {
      for (size_t i = C; i < 2 * C; ++i) {
        EXPECT_LE(std::fabs(got[i] - want[i]), 2 * f.adamw.lr * f.num_steps) << t.name << i;
      }
      expect_close(t.name + "[q]", got.subspan(0, C), want.subspan(0, C), kRtol, 10 * kAtol);
      expect_close(t.name + "[v]", got.subspan(2 * C), want.subspan(2 * C), kRtol, 10 * kAtol);
    } else {
      expect_close(t.name, got, want, kRtol, 10 * kAtol);
    }
  }
}

// Forward + backward at the fixture's parameters.
GPT run_once(const ModelOptions& options = {}) {
  const Fixture& f = fixture();
  GPT gpt = model_from_fixture(options);
  EXPECT_TRUE(gpt.forward(f.inputs.data(), f.targets.data(), f.B, f.T).ok());
  EXPECT_TRUE(gpt.backward().ok());
  return gpt;
}

TEST(GPTParityTest, RecomputedActivationsGiveBitwiseTheSameGradients) {
  GPT stored = run_once();
  GPT recomputed = run_once({.recompute_activations = true});
  expect_bitwise_equal("logits", logits_of(stored), logits_of(recomputed));
  expect_bitwise_equal("gradients", grads_of(stored), grads_of(recomputed));
  // What recomputation saves: L blocks of (ln1, atty, ln2: B*T*C each; fch_gelu: 4*B*T*C;
  // attention's log-sum-exp: B*NH*T) but one, in floats.
  const Fixture& f = fixture();
  const GPTConfig& c = f.config;
  const size_t BT = static_cast<size_t>(f.B) * f.T;
  const size_t saved = (c.num_layers - 1) * (7 * BT * c.channels + BT * c.num_heads);
  EXPECT_EQ(stored.memory().activations - recomputed.memory().activations, saved * sizeof(float));
  EXPECT_EQ(stored.memory().activation_gradients, recomputed.memory().activation_gradients);
}

TEST(GPTParityTest, TwoRunsAreBitwiseIdentical) {
  for (bool recompute : {false, true}) {
    GPT a = model_from_fixture({.recompute_activations = recompute});
    GPT b = model_from_fixture({.recompute_activations = recompute});
    std::vector<float> losses_a = train(a, 3), losses_b = train(b, 3);
    expect_bitwise_equal("losses", losses_a, losses_b);
    expect_bitwise_equal("gradients", grads_of(a), grads_of(b));
    expect_bitwise_equal("parameters", params_of(a), params_of(b));
  }
}

// backward(dloss) scales the gradient by dloss and accumulates: two backward(0.5) make one
// backward(1). Not bit for bit: a parameter gradient that collects several terms (wte's from the
// head and the embedding; LayerNorm weights' over positions) adds them to what is there in another
// order.
TEST(GPTParityTest, BackwardAccumulatesScaledGradients) {
  const Fixture& f = fixture();
  GPT whole = run_once();
  GPT halves = model_from_fixture();
  ASSERT_TRUE(halves.forward(f.inputs.data(), f.targets.data(), f.B, f.T).ok());
  ASSERT_TRUE(halves.backward(0.5f).ok());
  ASSERT_TRUE(halves.backward(0.5f).ok());
  for (const ParamTensor& t : whole.param_layout().tensors()) {
    expect_close(t.name, grads_of(halves).subspan(t.offset, t.size),
                 grads_of(whole).subspan(t.offset, t.size), kRtol, kAtol);
  }
}

// Two models as two pipeline stages: blocks [0, 1) with the embedding, and [1, L) with the head,
// exchanging the residual stream and its gradient at the boundary. Together they compute the
// whole model's logits and gradients bit for bit, except the tied wte's, which the two stages
// hold in two parts whose sum rounds differently from the whole model's one accumulation.
TEST(GPTParityTest, PipelineStagesComputeTheWholeModel) {
  const Fixture& f = fixture();
  const int L = f.config.num_layers, split = 1;
  const size_t BTC = static_cast<size_t>(f.B) * f.T * f.config.channels;
  GPT whole = run_once();
  GPT first = model_from_fixture(), last = model_from_fixture();
  ASSERT_TRUE(first.prepare(f.B, f.T).ok());
  ASSERT_TRUE(last.prepare(f.B, f.T).ok());
  ASSERT_TRUE(first.embed_forward(f.inputs.data()).ok());
  ASSERT_TRUE(first.forward_blocks(0, split).ok());
  std::copy_n(first.residual(split), BTC, last.residual(split));
  ASSERT_TRUE(last.forward_blocks(split, L).ok());
  absl::StatusOr<float> loss = last.head_forward(f.targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(last.head_backward().ok());
  ASSERT_TRUE(last.backward_blocks(split, L).ok());
  std::copy_n(last.dresidual(), BTC, first.dresidual());
  ASSERT_TRUE(first.backward_blocks(0, split).ok());
  ASSERT_TRUE(first.embed_backward().ok());

  expect_bitwise_equal("logits", logits_of(whole), logits_of(last));
  const GPTParamLayout& layout = whole.param_layout();
  // wte is tied: its gradient is the embedding's (first stage) plus the head's (last stage).
  const size_t wte_size = layout.wpe();
  std::vector<float> dwte(wte_size);
  for (size_t i = 0; i < wte_size; ++i)
    dwte[i] = first.grads()[i] + last.grads()[i];
  expect_close("dwte", dwte, grads_of(whole).subspan(0, wte_size), kRtol, kAtol);
  auto range = [](const GPT& gpt, size_t begin, size_t end) {
    return grads_of(gpt).subspan(begin, end - begin);
  };
  expect_bitwise_equal("dwpe and blocks [0, split)",
                       range(first, wte_size, layout.block_begin(split)),
                       range(whole, wte_size, layout.block_begin(split)));
  expect_bitwise_equal("blocks [split, L) and lnf",
                       range(last, layout.block_begin(split), layout.num_params()),
                       range(whole, layout.block_begin(split), layout.num_params()));
}

// The same two stages keeping only their parts' activations (set_part), with two micro-batches in
// flight at once (activation slots): both forwards, then both backwards, as a pipeline schedule
// runs them. Against the whole model running the micro-batches one after the other: the same
// losses, and the same gradients bit for bit apart from the tied wte's; and each stage holds less
// than the whole model's activations per micro-batch.
TEST(GPTParityTest, PipelinePartsHoldSeveralMicroBatchesInSlots) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.B % 2, 0) << "the fixture's batch splits into two micro-batches";
  const int L = f.config.num_layers, split = 1, B = f.B / 2, m = 2;
  const size_t BT = static_cast<size_t>(B) * f.T, BTC = BT * f.config.channels;
  GPT whole = model_from_fixture();
  std::vector<float> whole_losses;
  for (int j = 0; j < m; ++j) {
    absl::StatusOr<float> loss =
        whole.forward(f.inputs.data() + j * BT, f.targets.data() + j * BT, B, f.T);
    ASSERT_TRUE(loss.ok()) << loss.status();
    whole_losses.push_back(*loss);
    ASSERT_TRUE(whole.backward(0.5f).ok());
  }
  GPT first = model_from_fixture(), last = model_from_fixture();
  ASSERT_TRUE(first.set_part(0, split, /*head=*/false).ok());
  ASSERT_TRUE(last.set_part(split, L, /*head=*/true).ok());
  ASSERT_TRUE(first.set_activation_slots(m).ok());
  ASSERT_TRUE(last.set_activation_slots(m).ok());
  ASSERT_TRUE(first.prepare(B, f.T).ok());
  ASSERT_TRUE(last.prepare(B, f.T).ok());
  for (int j = 0; j < m; ++j) {
    first.use_slot(j);
    last.use_slot(j);
    ASSERT_TRUE(first.embed_forward(f.inputs.data() + j * BT).ok());
    ASSERT_TRUE(first.forward_blocks(0, split).ok());
    std::copy_n(first.residual(split), BTC, last.residual(split));
    ASSERT_TRUE(last.forward_blocks(split, L).ok());
    absl::StatusOr<float> loss = last.head_forward(f.targets.data() + j * BT);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(*loss, whole_losses[static_cast<size_t>(j)]) << "micro-batch " << j;
  }
  for (int j = 0; j < m; ++j) {
    first.use_slot(j);
    last.use_slot(j);
    ASSERT_TRUE(last.head_backward(0.5f).ok());
    ASSERT_TRUE(last.backward_blocks(split, L).ok());
    std::copy_n(last.dresidual(), BTC, first.dresidual());
    ASSERT_TRUE(first.backward_blocks(0, split).ok());
    ASSERT_TRUE(first.embed_backward().ok());
  }
  const GPTParamLayout& layout = whole.param_layout();
  const size_t wte_size = layout.wpe();
  std::vector<float> dwte(wte_size);
  for (size_t i = 0; i < wte_size; ++i)
    dwte[i] = first.grads()[i] + last.grads()[i];
  expect_close("dwte", dwte, grads_of(whole).subspan(0, wte_size), kRtol, kAtol);
  auto range = [](const GPT& gpt, size_t begin, size_t end) {
    return grads_of(gpt).subspan(begin, end - begin);
  };
  expect_bitwise_equal("dwpe and blocks [0, split)",
                       range(first, wte_size, layout.block_begin(split)),
                       range(whole, wte_size, layout.block_begin(split)));
  expect_bitwise_equal("blocks [split, L) and lnf",
                       range(last, layout.block_begin(split), layout.num_params()),
                       range(whole, layout.block_begin(split), layout.num_params()));
  // Per micro-batch, each part holds less than the whole model (the first no logits at all).
  EXPECT_LT(first.memory().activations / m, whole.memory().activations);
  EXPECT_LT(last.memory().activations / m, whole.memory().activations);
  EXPECT_LT(first.memory().activation_gradients, whole.memory().activation_gradients);
  // Pieces outside a part are refused, not run on memory it does not have.
  EXPECT_EQ(first.head_forward(f.targets.data()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(last.embed_forward(f.inputs.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.forward_blocks(0, L).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.set_part(1, 1, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(first.set_part(0, split, true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(first.set_activation_slots(0).code(), absl::StatusCode::kInvalidArgument);
}

// embed_backward_rows: the token embeddings' gradient into compact rows, one per distinct token
// of the batch (here numbered from the vocabulary's end, so that the rows' order is not wte's).
// Added back into wte at their tokens they give wte's gradient (rounded differently: the head's
// share is added to the rows' sum, not term by term); every other gradient is bit for bit.
TEST(GPTParityTest, EmbeddingRowsAddUpToTheEmbeddingGradient) {
  const Fixture& f = fixture();
  const int C = f.config.channels, V = f.config.vocab_size;
  GPT whole = run_once();
  GPT split = model_from_fixture();
  ASSERT_TRUE(split.forward(f.inputs.data(), f.targets.data(), f.B, f.T).ok());
  ASSERT_TRUE(split.head_backward().ok());
  ASSERT_TRUE(split.backward_blocks(0, f.config.num_layers).ok());
  std::vector<int32_t> row_of(V, -1), token_of;
  for (int v = V - 1; v >= 0; --v) {
    if (std::find(f.inputs.begin(), f.inputs.end(), v) == f.inputs.end()) continue;
    row_of[v] = static_cast<int32_t>(token_of.size());
    token_of.push_back(v);
  }
  const int rows_n = static_cast<int>(token_of.size());
  ASSERT_LT(rows_n, V);  // the fixture's batch leaves some of the vocabulary out
  std::vector<float> rows(static_cast<size_t>(rows_n) * C, 0.0f);

  std::vector<int32_t> short_map(V - 1, 0);
  EXPECT_EQ(split.embed_backward_rows(rows.data(), short_map, rows_n).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> missing = row_of;
  missing[f.inputs[0]] = -1;
  absl::Status bad = split.embed_backward_rows(rows.data(), missing, rows_n);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(absl::StrCat("token ", f.inputs[0])), std::string::npos) << bad;
  EXPECT_TRUE(std::all_of(rows.begin(), rows.end(), [](float x) { return x == 0.0f; }));

  ASSERT_TRUE(split.embed_backward_rows(rows.data(), row_of, rows_n).ok());
  const GPTParamLayout& layout = whole.param_layout();
  std::vector<float> dwte(split.grads(), split.grads() + layout.wpe());
  for (int r = 0; r < rows_n; ++r) {
    for (int i = 0; i < C; ++i)
      dwte[static_cast<size_t>(token_of[r]) * C + i] += rows[static_cast<size_t>(r) * C + i];
  }
  expect_close("dwte", dwte, grads_of(whole).subspan(0, layout.wpe()), kRtol, kAtol);
  expect_bitwise_equal("everything but wte",
                       grads_of(split).subspan(layout.wpe(), layout.num_params() - layout.wpe()),
                       grads_of(whole).subspan(layout.wpe(), layout.num_params() - layout.wpe()));
}

// backward_blocks reports each layer of each block as its parameter gradients become final: six
// per block, at descending offsets, and nothing at or above a reported offset changes afterwards.
TEST(GPTParityTest, BackwardReportsEachLayerWhenItsGradientsAreFinal) {
  const Fixture& f = fixture();
  const int L = f.config.num_layers;
  GPT gpt = model_from_fixture();
  ASSERT_TRUE(gpt.forward(f.inputs.data(), f.targets.data(), f.B, f.T).ok());
  ASSERT_TRUE(gpt.head_backward().ok());
  const GPTParamLayout& layout = gpt.param_layout();
  const size_t n = layout.num_params();
  std::vector<size_t> reported;
  std::vector<std::vector<float>> snapshots;
  ASSERT_TRUE(gpt.backward_blocks(0, L,
                                  [&](size_t from) {
                                    reported.push_back(from);
                                    snapshots.emplace_back(gpt.grads() + from, gpt.grads() + n);
                                  })
                  .ok());
  ASSERT_EQ(reported.size(), static_cast<size_t>(6 * L));
  EXPECT_EQ(reported.front(), layout.block_tensor(L - 1, BlockTensor::kFcprojw));
  EXPECT_EQ(reported.back(), layout.block_begin(0));
  for (size_t i = 0; i < reported.size(); ++i) {
    if (i > 0) {
      EXPECT_LT(reported[i], reported[i - 1]);
    }
    expect_bitwise_equal(absl::StrCat("gradients from ", reported[i]).c_str(), snapshots[i],
                         grads_of(gpt).subspan(reported[i]));
  }
  ASSERT_TRUE(gpt.embed_backward().ok());
  GPT whole = run_once();
  expect_bitwise_equal("gradients", grads_of(gpt), grads_of(whole));
}

// A model that owns neither buffer, with each segment (the embeddings, every block, the final
// LayerNorm) bound to memory of its own - as ZeRO binds gathered blocks and gradient buckets -
// and rebound between the pieces of forward and backward, computes bitwise what the model with
// its flat buffers does.
TEST(GPTParityTest, BoundSegmentsComputeWhatTheFlatBuffersDo) {
  const Fixture& f = fixture();
  const int L = f.config.num_layers;
  GPT whole = model_from_fixture();
  absl::StatusOr<float> whole_loss = whole.forward(f.inputs.data(), f.targets.data(), f.B, f.T);
  ASSERT_TRUE(whole_loss.ok() && whole.backward().ok());
  absl::StatusOr<GPT> bound = GPT::create(f.config, {}, {.parameters = false, .gradients = false});
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->params(), nullptr);
  EXPECT_EQ(bound->memory().parameters + bound->memory().gradients, 0u);
  const GPTParamLayout& layout = bound->param_layout();
  std::vector<size_t> cuts = {0};
  for (int l = 0; l <= L; ++l)
    cuts.push_back(layout.block_begin(l));
  cuts.push_back(layout.num_params());
  // Segment i is [cuts[i], cuts[i + 1]); each gets its own copy of the parameters, and
  // gradients that start at zero.
  std::vector<std::vector<float>> params, grads;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    params.emplace_back(f.params.begin() + cuts[i], f.params.begin() + cuts[i + 1]);
    grads.emplace_back(cuts[i + 1] - cuts[i], 0.0f);
  }
  auto bind = [&](size_t segment) {
    ASSERT_TRUE(
        bound->bind_parameters(cuts[segment], cuts[segment + 1], params[segment].data()).ok());
    ASSERT_TRUE(
        bound->bind_gradients(cuts[segment], cuts[segment + 1], grads[segment].data()).ok());
  };
  const size_t E = 0, F = static_cast<size_t>(L) + 1;  // the embeddings', the final LayerNorm's
  ASSERT_TRUE(bound->prepare(f.B, f.T).ok());
  bind(E);
  ASSERT_TRUE(bound->embed_forward(f.inputs.data()).ok());
  for (int l = 0; l < L; ++l) {
    bind(static_cast<size_t>(l) + 1);
    ASSERT_TRUE(bound->forward_blocks(l, l + 1).ok());
  }
  bind(F);
  bind(E);
  absl::StatusOr<float> loss = bound->head_forward(f.targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, *whole_loss);
  ASSERT_TRUE(bound->head_backward().ok());
  for (int l = L - 1; l >= 0; --l) {
    bind(static_cast<size_t>(l) + 1);
    ASSERT_TRUE(bound->backward_blocks(l, l + 1).ok());
  }
  bind(E);
  ASSERT_TRUE(bound->embed_backward().ok());
  expect_bitwise_equal("logits", logits_of(whole), logits_of(*bound));
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    expect_bitwise_equal(absl::StrCat("gradients of segment ", i), grads[i],
                         grads_of(whole).subspan(cuts[i], cuts[i + 1] - cuts[i]));
  }
  // What cannot be bound.
  EXPECT_EQ(whole.bind_parameters(0, layout.wpe(), params[0].data()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bound->bind_parameters(1, layout.wpe(), params[0].data()).code(),
            absl::StatusCode::kInvalidArgument);  // cuts through wte
  EXPECT_EQ(bound->bind_gradients(0, layout.num_params() + 1, grads[0].data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// Any range of the initialisation, made without the rest, is that range of the whole.
TEST(GPTTest, ARangeOfTheInitialisationIsThatRangeOfTheWhole) {
  GPTConfig c = {.max_seq_len = 16,
                 .vocab_size = 50,
                 .padded_vocab_size = 64,
                 .num_layers = 2,
                 .num_heads = 2,
                 .channels = 16};
  GPT whole = *GPT::create(c);
  whole.init_parameters(7);
  const size_t n = whole.num_params();
  for (size_t begin : {size_t{0}, size_t{5}, n / 3, n - 1}) {
    for (size_t end : {begin, begin + 1, (begin + n) / 2 + 1, n}) {
      if (end > n || end < begin) continue;
      std::vector<float> part(end - begin, -1.0f);
      GPT::init_parameters(c, 7, begin, end, part.data());
      expect_bitwise_equal(absl::StrCat("[", begin, ", ", end, ")"), part,
                           params_of(whole).subspan(begin, end - begin));
    }
  }
}

TEST(GPTTest, LayoutFollowsTheDocumentedOrder) {
  const GPTConfig c = fixture().config;
  GPTParamLayout layout(c);
  const size_t C = c.channels, Vp = c.padded_vocab(), maxT = c.max_seq_len;
  EXPECT_EQ(layout.wpe(), Vp * C);
  EXPECT_EQ(layout.block_begin(0), (Vp + maxT) * C);
  EXPECT_EQ(layout.block_size(), 12 * C * C + 13 * C);
  EXPECT_EQ(layout.block_tensor(1, BlockTensor::kQkvw), layout.block_begin(1) + 2 * C);
  EXPECT_EQ(layout.lnfw(), layout.block_begin(c.num_layers));
  EXPECT_EQ(layout.num_params(), layout.lnfb() + C);
  ASSERT_EQ(layout.tensors().size(), 2u + 12 * c.num_layers + 2);
  EXPECT_EQ(layout.tensors()[2 + 12].name, "h1.ln1w");
  size_t end = 0;
  for (const ParamTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset, end) << t.name;
    end += t.size;
  }
  EXPECT_EQ(end, layout.num_params());
  // Biases and LayerNorm weights, merged where they touch: per block [ln1w, ln1b], qkvb,
  // [attprojb, ln2w, ln2b], fcb, then fcprojb runs on into the next block's ln1 (or lnf).
  std::vector<ParamRange> no_decay = layout.model().no_decay_ranges();
  EXPECT_TRUE(validate_ranges(no_decay, layout.num_params()).ok());
  EXPECT_EQ(no_decay.size(), 1 + 4 * static_cast<size_t>(c.num_layers));
  EXPECT_EQ(no_decay.front(), (ParamRange{layout.block_begin(0), layout.block_begin(0) + 2 * C}));
  EXPECT_EQ(no_decay.back().end, layout.num_params());
  size_t decay_free = 0;
  for (const ParamRange& r : no_decay)
    decay_free += r.size();
  EXPECT_EQ(decay_free, c.num_layers * 13 * C + 2 * C);
}

TEST(GPTTest, InitialisationIsGPT2sAndSeeded) {
  GPTConfig c = {.max_seq_len = 64,
                 .vocab_size = 500,
                 .padded_vocab_size = 512,
                 .num_layers = 4,
                 .num_heads = 4,
                 .channels = 64};
  GPT a = *GPT::create(c), b = *GPT::create(c), other = *GPT::create(c);
  a.init_parameters(42);
  b.init_parameters(42);
  other.init_parameters(43);
  expect_bitwise_equal("parameters from one seed", params_of(a), params_of(b));
  EXPECT_NE(std::memcmp(a.params(), other.params(), a.num_params() * sizeof(float)), 0);
  auto std_of = [](const float* p, size_t n) {
    double sum = 0, sum_sq = 0;
    for (size_t i = 0; i < n; ++i)
      sum += p[i], sum_sq += double{p[i]} * p[i];
    return std::sqrt(sum_sq / n - (sum / n) * (sum / n));
  };
  const GPTParamLayout& layout = a.param_layout();
  const size_t C = c.channels;
  EXPECT_NEAR(std_of(a.params(), c.vocab_size * C), 0.02, 0.001);
  for (size_t i = c.vocab_size * C; i < layout.wpe(); ++i)
    ASSERT_EQ(a.params()[i], 0.0f);
  EXPECT_NEAR(std_of(a.params() + layout.block_tensor(0, BlockTensor::kFcw), 4 * C * C), 0.02,
              0.001);
  EXPECT_NEAR(std_of(a.params() + layout.block_tensor(2, BlockTensor::kFcprojw), 4 * C * C),
              0.02 / std::sqrt(2.0 * c.num_layers), 0.001);
  EXPECT_EQ(a.param_tensors().blocks[3].ln2w[C - 1], 1.0f);
  EXPECT_EQ(a.param_tensors().blocks[3].qkvb[0], 0.0f);
  EXPECT_EQ(a.param_tensors().lnfw[0], 1.0f);
}

TEST(GPTTest, RejectsBadConfigsAndArguments) {
  GPTConfig c = fixture().config;
  GPTConfig bad = c;
  bad.num_heads = 5;
  EXPECT_EQ(GPT::create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = c;
  bad.padded_vocab_size = c.vocab_size - 1;
  EXPECT_EQ(GPT::create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = c;
  bad.num_layers = 0;
  EXPECT_EQ(GPT::create(bad).status().code(), absl::StatusCode::kInvalidArgument);

  GPT gpt = model_from_fixture();
  const Fixture& f = fixture();
  EXPECT_EQ(gpt.backward().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<int32_t> tokens(f.inputs);
  EXPECT_EQ(gpt.forward(tokens.data(), nullptr, 1, c.max_seq_len + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  tokens[3] = c.vocab_size;  // a padding id is not a token
  EXPECT_EQ(gpt.forward(tokens.data(), nullptr, f.B, f.T).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpt.forward(f.inputs.data(), tokens.data(), f.B, f.T).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Without targets: logits, no loss, and nothing to backpropagate.
  absl::StatusOr<float> loss = gpt.forward(f.inputs.data(), nullptr, f.B, f.T);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(std::isnan(*loss));
  EXPECT_EQ(gpt.backward().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpt.forward_blocks(1, 0).code(), absl::StatusCode::kInvalidArgument);
  // Row 0 of a batch of B matches a batch of 1 to rounding: a GEMM of another M may block (and
  // so round) differently, and OpenBLAS promises no more.
  const size_t row = static_cast<size_t>(f.T) * c.padded_vocab();
  const std::vector<float> row0(gpt.logits(), gpt.logits() + row);
  GPT small = model_from_fixture();
  ASSERT_TRUE(small.forward(f.inputs.data(), nullptr, 1, f.T).ok());
  expect_close("row 0, B=1", {small.logits(), row}, row0, 1e-5f, 1e-6f);
  // A smaller batch after a larger one reuses the buffers, and the same shapes give the same
  // bits as on a model that never ran the larger batch.
  ModelMemory before = gpt.memory();
  ASSERT_TRUE(gpt.forward(f.inputs.data(), nullptr, 1, f.T).ok());
  EXPECT_EQ(gpt.memory().activations, before.activations);
  expect_bitwise_equal("logits, B=1 after B", {gpt.logits(), row}, {small.logits(), row});
  ASSERT_TRUE(gpt.forward(f.inputs.data(), nullptr, 1, f.T / 2).ok());
  EXPECT_EQ(gpt.memory().activations, before.activations);
}

}  // namespace
}  // namespace troupe::nn
