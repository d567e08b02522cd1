// `troupe export` and `troupe generate --checkpoint` on a checkpoint of a
// ZeRO layout: the model directory's model.safetensors holds GPT-2's names,
// shapes and Conv1D orientation beside its config.json (or one .safetensors
// file holds both), and transformers' AutoModelForCausalLM loaded from the
// directory as it is gives troupe's logits
// (tests/reference/hf_export_reference.py; skipped, saying so, where PyTorch
// and transformers are not installed).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "nn/gpt2/layout.h"
#include "nn/model/hf.h"
#include "nn/model/model.h"
#include "tests/checkpoint/partitioned_checkpoint.h"
#include "tests/reference/reference_python.h"
#include "text/tokenizer.h"
#include "text/tokenizer_files.h"
#include "trainers/export_tokenizer.h"

namespace troupe::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr nn::ModelConfig kModel = nn::GPTConfig{.max_seq_len = 12,
                                                 .vocab_size = 50,
                                                 .padded_vocab_size = 64,
                                                 .num_layers = 2,
                                                 .num_heads = 2,
                                                 .channels = 16};

using ::troupe::testing::reference_python;
using ::troupe::testing::shell;
using ::troupe::testing::Shell;

// GPT-2's initialisation, then every parameter moved a little, so that the
// LayerNorms and biases matter.
std::vector<float> parameters() {
  std::vector<float> p(nn::model_layout(kModel).num_params());
  nn::init_parameters(kModel, {}, 3, 0, p.size(), p.data());
  for (size_t i = 0; i < p.size(); ++i)
    p[i] += 0.02f * std::sin(0.37f * static_cast<float>(i));
  return p;
}

