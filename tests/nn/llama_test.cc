// The Llama model's pieces (nn/llama/llama.h, the seam's contract in nn/model/model.h) against
// the whole: forward and backward run piece by piece, in pipeline parts, in activation slots, with
// recomputed activations and with bound buffers give bitwise what forward() and backward() give;
// backward reports its marks in order; the initialisation splits into ranges and slices; bad
// configs, slices and inputs are refused with the documented errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nn/llama/llama.h"
#include "nn/model/model.h"
#include "tests/nn/simulated_group.h"

namespace troupe::nn {
namespace {

constexpr uint64_t kSeed = 11;

LlamaConfig small_config(bool tied = false) {
  return {.vocab_size = 61,
          .hidden_size = 32,
          .intermediate_size = 48,
          .num_hidden_layers = 3,
          .num_attention_heads = 4,
          .num_key_value_heads = 2,
          .max_position_embeddings = 16,
          .rms_norm_eps = 1e-5,
          .rope_theta = 10000.0,
          .tie_word_embeddings = tied,
          .padded_vocab_size = 64};
}

struct Batch {
  int B = 2, T = 12;
  std::vector<int32_t> inputs, targets;
};

// A batch that leaves part of the vocabulary out (for embed_backward_rows).
Batch make_batch(int salt = 0) {
  Batch b;
  for (int i = 0; i < b.B * b.T; ++i) {
    b.inputs.push_back((i * 7 + 3 + salt) % 40);
    b.targets.push_back((i * 11 + 5 + salt) % 61);
  }
  return b;
}

Llama make_model(const LlamaConfig& config, const ModelOptions& options = {},
                 const ModelStorage& storage = {}) {
  absl::StatusOr<Llama> llama = Llama::create(config, options, storage);
  if (!llama.ok()) {
    ADD_FAILURE() << llama.status();
    std::abort();
  }
  if (storage.parameters) llama->init_parameters(kSeed);
  return *std::move(llama);
}

// Through the seam's const accessors (Llama's overrides hide them).
std::vector<float> params_of(const Model& m) {
  return {m.params(), m.params() + m.num_params()};
}
std::vector<float> grads_of(const Model& m) {
  return {m.grads(), m.grads() + m.num_params()};
}
std::vector<float> logits_of(const Llama& m, const Batch& b) {
  const size_t n = static_cast<size_t>(b.B) * b.T * m.config().padded_vocab();
  return {m.logits(), m.logits() + n};
}

void expect_bitwise_equal(const std::string& what, std::span<const float> a,
                          std::span<const float> b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << what << " differ in their bits";
}

// What forward() and backward() give on the batch.
struct Whole {
  float loss = 0;
  std::vector<float> logits, grads;
};
Whole run_whole(const LlamaConfig& config, const Batch& b, const ModelOptions& options = {}) {
  Llama m = make_model(config, options);
  absl::StatusOr<float> loss = m.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
  EXPECT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(m.backward().ok());
  return {loss.value_or(NAN), logits_of(m, b), grads_of(m)};
}

class LlamaHeadTest : public testing::TestWithParam<bool> {
 protected:
  LlamaConfig config() const { return small_config(/*tied=*/GetParam()); }
};

TEST_P(LlamaHeadTest, PiecesComputeBitwiseWhatTheWholeDoes) {
  const Batch b = make_batch();
  const Whole whole = run_whole(config(), b);
  Llama m = make_model(config());
  const int L = config().num_hidden_layers;
  ASSERT_TRUE(m.prepare(b.B, b.T).ok());
  ASSERT_TRUE(m.embed_forward(b.inputs.data()).ok());
  for (int l = 0; l < L; ++l)
    ASSERT_TRUE(m.forward_blocks(l, l + 1).ok());
  absl::StatusOr<float> loss = m.head_forward(b.targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, whole.loss);
  ASSERT_TRUE(m.head_backward().ok());
  ASSERT_TRUE(m.backward_blocks(1, L).ok());
  ASSERT_TRUE(m.backward_blocks(0, 1).ok());
  ASSERT_TRUE(m.embed_backward().ok());
  expect_bitwise_equal("logits", logits_of(m, b), whole.logits);
  expect_bitwise_equal("gradients", grads_of(m), whole.grads);
}

TEST_P(LlamaHeadTest, RecomputedActivationsGiveBitwiseTheSameGradients) {
  const Batch b = make_batch();
  const Whole stored = run_whole(config(), b);
  const Whole recomputed = run_whole(config(), b, {.recompute_activations = true});
  EXPECT_EQ(recomputed.loss, stored.loss);
  expect_bitwise_equal("logits", recomputed.logits, stored.logits);
  expect_bitwise_equal("gradients", recomputed.grads, stored.grads);
  Llama keep = make_model(config()), recompute = make_model(config(), {true});
  ASSERT_TRUE(keep.prepare(b.B, b.T).ok() && recompute.prepare(b.B, b.T).ok());
  EXPECT_LT(recompute.memory().activations, keep.memory().activations);
}

// Two micro-batches in flight in two slots, their backwards in forward order, accumulate what
// the two run one after the other do.
TEST_P(LlamaHeadTest, ActivationSlotsHoldMicroBatchesApart) {
  const Batch b0 = make_batch(0), b1 = make_batch(5);
  Llama one = make_model(config());
  for (const Batch* b : {&b0, &b1}) {
    ASSERT_TRUE(one.forward(b->inputs.data(), b->targets.data(), b->B, b->T).ok());
    ASSERT_TRUE(one.backward(0.5f).ok());
  }
  Llama two = make_model(config());
  ASSERT_TRUE(two.set_activation_slots(2).ok());
  EXPECT_EQ(two.activation_slots(), 2);
  std::vector<float> loss(2);
  for (int j = 0; j < 2; ++j) {
    const Batch& b = j == 0 ? b0 : b1;
    two.use_slot(j);
    absl::StatusOr<float> l = two.forward(b.inputs.data(), b.targets.data(), b.B, b.T);
    ASSERT_TRUE(l.ok()) << l.status();
    loss[static_cast<size_t>(j)] = *l;
  }
  for (int j = 0; j < 2; ++j) {
    two.use_slot(j);
    ASSERT_TRUE(two.backward(0.5f).ok());
  }
  expect_bitwise_equal("gradients", grads_of(two), grads_of(one));
  EXPECT_NE(loss[0], loss[1]);
  EXPECT_EQ(two.set_activation_slots(0).code(), absl::StatusCode::kInvalidArgument);
}

// Two pipeline stages, blocks [0, 1) and [1, L) with the head, passing the residual stream and
// its gradient, compute bitwise what the whole model does; each holds less.
TEST_P(LlamaHeadTest, PipelinePartsComputeWhatTheWholeDoes) {
  const Batch b = make_batch();
  const int L = config().num_hidden_layers, split = 1;
  Llama whole = make_model(config());
  ASSERT_TRUE(whole.forward(b.inputs.data(), b.targets.data(), b.B, b.T).ok());
  ASSERT_TRUE(whole.backward().ok());
  Llama first = make_model(config()), last = make_model(config());
  ASSERT_TRUE(first.set_part(0, split, false).ok());
  ASSERT_TRUE(last.set_part(split, L, true).ok());
  ASSERT_TRUE(first.prepare(b.B, b.T).ok() && last.prepare(b.B, b.T).ok());
  const size_t BTC = static_cast<size_t>(b.B) * b.T * config().hidden_size;
  ASSERT_TRUE(first.embed_forward(b.inputs.data()).ok());
  ASSERT_TRUE(first.forward_blocks(0, split).ok());
  std::copy(first.residual(split), first.residual(split) + BTC, last.residual(split));
  ASSERT_TRUE(last.forward_blocks(split, L).ok());
  absl::StatusOr<float> loss = last.head_forward(b.targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(last.head_backward().ok());
  ASSERT_TRUE(last.backward_blocks(split, L).ok());
  std::copy(last.dresidual(), last.dresidual() + BTC, first.dresidual());
  ASSERT_TRUE(first.backward_blocks(0, split).ok());
  ASSERT_TRUE(first.embed_backward().ok());
  expect_bitwise_equal("logits", logits_of(last, b), logits_of(whole, b));
  // The first stage holds the embedding and blocks [0, split), the last the rest; a tied head's
  // gradient lands in the last stage's copy of the embedding, which a trainer adds to the first's.
  const ModelLayout& layout = whole.layout();
  const size_t embed = layout.token_embedding().end, cut = layout.block_begin(split);
  const size_t n = layout.num_params();
  const std::vector<float> g_first = grads_of(first), g_last = grads_of(last), g = grads_of(whole);
  auto range = [](const std::vector<float>& v, size_t begin, size_t end) {
    return std::span(v).subspan(begin, end - begin);
  };
  expect_bitwise_equal("blocks [0, split)", range(g_first, embed, cut), range(g, embed, cut));
  expect_bitwise_equal("blocks [split, L) and the head", range(g_last, cut, n), range(g, cut, n));
  if (!config().tie_word_embeddings) {
    expect_bitwise_equal("the embedding", range(g_first, 0, embed), range(g, 0, embed));
  } else {
    std::vector<float> sum(embed);
    for (size_t i = 0; i < embed; ++i)
      sum[i] = g_last[i] + g_first[i];
    for (size_t i = 0; i < embed; ++i)
      ASSERT_NEAR(sum[i], g[i], 1e-6f * (1 + std::fabs(g[i]))) << "embedding gradient " << i;
  }
  EXPECT_LT(first.memory().activations, whole.memory().activations);
  EXPECT_LT(last.memory().activations, whole.memory().activations);
  // Pieces outside a part are refused.
  EXPECT_EQ(first.head_forward(b.targets.data()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(last.embed_forward(b.inputs.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.forward_blocks(0, L).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.set_part(1, 1, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(first.set_part(0, split, true).code(), absl::StatusCode::kInvalidArgument);
}

// A model that owns neither buffer, each segment bound to memory of its own and rebound between
// the pieces (as ZeRO binds gathered blocks and gradient buckets), computes bitwise what the
// model with its flat buffers does.
TEST_P(LlamaHeadTest, BoundSegmentsComputeWhatTheFlatBuffersDo) {
  const Batch b = make_batch();
  const int L = config().num_hidden_layers;
  Llama whole = make_model(config());
  ASSERT_TRUE(whole.forward(b.inputs.data(), b.targets.data(), b.B, b.T).ok());
  ASSERT_TRUE(whole.backward().ok());
  Llama bound = make_model(config(), {}, {.parameters = false, .gradients = false});
  EXPECT_EQ(bound.params(), nullptr);
  EXPECT_EQ(bound.grads(), nullptr);
  EXPECT_EQ(bound.memory().parameters + bound.memory().gradients, 0u);
  const std::vector<Segment>& segments = bound.layout().segments();
  std::vector<std::vector<float>> params, grads;
  for (const Segment& s : segments) {
    params.emplace_back(whole.params() + s.range.begin, whole.params() + s.range.end);
    grads.emplace_back(s.range.size(), 0.0f);
  }
  auto bind = [&](size_t i) {
    const ParamRange r = segments[i].range;
    ASSERT_TRUE(bound.bind_parameters(r.begin, r.end, params[i].data()).ok());
    ASSERT_TRUE(bound.bind_gradients(r.begin, r.end, grads[i].data()).ok());
  };
  const size_t E = 0, H = segments.size() - 1;
  ASSERT_TRUE(bound.prepare(b.B, b.T).ok());
  bind(E);
  ASSERT_TRUE(bound.embed_forward(b.inputs.data()).ok());
  for (int l = 0; l < L; ++l) {
    bind(static_cast<size_t>(l) + 1);
    ASSERT_TRUE(bound.forward_blocks(l, l + 1).ok());
  }
  bind(H);
  absl::StatusOr<float> loss = bound.head_forward(b.targets.data());
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(bound.head_backward().ok());
  for (int l = L - 1; l >= 0; --l) {
    bind(static_cast<size_t>(l) + 1);
    ASSERT_TRUE(bound.backward_blocks(l, l + 1).ok());
  }
  bind(E);
  ASSERT_TRUE(bound.embed_backward().ok());
  expect_bitwise_equal("logits", logits_of(bound, b), logits_of(whole, b));
  const std::vector<float> whole_grads = grads_of(whole);
  for (size_t i = 0; i < segments.size(); ++i) {
    const ParamRange r = segments[i].range;
    expect_bitwise_equal(absl::StrCat("gradients of segment ", i), grads[i],
                         std::span(whole_grads).subspan(r.begin, r.size()));
  }
  // What cannot be bound.
  const size_t embed_end = bound.layout().token_embedding().end;
  EXPECT_EQ(whole.bind_parameters(0, embed_end, params[0].data()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(whole.bind_gradients(0, embed_end, grads[0].data()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bound.bind_parameters(1, embed_end, params[0].data()).code(),
            absl::StatusCode::kInvalidArgument);  // cuts through the embedding
  EXPECT_EQ(bound.bind_gradients(0, bound.num_params() + 1, grads[0].data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// backward_blocks reports layout().backward_marks(l) for each block, in order, and nothing at or
// above a reported offset changes afterwards.
TEST_P(LlamaHeadTest, BackwardReportsTheLayoutsMarksWhenGradientsAreFinal) {
  const Batch b = make_batch();
  const int L = config().num_hidden_layers;
  Llama m = make_model(config());
  ASSERT_TRUE(m.forward(b.inputs.data(), b.targets.data(), b.B, b.T).ok());
  ASSERT_TRUE(m.head_backward().ok());
  const size_t end = m.layout().block_begin(L);
  std::vector<size_t> reported, expected;
  std::vector<std::vector<float>> snapshots;
  ASSERT_TRUE(m.backward_blocks(0, L, [&](size_t from) {
                 reported.push_back(from);
                 snapshots.emplace_back(m.grads() + from, m.grads() + end);
               }).ok());
  for (int l = L - 1; l >= 0; --l) {
    const std::vector<size_t>& marks = m.layout().backward_marks(l);
    expected.insert(expected.end(), marks.begin(), marks.end());
  }
  EXPECT_EQ(reported, expected);
  ASSERT_EQ(expected.size(), static_cast<size_t>(6 * L));
  EXPECT_EQ(reported.front(), m.llama_layout().block_tensor(L - 1, LlamaTensor::kDown));
  EXPECT_EQ(reported.back(), m.layout().block_begin(0));
  for (size_t i = 0; i < reported.size(); ++i) {
    expect_bitwise_equal(absl::StrCat("gradients from ", reported[i]), snapshots[i],
                         {m.grads() + reported[i], end - reported[i]});
  }
}

// embed_backward_rows: the token embedding's gradient into compact rows (numbered from the
// vocabulary's end), which are embed_backward's rows of it; other gradients are unchanged.
TEST_P(LlamaHeadTest, EmbeddingRowsAreTheTokenEmbeddingsGradient) {
  const Batch b = make_batch();
  const int C = config().hidden_size, V = config().vocab_size;
  auto run_to_embedding = [&](Llama& m) {
    ASSERT_TRUE(m.forward(b.inputs.data(), b.targets.data(), b.B, b.T).ok());
    ASSERT_TRUE(m.head_backward().ok());
    ASSERT_TRUE(m.backward_blocks(0, config().num_hidden_layers).ok());
  };
  Llama dense = make_model(config()), sparse = make_model(config());
  run_to_embedding(dense);
  run_to_embedding(sparse);
  // dense's token embedding gradient holds the head's share when tied: keep it apart.
  const std::vector<float> before = grads_of(dense);
  ASSERT_TRUE(dense.embed_backward().ok());
  std::vector<int32_t> row_of(static_cast<size_t>(V), -1), token_of;
  for (int v = V - 1; v >= 0; --v) {
    if (std::find(b.inputs.begin(), b.inputs.end(), v) == b.inputs.end()) continue;
    row_of[static_cast<size_t>(v)] = static_cast<int32_t>(token_of.size());
    token_of.push_back(v);
  }
  const int num_rows = static_cast<int>(token_of.size());
  ASSERT_LT(num_rows, V);
  std::vector<float> rows(static_cast<size_t>(num_rows) * C, 0.0f);
  std::vector<int32_t> short_map(static_cast<size_t>(V) - 1, 0);
  EXPECT_EQ(sparse.embed_backward_rows(rows.data(), short_map, num_rows).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> missing = row_of;
  missing[static_cast<size_t>(b.inputs[0])] = -1;
  absl::Status bad = sparse.embed_backward_rows(rows.data(), missing, num_rows);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(absl::StrCat("token ", b.inputs[0])), std::string::npos) << bad;
  EXPECT_TRUE(std::all_of(rows.begin(), rows.end(), [](float x) { return x == 0.0f; }));
  ASSERT_TRUE(sparse.embed_backward_rows(rows.data(), row_of, num_rows).ok());
  for (int r = 0; r < num_rows; ++r) {
    const size_t token = static_cast<size_t>(token_of[static_cast<size_t>(r)]) * C;
    for (int i = 0; i < C; ++i) {
      const float from_rows = rows[static_cast<size_t>(r) * C + i];
      const float dense_share = dense.grads()[token + i] - before[token + i];
      if (config().tie_word_embeddings) {
        EXPECT_NEAR(from_rows, dense_share, 1e-6f * (1 + std::fabs(dense_share)));
      } else {
        EXPECT_EQ(from_rows, dense.grads()[token + i])
            << "token " << token_of[r] << "[" << i << "]";
      }
    }
  }
  // The rows took the whole embedding share: everything else is as before embed_backward.
  expect_bitwise_equal("gradients besides the rows", grads_of(sparse), before);
}

INSTANTIATE_TEST_SUITE_P(Heads, LlamaHeadTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& param) {
                           return param.param ? "tied" : "untied";
                         });

TEST(LlamaTest, ARangeOfTheInitialisationIsThatRangeOfTheWhole) {
  for (int tp : {1, 2}) {
    for (int rank = 0; rank < tp; ++rank) {
      const TensorSlice slice{.rank = rank, .size = tp};
      const LlamaConfig config = small_config();
      absl::StatusOr<Llama> m = Llama::create(config, {}, {}, slice);
      ASSERT_TRUE(m.ok()) << m.status();
      m->init_parameters(kSeed);
      const size_t n = m->num_params();
      const std::vector<float> all = params_of(*m);
      for (size_t begin : {size_t{0}, size_t{5}, n / 3, n - 1}) {
        for (size_t end : {begin, begin + 1, (begin + n) / 2 + 1, n}) {
          if (end > n || end < begin) continue;
          std::vector<float> part(end - begin, -1.0f);
          Llama::init_parameters(config, slice, kSeed, begin, end, part.data());
          expect_bitwise_equal(
              absl::StrCat("rank ", rank, " of ", tp, ": [", begin, ", ", end, ")"), part,
              std::span(all).subspan(begin, end - begin));
        }
      }
      // The slice of the whole model's values (and the seam's init_parameters says the same).
      const Llama whole = make_model(config);
      std::vector<float> want(n);
      copy_to_slice(whole.layout(), m->layout(), params_of(whole).data(), want.data());
      expect_bitwise_equal(absl::StrCat("rank ", rank, " of ", tp), all, want);
      std::vector<float> seam(n);
      init_parameters(ModelConfig(config), slice, kSeed, 0, n, seam.data());
      expect_bitwise_equal("through the seam", seam, want);
    }
  }
}

TEST(LlamaTest, InitialisationIsSeededWithTheDocumentedScales) {
  LlamaConfig config = small_config();
  config.hidden_size = 64;
  config.intermediate_size = 256;
  config.num_hidden_layers = 4;
  Llama a = make_model(config);
  Llama other = make_model(config);
  other.init_parameters(kSeed + 1);
  expect_bitwise_equal("one seed", params_of(a), params_of(make_model(config)));
  EXPECT_NE(params_of(a), params_of(other));
  auto std_of = [&](size_t offset, size_t n) {
    double sum = 0, sum_sq = 0;
    for (size_t i = 0; i < n; ++i) {
      const double x = a.params()[offset + i];
      sum += x;
      sum_sq += x * x;
    }
    return std::sqrt(sum_sq / n - (sum / n) * (sum / n));
  };
  const LlamaLayout& layout = a.llama_layout();
  const size_t C = config.hidden_size, V = config.vocab_size, Vp = config.padded_vocab();
  const size_t I = config.intermediate_size;
  EXPECT_NEAR(std_of(0, V * C), 0.02, 0.001);
  EXPECT_NEAR(std_of(layout.lm_head(), V * C), 0.02, 0.001);
  for (size_t i = V * C; i < Vp * C; ++i) {
    ASSERT_EQ(a.params()[i], 0.0f);
    ASSERT_EQ(a.params()[layout.lm_head() + i], 0.0f);
  }
  EXPECT_NEAR(std_of(layout.block_tensor(1, LlamaTensor::kGate), I * C), 0.02, 0.001);
  EXPECT_NEAR(std_of(layout.block_tensor(2, LlamaTensor::kDown), I * C),
              0.02 / std::sqrt(2.0 * config.num_hidden_layers), 0.001);
  EXPECT_EQ(a.params()[layout.block_tensor(3, LlamaTensor::kPostNorm) + C - 1], 1.0f);
  EXPECT_EQ(a.params()[layout.norm()], 1.0f);
}

TEST(LlamaTest, TheSeamCreatesALlamaFromItsConfig) {
  const LlamaConfig config = small_config(true);
  absl::StatusOr<std::unique_ptr<Model>> model = create_model(ModelConfig(config));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE(dynamic_cast<Llama*>(model->get()), nullptr);
  EXPECT_EQ((*model)->config(), ModelConfig(config));
  EXPECT_TRUE((*model)->layout().tied_head());
  EXPECT_EQ((*model)->num_params(), model_layout(ModelConfig(config)).num_params());
  EXPECT_EQ(model_layout(ModelConfig(config)).tensors().back().name, "model.norm.weight");
  EXPECT_EQ(model_layout(ModelConfig(small_config(false))).tensors().back().name, "lm_head.weight");
}

TEST(LlamaTest, RejectsBadConfigsAndInputs) {
  auto refused = [](const LlamaConfig& c, const std::string& field) {
    absl::StatusOr<Llama> m = Llama::create(c);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(m.status().message().find(field), std::string::npos) << m.status();
  };
  LlamaConfig c = small_config();
  c.num_key_value_heads = 3;
  refused(c, "num_key_value_heads");
  c = small_config();
  c.num_attention_heads = 8;  // head_dim 4 is fine; 16 heads make head_dim 2
  c.num_key_value_heads = 8;
  ASSERT_TRUE(Llama::create(c).ok());
  c.hidden_size = 24;  // head_dim 3: odd
  refused(c, "head_dim");
  c = small_config();
  c.padded_vocab_size = 60;
  refused(c, "padded_vocab_size");
  c = small_config();
  c.num_hidden_layers = 0;
  refused(c, "num_hidden_layers");
  c = small_config();
  c.rms_norm_eps = 0;
  refused(c, "rms_norm_eps");

  const Batch b = make_batch();
  Llama m = make_model(small_config());
  EXPECT_EQ(m.backward().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.forward_blocks(0, 1).code(), absl::StatusCode::kFailedPrecondition);  // no prepare
  std::vector<int32_t> tokens(static_cast<size_t>(17), 1);
  absl::Status too_long = m.forward(tokens.data(), nullptr, 1, 17).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("max_position_embeddings"), std::string::npos) << too_long;
  EXPECT_EQ(m.forward(b.inputs.data(), nullptr, 0, b.T).status().code(),
            absl::StatusCode::kInvalidArgument);
  tokens = b.inputs;
  tokens[3] = small_config().vocab_size;  // a padding id is not a token
  EXPECT_EQ(m.forward(tokens.data(), nullptr, b.B, b.T).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.forward(b.inputs.data(), tokens.data(), b.B, b.T).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.forward(nullptr, nullptr, b.B, b.T).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Without targets: logits, no loss, nothing to backpropagate.
  absl::StatusOr<float> loss = m.forward(b.inputs.data(), nullptr, b.B, b.T);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(std::isnan(*loss));
  EXPECT_EQ(m.backward().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.forward_blocks(1, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.set_part(0, 4, false).code(), absl::StatusCode::kInvalidArgument);
  // A smaller batch reuses the buffers.
  const ModelMemory before = m.memory();
  ASSERT_TRUE(m.forward(b.inputs.data(), nullptr, 1, b.T / 2).ok());
  EXPECT_EQ(m.memory().activations, before.activations);
}

TEST(LlamaTest, ValidateSliceNamesWhatDoesNotSplit) {
  auto refused = [](const LlamaConfig& c, const TensorSlice& s, const std::string& what) {
    absl::Status status = validate_slice(ModelConfig(c), s);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(status.message().find(what), std::string::npos) << status;
    EXPECT_EQ(Llama::create(c, {}, {}, s).status().code(), absl::StatusCode::kInvalidArgument);
  };
  const LlamaConfig c = small_config();
  EXPECT_TRUE(validate_slice(ModelConfig(c), {.rank = 1, .size = 2}).ok());
  refused(c, {.rank = 2, .size = 2}, "is not a rank");
  refused(c, {.rank = -1, .size = 2}, "is not a rank");
  refused(c, {.rank = 0, .size = 4}, "num_key_value_heads");  // 2 KV heads over 4
  LlamaConfig odd = c;
  odd.num_attention_heads = 2;
  odd.num_key_value_heads = 2;
  refused(odd, {.rank = 0, .size = 4}, "num_attention_heads");
  odd = c;
  odd.intermediate_size = 49;
  refused(odd, {.rank = 0, .size = 2}, "intermediate_size");
  odd = c;
  odd.num_key_value_heads = 4;
  odd.padded_vocab_size = 62;
  refused(odd, {.rank = 0, .size = 4}, "padded vocabulary");
}

// Tensor-parallel ranks: a rank without a group is refused, embed_backward_rows is refused, and
// recomputation gives bitwise the same gradients on every rank.
TEST(LlamaTest, TensorParallelRanksRecomputeBitwise) {
  const LlamaConfig config = small_config();
  const Batch b = make_batch();
  constexpr int kTp = 2;
  absl::StatusOr<Llama> lonely = Llama::create(config, {}, {}, {.rank = 0, .size = kTp});
  ASSERT_TRUE(lonely.ok()) << lonely.status();
  EXPECT_EQ(lonely->forward(b.inputs.data(), b.targets.data(), b.B, b.T).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<std::vector<float>> grads[2];
  for (bool recompute : {false, true}) {
    auto& out = grads[recompute ? 1 : 0];
    out.resize(kTp);
    SimulatedGroup group(kTp);
    group.run([&](int rank) {
      absl::StatusOr<Llama> m = Llama::create(config, {.recompute_activations = recompute}, {},
                                              {.rank = rank, .size = kTp});
      ASSERT_TRUE(m.ok()) << m.status();
      m->init_parameters(kSeed);
      m->set_tensor_parallel(group.sum(rank), group.max(rank));
      ASSERT_TRUE(m->forward(b.inputs.data(), b.targets.data(), b.B, b.T).ok());
      ASSERT_TRUE(m->backward().ok());
      std::vector<int32_t> row_of(static_cast<size_t>(config.vocab_size), 0);
      float row[32] = {};
      EXPECT_EQ(m->embed_backward_rows(row, row_of, 1).code(),
                absl::StatusCode::kFailedPrecondition);
      out[static_cast<size_t>(rank)] = grads_of(*m);
    });
  }
  for (int r = 0; r < kTp; ++r)
    expect_bitwise_equal(absl::StrCat("rank ", r), grads[1][r], grads[0][r]);
}

}  // namespace
}  // namespace troupe::nn
