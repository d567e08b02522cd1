// `troupe export` and `troupe generate --checkpoint` on a checkpoint of a
// ZeRO layout: the safetensors file holds GPT-2's names, shapes and Conv1D
// orientation, and transformers' GPT2LMHeadModel loaded from it gives
// troupe's logits (tests/reference/hf_export_reference.py; skipped, saying
// so, where PyTorch and transformers are not installed).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "nn/gpt.h"
#include "tests/checkpoint/partitioned_checkpoint.h"

namespace troupe::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr nn::GPTConfig kModel = {.max_seq_len = 12,
                                  .vocab_size = 50,
                                  .padded_vocab_size = 64,
                                  .num_layers = 2,
                                  .num_heads = 2,
                                  .channels = 16};

struct Shell {
  int code = -1;
  std::string output;
};

Shell shell(const std::string& command) {
  Shell run;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), p)) > 0)
    run.output.append(buffer, n);
  const int status = pclose(p);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// A Python with torch, transformers and safetensors, if there is one.
std::optional<std::string> reference_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TROUPE_TORCH_PYTHON"); env != nullptr && *env != '\0')
    candidates.push_back(env);
  candidates.push_back("/tmp/torchenv/bin/python");
  candidates.push_back("python3");
  for (const std::string& python : candidates) {
    const std::string probe =
        "timeout 120 '" + python + "' -c 'import torch, transformers, safetensors' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return std::nullopt;
}

// GPT-2's initialisation, then every parameter moved a little, so that the
// LayerNorms and biases matter.
std::vector<float> parameters() {
  std::vector<float> p(nn::GPTParamLayout(kModel).num_params());
  nn::GPT::init_parameters(kModel, 3, 0, p.size(), p.data());
  for (size_t i = 0; i < p.size(); ++i)
    p[i] += 0.02f * std::sin(0.37f * static_cast<float>(i));
  return p;
}