// Saves `params` as a ZeRO run over dp ranks at step `step` would.
void save(const std::string& dir, int64_t step, int dp, const std::vector<float>& params) {
  const absl::Status s = testing::save_partitioned(
      io::Env::posix(), dir, step, kModel, dp,
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

TEST_F(ExportTest, AutoModelForCausalLMLoadsTheExportAndGivesTroupesLogits) {
  const std::vector<float> params = parameters();
  save(dir_ + "/ckpt", 40, 3, params);
  const std::string out = dir_ + "/model";
  const Shell exported =
      shell("'" TROUPE_BINARY "' export --checkpoint '" + dir_ + "/ckpt' --output '" + out + "'");
  ASSERT_EQ(exported.code, 0) << exported.output;
  EXPECT_NE(exported.output.find("from " + dir_ + "/ckpt/step-00000040"), std::string::npos)
      << exported.output;

  // config.json as save_pretrained writes it.
  absl::StatusOr<std::string> config_text = io::Env::posix()->read_file(out + "/config.json");
  ASSERT_TRUE(config_text.ok()) << config_text.status();
  const nlohmann::json config = nlohmann::json::parse(*config_text, nullptr, false);
  ASSERT_FALSE(config.is_discarded()) << *config_text;
  EXPECT_EQ(config.value("model_type", ""), "gpt2") << *config_text;
  EXPECT_EQ(config.value("n_layer", 0), 2) << *config_text;
  EXPECT_EQ(config.value("vocab_size", 0), 50) << *config_text;
  EXPECT_EQ(*config_text, nn::hf_config_json(kModel).dump(2) + "\n");
  absl::StatusOr<nn::ModelConfig> back = nn::model_config_from_hf(config);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpt2()->channels, kModel.gpt2()->channels);

  // GPT-2's names, shapes and orientation.
  std::map<std::string, std::string> metadata;
  auto tensors = read_safetensors(io::Env::posix(), out + "/model.safetensors", &metadata);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), 2u + 12u * 2 + 2u);
  EXPECT_EQ(metadata["format"], "pt");
  EXPECT_EQ(metadata["troupe_step"], "40");
  EXPECT_EQ(metadata.count("config"), 0u) << "config.json holds it";
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : *tensors)
    by_name[t.name] = &t;
  const int64_t C = kModel.hidden_size();
  ASSERT_TRUE(by_name.count("transformer.wte.weight"));
  EXPECT_EQ(by_name["transformer.wte.weight"]->shape, (std::vector<int64_t>{50, C}));
  const SafeTensor* qkv = by_name["transformer.h.1.attn.c_attn.weight"];
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(qkv->shape, (std::vector<int64_t>{C, 3 * C}));
  const nn::GPTParamLayout layout(*kModel.gpt2());
  const float* ours = params.data() + layout.block_tensor(1, nn::BlockTensor::kQkvw);  // [3C, C]
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j < 3 * C; ++j)
      ASSERT_EQ(qkv->data[static_cast<size_t>(i * 3 * C + j)], ours[j * C + i]);
  }
  ASSERT_NE(by_name["transformer.h.0.mlp.c_proj.weight"], nullptr);
  EXPECT_EQ(by_name["transformer.h.0.mlp.c_proj.weight"]->shape, (std::vector<int64_t>{4 * C, C}));
  EXPECT_EQ(by_name.count("lm_head.weight"), 0u);  // tied to wte

  // An --output ending in .safetensors: one file, the same tensors, config.json's text in its
  // metadata.
  const Shell one = shell("'" TROUPE_BINARY "' export --checkpoint '" + dir_ + "/ckpt' --output '" +
                          dir_ + "/model.safetensors'");
  ASSERT_EQ(one.code, 0) << one.output;
  std::map<std::string, std::string> one_metadata;
  auto one_tensors = read_safetensors(io::Env::posix(), dir_ + "/model.safetensors", &one_metadata);
  ASSERT_TRUE(one_tensors.ok()) << one_tensors.status();
  EXPECT_EQ(one_metadata["format"], "pt");
  EXPECT_EQ(one_metadata["troupe_step"], "40");
  EXPECT_EQ(one_metadata["config"], *config_text);
  ASSERT_EQ(one_tensors->size(), tensors->size());
  for (size_t i = 0; i < tensors->size(); ++i) {
    EXPECT_EQ((*one_tensors)[i].name, (*tensors)[i].name);
    EXPECT_EQ((*one_tensors)[i].shape, (*tensors)[i].shape);
    EXPECT_EQ((*one_tensors)[i].data, (*tensors)[i].data) << (*tensors)[i].name;
  }
  EXPECT_FALSE(fs::exists(dir_ + "/model.safetensors.tmp"));

  // troupe's logits on some tokens.
  const int B = 2, T = kModel.max_seq_len(), V = kModel.vocab_size(), Vp = kModel.padded_vocab();
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % V);
  absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::create_model(kModel);
  ASSERT_TRUE(model.ok()) << model.status();
  std::copy(params.begin(), params.end(), (*model)->params());
  ASSERT_TRUE((*model)->forward(tokens.data(), nullptr, B, T).ok());
  std::vector<float> logits;
  const float* all = (*model)->logits();
  for (int64_t row = 0; row < B * T; ++row)
    logits.insert(logits.end(), all + row * Vp, all + row * Vp + V);
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
                    "with AutoModelForCausalLM is skipped";
  }
  const Shell reference =
      shell("'" + *python + "' '" TROUPE_SOURCE_DIR "/tests/reference/hf_export_reference.py' '" +
            out + "' '" + dir_ + "/tokens.bin' '" + dir_ + "/logits.bin'");
  std::printf("[ export ] AutoModelForCausalLM against troupe: %s\n", reference.output.c_str());
  EXPECT_EQ(reference.code, 0) << reference.output;
}

