// Pretrained weights in (checkpoint/pretrained.h, nn/model/hf.h): what troupe writes in Hugging
// Face's names reads back the same, GPT-2 under the hub's names too, half-precision files widen
// exactly, a config or a tensor that does not fit is named; and, where PyTorch and transformers
// are installed, models saved by transformers' save_pretrained give troupe transformers' logits
// and loss.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "core/io/env.h"
#include "nn/dtype.h"
#include "nn/model/hf.h"
#include "nn/model/model.h"
#include "tests/reference/reference_python.h"

namespace troupe::checkpoint {
namespace {

const nn::ModelConfig kGpt2 = nn::GPTConfig{.max_seq_len = 8,
                                            .vocab_size = 61,
                                            .padded_vocab_size = 64,
                                            .num_layers = 2,
                                            .num_heads = 2,
                                            .channels = 16};

nn::ModelConfig llama(bool tied) {
  return nn::LlamaConfig{.vocab_size = 61,
                         .hidden_size = 16,
                         .intermediate_size = 24,
                         .num_hidden_layers = 2,
                         .num_attention_heads = 4,
                         .num_key_value_heads = 2,
                         .max_position_embeddings = 8,
                         .rms_norm_eps = 1e-5,
                         .tie_word_embeddings = tied,
                         .padded_vocab_size = 64};
}

class PretrainedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("troupe_pretrained_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A model's initial parameters, each moved a little so that every tensor differs.
  static std::vector<float> parameters(const nn::ModelConfig& config) {
    std::vector<float> p(nn::model_layout(config).num_params());
    nn::init_parameters(config, {}, 5, 0, p.size(), p.data());
    const nn::ModelLayout layout = nn::model_layout(config);
    // The padding rows stay zero (an export drops them, an import leaves them zero).
    const size_t C = static_cast<size_t>(config.hidden_size());
    for (const nn::ParamTensor& t : layout.tensors()) {
      const bool vocabulary = t.shape.size() == 2 && t.shape[0] == config.padded_vocab();
      const size_t used = vocabulary ? static_cast<size_t>(config.vocab_size()) * C : t.size;
      for (size_t i = 0; i < used; ++i)
        p[t.offset + i] += 0.001f * static_cast<float>((t.offset + i) % 7);
    }
    return p;
  }

  // Writes `config`'s Hugging Face directory of `params` into `dir`.
  static void write_model_dir(const std::string& dir, const nn::ModelConfig& config,
                              const std::vector<float>& params,
                              const std::string& strip_prefix = "") {
    std::filesystem::create_directories(dir);
    std::vector<nn::HfTensor> tensors = nn::hf_tensors(config, params.data());
    for (nn::HfTensor& t : tensors) {
      if (!strip_prefix.empty() && t.name.rfind(strip_prefix, 0) == 0)
        t.name = t.name.substr(strip_prefix.size());
    }
    ASSERT_TRUE(write_safetensors(io::Env::posix(), dir + "/model.safetensors", tensors, {}).ok());
    const std::string text = nn::hf_config_json(config).dump(2);
    ASSERT_TRUE(
        io::write_file_atomically(io::Env::posix(), dir + "/config.json", text.data(), text.size())
            .ok());
  }

  std::filesystem::path dir_;
};

TEST_F(PretrainedTest, WhatTroupeWritesReadsBackTheSameForEveryArchitecture) {
  for (const nn::ModelConfig& config : {kGpt2, llama(false), llama(true)}) {
    SCOPED_TRACE(config.describe());
    const std::vector<float> params = parameters(config);
    const std::string dir = (dir_ / "model").string();
    std::filesystem::remove_all(dir);
    write_model_dir(dir, config, params);
    absl::StatusOr<std::optional<nn::ModelConfig>> described =
        pretrained_config(io::Env::posix(), dir);
    ASSERT_TRUE(described.ok()) << described.status();
    ASSERT_TRUE(described->has_value());
    EXPECT_TRUE(check_pretrained_config(config, **described).ok());
    absl::StatusOr<std::vector<float>> loaded = load_pretrained(io::Env::posix(), dir, config);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(*loaded, params);
  }
}

TEST_F(PretrainedTest, Gpt2ReadsTheHubsNamesWithoutTransformer) {
  const std::vector<float> params = parameters(kGpt2);
  const std::string dir = (dir_ / "hub").string();
  write_model_dir(dir, kGpt2, params, "transformer.");
  absl::StatusOr<std::vector<float>> loaded = load_pretrained(io::Env::posix(), dir, kGpt2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, params);
}

TEST_F(PretrainedTest, HalfPrecisionFilesWidenExactly) {
  // bf16 values: what a float rounds to; the file holds them as BF16.
  const nn::ModelConfig config = llama(false);
  std::vector<float> params = parameters(config);
  std::vector<uint16_t> half(params.size());
  nn::convert(params.data(), nn::DType::kFloat32, half.data(), nn::DType::kBFloat16,
              static_cast<int64_t>(params.size()));
  nn::convert(half.data(), nn::DType::kBFloat16, params.data(), nn::DType::kFloat32,
              static_cast<int64_t>(params.size()));
  const std::string dir = (dir_ / "bf16").string();
  write_model_dir(dir, config, params);
  // Rewrite model.safetensors with every tensor as BF16.
  std::map<std::string, std::string> metadata;
  absl::StatusOr<std::vector<SafeTensor>> tensors =
      read_safetensors(io::Env::posix(), dir + "/model.safetensors", &metadata);
  ASSERT_TRUE(tensors.ok());
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const SafeTensor& t : *tensors) {
    std::vector<uint16_t> bits(t.data.size());
    nn::convert(t.data.data(), nn::DType::kFloat32, bits.data(), nn::DType::kBFloat16,
                static_cast<int64_t>(bits.size()));
    header[t.name] = {{"dtype", "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + bits.size() * 2}}};
    data.append(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << data;
  out.close();
  absl::StatusOr<std::vector<float>> loaded = load_pretrained(io::Env::posix(), dir, config);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, params);
}

TEST_F(PretrainedTest, AConfigOfAnotherModelIsNamedByItsKey) {
  const std::string dir = (dir_ / "other").string();
  write_model_dir(dir, llama(false), parameters(llama(false)));
  nn::ModelConfig run = llama(false);
  run.llama()->intermediate_size = 32;
  absl::StatusOr<std::vector<float>> loaded = load_pretrained(io::Env::posix(), dir, run);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("intermediate_size"), std::string::npos)
      << loaded.status();
  loaded = load_pretrained(io::Env::posix(), dir, kGpt2);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("llama model; model.type is gpt2"), std::string::npos)
      << loaded.status();
}

TEST_F(PretrainedTest, AMissingOrMisshapenTensorIsNamed) {
  const nn::ModelConfig config = llama(false);
  const std::string dir = (dir_ / "broken").string();
  write_model_dir(dir, config, parameters(config));
  absl::StatusOr<std::vector<SafeTensor>> tensors =
      read_safetensors(io::Env::posix(), dir + "/model.safetensors", nullptr);
  ASSERT_TRUE(tensors.ok());
  std::vector<SafeTensor> without;
  for (const SafeTensor& t : *tensors) {
    if (t.name != "model.layers.1.mlp.up_proj.weight") without.push_back(t);
  }
  ASSERT_TRUE(write_safetensors(io::Env::posix(), dir + "/model.safetensors", without, {}).ok());
  absl::StatusOr<std::vector<float>> loaded = load_pretrained(io::Env::posix(), dir, config);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(loaded.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
  without.push_back({"model.layers.1.mlp.up_proj.weight", {24, 15}, std::vector<float>(360)});
  ASSERT_TRUE(write_safetensors(io::Env::posix(), dir + "/model.safetensors", without, {}).ok());
  loaded = load_pretrained(io::Env::posix(), dir, config);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("[24, 15]"), std::string::npos) << loaded.status();
}

// --- Against transformers' own files -------------------------------------------------------

using ::troupe::testing::reference_python;
using ::troupe::testing::shell;
using ::troupe::testing::Shell;

template <typename T>
std::vector<T> read_values(std::ifstream& in, size_t n) {
  std::vector<T> out(n);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * sizeof(T)));
  return out;
}