// Saves `params` as a ZeRO run over dp ranks at step `step` would.
void save(const std::string& dir, int64_t step, int dp, const std::vector<float>& params) {
  const absl::Status s = testing::save_partitioned(
      Env::posix(), dir, step, kModel, dp,
      [&](int k, int64_t i) { return k == 0 ? params[static_cast<size_t>(i)] : 0.0f; });
  ASSERT_TRUE(s.ok()) << s;
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/troupe-export-test-XXXXXX";
    ASSERT_NE(mkdtemp(path), nullptr);
    dir_ = path;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ExportTest, GPT2LMHeadModelLoadsTheExportAndGivesTroupesLogits) {
  const std::vector<float> params = parameters();
  save(dir_ + "/ckpt", 40, 3, params);
  const Shell exported = shell("'" TROUPE_BINARY "' export --checkpoint '" + dir_ +
                               "/ckpt' --output '" + dir_ + "/model.safetensors'");
  ASSERT_EQ(exported.code, 0) << exported.output;
  EXPECT_NE(exported.output.find("from " + dir_ + "/ckpt/step-00000040"), std::string::npos)
      << exported.output;

  // GPT-2's names, shapes and orientation.
  std::map<std::string, std::string> metadata;
  auto tensors = read_safetensors(Env::posix(), dir_ + "/model.safetensors", &metadata);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), 2u + 12u * 2 + 2u);
  EXPECT_EQ(metadata["format"], "pt");
  EXPECT_EQ(metadata["troupe_step"], "40");
  EXPECT_NE(metadata["config"].find("\"n_layer\":2"), std::string::npos) << metadata["config"];
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : *tensors)
    by_name[t.name] = &t;
  const int64_t C = kModel.channels;
  ASSERT_TRUE(by_name.count("transformer.wte.weight"));
  EXPECT_EQ(by_name["transformer.wte.weight"]->shape, (std::vector<int64_t>{50, C}));
  const SafeTensor* qkv = by_name["transformer.h.1.attn.c_attn.weight"];
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(qkv->shape, (std::vector<int64_t>{C, 3 * C}));
  const nn::GPTParamLayout layout(kModel);
  const float* ours = params.data() + layout.block_tensor(1, nn::BlockTensor::kQkvw);  // [3C, C]
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j < 3 * C; ++j)
      ASSERT_EQ(qkv->data[static_cast<size_t>(i * 3 * C + j)], ours[j * C + i]);
  }
  ASSERT_NE(by_name["transformer.h.0.mlp.c_proj.weight"], nullptr);
  EXPECT_EQ(by_name["transformer.h.0.mlp.c_proj.weight"]->shape, (std::vector<int64_t>{4 * C, C}));
  EXPECT_EQ(by_name.count("lm_head.weight"), 0u);  // tied to wte

  // troupe's logits on some tokens.
  const int B = 2, T = kModel.max_seq_len, V = kModel.vocab_size, Vp = kModel.padded_vocab();
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % V);
  auto model = nn::GPT::create(kModel);
  ASSERT_TRUE(model.ok());
  std::copy(params.begin(), params.end(), model->params());
  ASSERT_TRUE(model->forward(tokens.data(), nullptr, B, T).ok());
  std::vector<float> logits;
  for (int64_t row = 0; row < B * T; ++row)
    logits.insert(logits.end(), model->logits() + row * Vp, model->logits() + row * Vp + V);
  {
    std::ofstream t(dir_ + "/tokens.bin", std::ios::binary);
    t.write(reinterpret_cast<const char*>(&B), 4);
    t.write(reinterpret_cast<const char*>(&T), 4);
    t.write(reinterpret_cast<const char*>(tokens.data()),
            static_cast<std::streamsize>(tokens.size() * 4));
    std::ofstream l(dir_ + "/logits.bin", std::ios::binary);
    l.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * 4));
  }
  const std::optional<std::string> python = reference_python();
  if (!python) {
    GTEST_SKIP() << "PyTorch with transformers and safetensors is not installed "
                    "(tests/reference/setup_reference_env.sh installs them); the comparison "
                    "with GPT2LMHeadModel is skipped";
  }
  const Shell reference =
      shell("'" + *python + "' '" TROUPE_SOURCE_DIR "/tests/reference/hf_export_reference.py' '" +
            dir_ + "/model.safetensors' '" + dir_ + "/tokens.bin' '" + dir_ + "/logits.bin'");
  std::printf("[ export ] GPT2LMHeadModel against troupe: %s\n", reference.output.c_str());
  EXPECT_EQ(reference.code, 0) << reference.output;
}

TEST_F(ExportTest, GenerateSamplesFromACheckpointAndExportNamesWhatItSkips) {
  const std::vector<float> params = parameters();
  save(dir_ + "/ckpt", 10, 2, params);
  save(dir_ + "/ckpt", 20, 2, params);
  // A flipped byte in step 20's second file: both commands fall back to step 10.
  const std::string victim = step_dir(dir_ + "/ckpt", 20) + "/shard-d1.p0.t0.bin";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('\x7f');
  }
  const Shell generated = shell("'" TROUPE_BINARY "' generate --checkpoint '" + dir_ +
                                "/ckpt' --prompt '!#%' --max-tokens 4");
  ASSERT_EQ(generated.code, 0) << generated.output;
  EXPECT_NE(generated.output.find("step-00000020: shard-d1.p0.t0.bin checksum mismatch"),
            std::string::npos)
      << generated.output;
  EXPECT_NE(generated.output.find("falling back to step-00000010"), std::string::npos);
  EXPECT_NE(generated.output.find("!#%"), std::string::npos);  // byte tokens below V = 50
  const Shell exported = shell("'" TROUPE_BINARY "' export --checkpoint '" + dir_ +
                               "/ckpt' --step 20 --output '" + dir_ + "/m.safetensors'");
  EXPECT_EQ(exported.code, 1) << exported.output;
  EXPECT_NE(exported.output.find("checksum mismatch"), std::string::npos) << exported.output;
  EXPECT_FALSE(fs::exists(dir_ + "/m.safetensors"));
  const Shell usage = shell("'" TROUPE_BINARY "' export --checkpoint '" + dir_ + "/ckpt'");
  EXPECT_EQ(usage.code, 2) << usage.output;
}

}  // namespace
}  // namespace troupe::checkpoint