// The tokenizer the model was trained with goes beside the exported weights, under the names
// AutoTokenizer reads, and gives the same ids there.
TEST_F(ExportTest, TheTokenizerGoesWithTheWeightsAsAutoTokenizerReadsIt) {
  const char* env = std::getenv("TROUPE_DATA");
  const std::string gpt2 =
      (env != nullptr && *env != '\0' ? std::string(env) : std::string(TROUPE_SOURCE_DIR "/data")) +
      "/tokenizers/gpt2";
  if (!fs::exists(gpt2 + "/vocab.bpe")) {
    GTEST_SKIP() << "GPT-2's files are not in " << gpt2 << ": scripts/fetch_text.sh fetches them";
  }
  auto tok = text::open_tokenizer("gpt2:" + gpt2);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE(text::save_tokenizer(**tok, dir_ + "/ckpt/tokenizer").ok());
  const std::string out = dir_ + "/model";
  fs::create_directories(out);
  auto allow = [](const std::string&) { return absl::OkStatus(); };
  auto files = trainers::export_tokenizer(dir_ + "/ckpt/tokenizer", (*tok)->id(), 64, out, allow);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files,
            (std::vector<std::string>{"vocab.json", "merges.txt", "tokenizer_config.json"}));
  absl::StatusOr<std::string> config = io::Env::posix()->read_file(out + "/tokenizer_config.json");
  ASSERT_TRUE(config.ok());
  const nlohmann::json c = nlohmann::json::parse(*config);
  EXPECT_EQ(c.value("tokenizer_class", ""), "GPT2Tokenizer");
  EXPECT_EQ(c.value("eos_token", ""), "<|endoftext|>");
  EXPECT_EQ(c.value("troupe_tokenizer", ""), (*tok)->id());
  // Another vocabulary than the checkpoint records is refused, and nothing of it written.
  auto other = trainers::export_tokenizer(dir_ + "/ckpt/tokenizer", "gpt2-0000000000", 64,
                                          dir_ + "/other", allow);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(dir_ + "/other/vocab.json"));

  const std::optional<std::string> python = reference_python();
  if (!python) GTEST_SKIP() << "transformers is not installed: AutoTokenizer is not checked";
  const std::string text = "To be, or not to be: that is the question.";
  std::string ours;
  for (int32_t id : (*tok)->encode(text))
    ours += (ours.empty() ? "" : ",") + std::to_string(id);
  const Shell hf = shell("'" + *python +
                         "' -c 'import sys; from transformers import AutoTokenizer; "
                         "t = AutoTokenizer.from_pretrained(sys.argv[1]); "
                         "print(\",\".join(map(str, t(sys.argv[2])[\"input_ids\"])))' '" +
                         out + "' '" + text + "' 2>&1");
  ASSERT_EQ(hf.code, 0) << hf.output;
  EXPECT_NE(hf.output.find(ours), std::string::npos) << hf.output << " vs " << ours;
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

// What a probe of the running system found (also `ctest -L reliability`):
// export renamed its file over whatever --output named, a device node or a
// shard of the checkpoint it read. Now only a new path or a directory (a
// model directory), or a new path or a regular file (one .safetensors file),
// outside the checkpoint directory is written; anything else is refused,
// saying why, and nothing changes.
class ExportReliabilityTest : public ExportTest {
 protected:
  // Every file under `root`, and its bytes.
  static std::map<std::string, std::string> contents(const std::string& root) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) files[e.path().string()] = *io::Env::posix()->read_file(e.path());
    }
    return files;
  }
  Shell export_to(const std::string& output) const {
    return shell("'" TROUPE_BINARY "' export --checkpoint '" + dir_ + "/ckpt' --output '" + output +
                 "'");
  }
  // The export is refused (exit 2) with `why` in its message.
  void expect_refused(const std::string& output, const std::string& why) const {
    const Shell run = export_to(output);
    EXPECT_EQ(run.code, 2) << output << ": " << run.output;
    EXPECT_NE(run.output.find("troupe export: "), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(why), std::string::npos) << output << ": " << run.output;
    EXPECT_EQ(run.output.find("wrote "), std::string::npos) << run.output;
  }
};