class SavedByTransformersTest : public PretrainedTest,
                                public ::testing::WithParamInterface<std::pair<const char*, bool>> {
};

TEST_P(SavedByTransformersTest, GivesTransformersLogitsAndLoss) {
  const std::optional<std::string> python = reference_python();
  if (!python) {
    GTEST_SKIP() << "no Python with torch, transformers and safetensors "
                    "(tests/reference/setup_reference_env.sh installs them): the comparison "
                    "with transformers is skipped";
  }
  const auto [arch, tied] = GetParam();
  const std::string dir = (dir_ / "saved").string();
  const Shell made = shell("timeout 300 '" + *python +
                           "' '" TROUPE_SOURCE_DIR "/tests/reference/hf_import_reference.py' " +
                           arch + (tied ? " 1 '" : " 0 '") + dir + "'");
  ASSERT_EQ(made.code, 0) << made.output;
  absl::StatusOr<std::optional<nn::ModelConfig>> described =
      pretrained_config(io::Env::posix(), dir);
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_TRUE(described->has_value());
  nn::ModelConfig config = **described;
  config.set_padded_vocab(64);  // troupe's padding: zero rows, outside the softmax
  absl::StatusOr<std::vector<float>> params = load_pretrained(io::Env::posix(), dir, config);
  ASSERT_TRUE(params.ok()) << params.status();
  absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::create_model(config);
  ASSERT_TRUE(model.ok()) << model.status();
  std::copy(params->begin(), params->end(), (*model)->params());

  std::ifstream tokens(dir + "/tokens.bin", std::ios::binary);
  const std::vector<int32_t> bt = read_values<int32_t>(tokens, 2);
  const int B = bt[0], T = bt[1];
  const size_t BT = static_cast<size_t>(B) * T;
  const std::vector<int32_t> inputs = read_values<int32_t>(tokens, BT);
  const std::vector<int32_t> targets = read_values<int32_t>(tokens, BT);
  std::ifstream logits_file(dir + "/logits.bin", std::ios::binary);
  const size_t V = static_cast<size_t>(config.vocab_size());
  const std::vector<float> want = read_values<float>(logits_file, BT * V);
  double want_loss = 0;
  std::ifstream(dir + "/loss.txt") >> want_loss;

  absl::StatusOr<float> loss = (*model)->forward(inputs.data(), targets.data(), B, T);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const float* got = (*model)->logits();
  const size_t Vp = static_cast<size_t>(config.padded_vocab());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < BT; ++i) {
    for (size_t v = 0; v < V; ++v) {
      max_diff = std::max(max_diff, std::abs(double(got[i * Vp + v]) - want[i * V + v]));
      max_abs = std::max(max_abs, std::abs(double(want[i * V + v])));
    }
  }
  std::printf("[ import ] %s%s: logits max |diff| %.3g of max %.3g; loss %.9g vs %.9g\n", arch,
              tied ? " tied" : "", max_diff, max_abs, double(*loss), want_loss);
  EXPECT_LE(max_diff, 1e-5 * max_abs);
  EXPECT_NEAR(*loss, want_loss, 1e-6 * std::abs(want_loss));
}