TEST_F(ExportReliabilityTest, NeverWritesOverADeviceADirectoryOrALink) {
  save(dir_ + "/ckpt", 40, 2, parameters());
  // Device nodes made here (as root: a character device like /dev/null's,
  // 1:3), so that nothing real is at stake, and FIFOs (any user): one where
  // a model directory goes, one where a .safetensors file goes.
  const std::string device = dir_ + "/null";
  const std::string device_file = dir_ + "/null.safetensors";
  const bool have_device = ::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0 &&
                           ::mknod(device_file.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  const std::string fifo = dir_ + "/fifo";
  const std::string fifo_file = dir_ + "/fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo(fifo_file.c_str(), 0644), 0);
  if (have_device) {
    expect_refused(device, "--output " + device +
                               " is a character device; it takes a model directory (or a path "
                               "ending in .safetensors for one file)");
    expect_refused(device_file, "--output " + device_file +
                                    " is a character device; export writes only a regular file "
                                    "or a new path");
    for (const std::string& node : {device, device_file}) {
      struct stat st = {};
      ASSERT_EQ(::lstat(node.c_str(), &st), 0);
      EXPECT_TRUE(S_ISCHR(st.st_mode));
      EXPECT_EQ(st.st_rdev, makedev(1, 3));
    }
  } else {
    std::printf("[ export ] cannot make a device node here (not root?): a FIFO stands for it\n");
  }
  expect_refused(fifo, "is a FIFO");
  expect_refused(fifo_file, "is a FIFO");
  for (const std::string& node : {fifo, fifo_file}) {
    struct stat st = {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
  }
  // /dev/null itself is only looked at (the refusal comes before anything is
  // written): it stays the device. (Tried only once the nodes made here were
  // refused: an export that wrote over them would replace it too.)
  ASSERT_FALSE(HasFailure()) << "not trying /dev/null";
  expect_refused("/dev/null", "is a character device");
  struct stat st = {};
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A directory where the .safetensors file goes, and a path ending in '/'
  // there; a regular file where the model directory goes.
  fs::create_directories(dir_ + "/out.safetensors");
  expect_refused(dir_ + "/out.safetensors", "is a directory");
  EXPECT_TRUE(fs::is_empty(dir_ + "/out.safetensors"));
  std::ofstream(dir_ + "/target") << "keep me";
  expect_refused(dir_ + "/target",
                 "--output " + dir_ + "/target is a regular file; it takes a model directory");
  EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/target"), "keep me");
  // In a model directory, its files are held to the same: a directory where
  // model.safetensors goes is refused, and nothing is written beside it.
  fs::create_directories(dir_ + "/model/model.safetensors");
  expect_refused(dir_ + "/model", "model.safetensors is a directory");
  EXPECT_FALSE(fs::exists(dir_ + "/model/config.json"));
  // A symbolic link (to a file, to a directory, or dangling) is refused, not
  // followed or replaced: the link and its target stay as they were.
  fs::create_symlink(dir_ + "/target", dir_ + "/link.safetensors");
  expect_refused(dir_ + "/link.safetensors", "is a symbolic link to " + dir_ + "/target");
  EXPECT_TRUE(fs::is_symlink(dir_ + "/link.safetensors"));
  EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/target"), "keep me");
  fs::create_directories(dir_ + "/elsewhere");
  fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/link");
  expect_refused(dir_ + "/link", "--output " + dir_ + "/link is a symbolic link");
  EXPECT_TRUE(fs::is_symlink(dir_ + "/link"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere"));
  fs::create_symlink(dir_ + "/nowhere", dir_ + "/dangling");
  expect_refused(dir_ + "/dangling", "is a symbolic link");
  fs::create_symlink(dir_ + "/nowhere.safetensors", dir_ + "/dangling.safetensors");
  expect_refused(dir_ + "/dangling.safetensors", "is a symbolic link");
  EXPECT_FALSE(fs::exists(dir_ + "/nowhere"));
  EXPECT_FALSE(fs::exists(dir_ + "/nowhere.safetensors"));
  // An empty --output.
  expect_refused("", "--output is empty: it takes the model directory to write");
  // The temporary file's name taken by something not a regular file.
  fs::create_directories(dir_ + "/m.safetensors.tmp");
  expect_refused(dir_ + "/m.safetensors", "m.safetensors.tmp, where export writes");
  EXPECT_FALSE(fs::exists(dir_ + "/m.safetensors"));
  // A regular file is replaced; a stale temporary file linked to another
  // file is unlinked, not written through.
  std::ofstream(dir_ + "/model.safetensors") << "old";
  std::ofstream(dir_ + "/precious") << "precious";
  fs::create_hard_link(dir_ + "/precious", dir_ + "/model.safetensors.tmp");
  const Shell ok = export_to(dir_ + "/model.safetensors");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(read_safetensors(io::Env::posix(), dir_ + "/model.safetensors", nullptr).ok());
  EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/precious"), "precious");
  EXPECT_FALSE(fs::exists(dir_ + "/model.safetensors.tmp"));
  // An existing directory (and a path ending in '/') takes the model; an
  // earlier export's files in it are replaced.
  fs::create_directories(dir_ + "/out");
  std::ofstream(dir_ + "/out/config.json") << "old";
  for (const std::string& out : {dir_ + "/out", dir_ + "/new/"}) {
    const Shell wrote = export_to(out);
    EXPECT_EQ(wrote.code, 0) << out << ": " << wrote.output;
    EXPECT_TRUE(read_safetensors(io::Env::posix(), out + "/model.safetensors", nullptr).ok())
        << out;
    EXPECT_NE(*io::Env::posix()->read_file(out + "/config.json"), "old") << out;
  }
}

TEST_F(ExportReliabilityTest, NeverWritesInsideTheCheckpointItReads) {
  const std::string ckpt = dir_ + "/ckpt";
  save(ckpt, 40, 2, parameters());
  const std::map<std::string, std::string> before = contents(ckpt);
  const std::string step = step_dir(ckpt, 40);
  const std::string inside = "is inside the checkpoint directory " + ckpt;
  // A shard of the checkpoint, `latest`, its manifest, a new file in it or
  // in a new directory under it.
  expect_refused(step + "/shard-d0.p0.t0.bin", inside);
  expect_refused(ckpt + "/latest", inside);
  expect_refused(step + "/manifest.json", inside);
  expect_refused(ckpt + "/model.safetensors", inside);
  expect_refused(step + "/sub/model.safetensors", inside);
  // As a model directory: the checkpoint's, a step's, a new one in either.
  expect_refused(ckpt, inside);
  expect_refused(step, inside);
  expect_refused(ckpt + "/hf", inside);
  expect_refused(step + "/sub/hf", inside);
  // The same places by other names: through "..", and through a symbolic
  // link to a directory of the checkpoint.
  expect_refused(step + "/../step-00000040/shard-d1.p0.t0.bin", inside);
  fs::create_directory_symlink(step, dir_ + "/alias");
  expect_refused(dir_ + "/alias/shard-d1.p0.t0.bin", inside);
  // Nothing changed: the files byte for byte, and it still verifies.
  EXPECT_EQ(contents(ckpt), before);
  EXPECT_TRUE(verify_checkpoint(io::Env::posix(), ckpt, 40).ok());
  EXPECT_FALSE(fs::exists(ckpt + "/hf"));
  EXPECT_FALSE(fs::exists(step + "/sub"));
  // Beside it is fine.
  const Shell ok = export_to(dir_ + "/model.safetensors");
  EXPECT_EQ(ok.code, 0) << ok.output;
  const Shell ok_dir = export_to(dir_ + "/model");
  EXPECT_EQ(ok_dir.code, 0) << ok_dir.output;
  EXPECT_EQ(contents(ckpt), before);
}

}  // namespace
}  // namespace troupe::checkpoint