// The other way: a Llama written as troupe export writes it (hf_tensors, hf_config_json) loads in
// transformers' AutoModelForCausalLM as it is and gives troupe's logits (with its own head and
// tied; GPT-2's export is checked in tests/trainers/export_test.cc).
TEST_F(PretrainedTest, ALlamaExportLoadsInTransformersWithTroupesLogits) {
  const std::optional<std::string> python = reference_python();
  if (!python) {
    GTEST_SKIP() << "no Python with torch, transformers and safetensors: the comparison with "
                    "AutoModelForCausalLM is skipped";
  }
  for (bool tied : {false, true}) {
    nn::ModelConfig config = llama(tied);
    config.set_padded_vocab(0);  // an export holds the vocabulary's V rows
    const std::vector<float> params = parameters(config);
    const std::string dir = (dir_ / (tied ? "tied" : "untied")).string();
    write_model_dir(dir, config, params);
    absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::create_model(config);
    ASSERT_TRUE(model.ok()) << model.status();
    std::copy(params.begin(), params.end(), (*model)->params());
    const int B = 2, T = 7;
    std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>((i * 37 + 11) % 61);
    ASSERT_TRUE((*model)->forward(tokens.data(), nullptr, B, T).ok());
    std::ofstream t(dir + "/tokens.bin", std::ios::binary);
    t.write(reinterpret_cast<const char*>(&B), 4);
    t.write(reinterpret_cast<const char*>(&T), 4);
    t.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * 4));
    t.close();
    std::ofstream l(dir + "/logits.bin", std::ios::binary);
    l.write(reinterpret_cast<const char*>((*model)->logits()),
            static_cast<std::streamsize>(tokens.size() * 61 * 4));
    l.close();
    const Shell reference =
        shell("timeout 300 '" + *python +
              "' '" TROUPE_SOURCE_DIR "/tests/reference/hf_export_reference.py' '" + dir + "' '" +
              dir + "/tokens.bin' '" + dir + "/logits.bin'");
    std::printf("[ export ] Llama%s, AutoModelForCausalLM against troupe: %s\n",
                tied ? " tied" : "", reference.output.c_str());
    EXPECT_EQ(reference.code, 0) << reference.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, SavedByTransformersTest,
                         ::testing::Values(std::pair{"gpt2", true}, std::pair{"llama", false},
                                           std::pair{"llama", true}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.first) +
                                  (param_info.param.second ? "_tied" : "_untied");
                         });

}  // namespace
}  // namespace troupe::checkpoint
