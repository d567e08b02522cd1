// `troupe train`, `troupe generate` and `troupe data` as a user runs them:
// the troupe executable in a child process, its own local cluster, files in
// a scratch directory. The example run must learn its task; bad configs must
// fail fast with a message naming the problem.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/time/clock.h"

namespace {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr
};

// Runs `troupe ARGS` in `dir`; bounded by `timeout` (the child is killed after it).
Result troupe(const std::string& dir, const std::string& args, int timeout_s = 240) {
  std::string command = "cd '" + dir + "' && timeout -s KILL " + std::to_string(timeout_s) +
                        " '" TROUPE_BINARY "' " + args + " 2>&1";
  Result run;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), p)) > 0)
    run.output.append(buffer, n);
  int status = pclose(p);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An example config's text with its checkpoint section replaced by
// `checkpoint` (its JSON object). REQUIRES: the example has one.
std::string with_checkpoint(std::string config, const std::string& checkpoint) {
  const std::string key = "\"checkpoint\": {";
  const size_t at = config.find(key);
  EXPECT_NE(at, std::string::npos);
  if (at == std::string::npos) return config;
  config.replace(at, config.find('}', at) + 1 - at, "\"checkpoint\": " + checkpoint);
  return config;
}

class TrainCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/troupe-train-test-XXXXXX";
    ASSERT_NE(mkdtemp(path), nullptr);
    dir_ = path;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
};

// The README's main job: DDP over two workers on 2-digit addition.
TEST_F(TrainCommandTest, ExampleRunLearnsAdditionAndGenerates) {
  Result run =
      troupe(dir_, "train --config '" EXAMPLE_CONFIGS "/addition_ddp.json' --local 2 --output out");
  ASSERT_EQ(run.code, 0) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      run.output, m, std::regex(R"(task accuracy \(held-out addition problems\): ([0-9.]+)%)")))
      << run.output;
  EXPECT_GE(std::stod(m[1]), 90.0) << run.output;
  ASSERT_TRUE(std::regex_search(run.output, m, std::regex(R"(loss ([0-9.]+) -> ([0-9.]+))")));
  EXPECT_LT(std::stod(m[2]), std::stod(m[1]) / 3) << "the loss did not fall";
  EXPECT_NE(run.output.find("step 600/600"), std::string::npos) << run.output;

  // One metrics line per step plus the evaluations.
  std::string metrics = read("out/metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 600 + 6 + 3);  // 3 checkpoints
  EXPECT_NE(metrics.find("\"comm_exposed_ms\""), std::string::npos);
  EXPECT_NE(metrics.find("\"dp\":2,"), std::string::npos);

  Result generated = troupe(dir_, "generate --model out --prompt '07+97='");
  ASSERT_EQ(generated.code, 0) << generated.output;
  EXPECT_NE(generated.output.find("07+97=401"), std::string::npos) << generated.output;
  // Sampling narrowed to the likeliest token is greedy; without the KV cache, the same tokens.
  for (const char* flags :
       {"--temperature 0.8 --top-k 1 --seed 5", "--temperature 0.8 --top-p 0.000001",
        "--no-kv-cache", "--max-new-tokens 3"}) {
    generated = troupe(dir_, std::string("generate --model out --prompt '07+97=' ") + flags);
    ASSERT_EQ(generated.code, 0) << flags << "\n" << generated.output;
    EXPECT_NE(generated.output.find("07+97=401"), std::string::npos) << flags << "\n"
                                                                     << generated.output;
  }
}

// Bad sampling flags are refused before any model is read, each with what it takes.
TEST_F(TrainCommandTest, GenerateRefusesBadSamplingFlags) {
  const std::pair<const char*, const char*> cases[] = {
      {"--top-k -1", "--top-k -1 is not a whole number >= 0"},
      {"--top-p 0", "--top-p 0 is outside (0, 1]"},
      {"--top-p 1.5", "--top-p 1.5 is outside (0, 1]"},
      {"--top-p nan", "--top-p nan is not a finite number"},
      {"--max-new-tokens 0", "--max-new-tokens takes a number from 1 to 65536"},
      {"--max-tokens 2 --max-new-tokens 2", "--max-tokens is an alias of --max-new-tokens"},
  };
  for (const auto& [flags, message] : cases) {
    Result r = troupe(dir_, std::string("generate --model missing --prompt a ") + flags);
    EXPECT_EQ(r.code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
}

// The ZeRO-3 example learns as the DDP one does; without consolidation on
// save (DeepSpeed's default) the weights are one file per rank's partition,
// which generate joins. The summary and the metrics give each rank's memory
// and traffic.
TEST_F(TrainCommandTest, Zero3ExampleLearnsAndItsPartitionedWeightsGenerate) {
  Result run = troupe(
      dir_, "train --config '" EXAMPLE_CONFIGS "/addition_zero3.json' --local 2 --output out");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("ZeRO-3 over 2 ranks"), std::string::npos) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      run.output, m, std::regex(R"(task accuracy \(held-out addition problems\): ([0-9.]+)%)")))
      << run.output;
  EXPECT_GE(std::stod(m[1]), 90.0) << run.output;
  EXPECT_NE(run.output.find("per rank: model state"), std::string::npos) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/out/model.bin"));  // the example consolidates
  const std::string metrics = read("out/metrics.jsonl");
  EXPECT_NE(metrics.find("\"model_state\""), std::string::npos);
  EXPECT_NE(metrics.find("\"reduce_scatter\""), std::string::npos);

  std::string config = read_file(EXAMPLE_CONFIGS "/addition_zero3.json");
  const std::string consolidate = "\"stage3_gather_16bit_weights_on_model_save\": true";
  ASSERT_NE(config.find(consolidate), std::string::npos);
  config.replace(config.find(consolidate), consolidate.size(),
                 "\"stage3_gather_16bit_weights_on_model_save\": false");
  write("zero3.json", config);
  run = troupe(dir_, "train --config zero3.json --local 2 --steps 20 --output parts");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/parts/model.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/parts/model.part-0-of-2.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/parts/model.part-1-of-2.bin"));
  Result generated = troupe(dir_, "generate --model parts --prompt '07+97=' --max-tokens 3");
  EXPECT_EQ(generated.code, 0) << generated.output;
}

// Stopped after 6 steps and resumed to 12, a run ends with the weights of a
// run of 12 steps, bit for bit; the checkpoints and the resume show on the
// progress lines and in the metrics.
TEST_F(TrainCommandTest, ResumeContinuesToTheWeightsOfAnUninterruptedRun) {
  const std::string config = read_file(EXAMPLE_CONFIGS "/addition_zero3.json");
  auto with_dir = [&](const std::string& dir) {
    return with_checkpoint(config,
                           "{\"dir\": \"" + dir + "\", \"interval_steps\": 3, \"keep\": 2}");
  };
  write("a.json", with_dir("ckpt-a"));
  write("b.json", with_dir("ckpt-b"));
  Result whole = troupe(dir_, "train --config a.json --local 2 --steps 12 --output a");
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(whole.output.find("checkpoint ckpt-a/step-00000012: "), std::string::npos)
      << whole.output;
  Result first = troupe(dir_, "train --config b.json --local 2 --steps 6 --output b");
  ASSERT_EQ(first.code, 0) << first.output;
  Result resumed = troupe(dir_, "train --config b.json --local 2 --steps 12 --output b --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(
                "resumed from ckpt-b/step-00000006 (saved over dp 2 x pp 1 x tp 1, ZeRO stage 3)"),
            std::string::npos)
      << resumed.output;
  const std::string a = read("a/model.bin");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == read("b/model.bin")) << "the resumed run's weights differ";
  // Steps 1-6, then the resume and steps 7-12, each line once; the first
  // part's final evaluation and the resume are the two lines more.
  const std::string metrics = read("b/metrics.jsonl");
  const std::string whole_metrics = read("a/metrics.jsonl");
  EXPECT_NE(metrics.find("\"resumed\":{\"bytes\""), std::string::npos) << metrics;
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'),
            std::count(whole_metrics.begin(), whole_metrics.end(), '\n') + 2);
  EXPECT_NE(metrics.find("{\"checkpoint\":{\"bytes\""), std::string::npos) << metrics;
  // --resume with no checkpoint yet starts at step 1.
  write("c.json", with_dir("ckpt-c"));
  Result fresh = troupe(dir_, "train --config c.json --local 1 --steps 1 --output c --resume");
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("no checkpoint in ckpt-c yet; starting at step 1"), std::string::npos)
      << fresh.output;
}

// An interleaved run's checkpoint keeps each chunk as a stage of its own,
// and says how many chunks a stage held: the resume names the mesh as the
// config does.
TEST_F(TrainCommandTest, AnInterleavedCheckpointResumesNamingItsChunks) {
  std::string config = read_file(EXAMPLE_CONFIGS "/addition_interleaved.json");
  const std::string training_key = "\"training\": {";
  ASSERT_NE(config.find(training_key), std::string::npos);
  config.replace(config.find(training_key), training_key.size(),
                 "\"checkpoint\": {\"dir\": \"ckpt-i\", \"interval_steps\": 2, \"keep\": 1},\n  " +
                     training_key);
  write("i.json", config);
  Result first = troupe(dir_, "train --config i.json --local 2 --steps 2 --output i");
  ASSERT_EQ(first.code, 0) << first.output;
  Result resumed = troupe(dir_, "train --config i.json --local 2 --steps 3 --output i --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from ckpt-i/step-00000002 (saved over dp 2 x pp 2 (2 "
                                "chunks a stage) x tp 1, ZeRO stage 0)"),
            std::string::npos)
      << resumed.output;
}

TEST_F(TrainCommandTest, TextDatasetFromDataPrepare) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  write("a.txt", text);
  write("b.txt", text);
  Result prepared = troupe(dir_, "data prepare --output data/tinytext a.txt b.txt");
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/data/tinytext.bin"));
  Result run = troupe(
      dir_, "train --config '" EXAMPLE_CONFIGS "/text_ddp.json' --local 2 --steps 4 --output out");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("step 4/4"), std::string::npos) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/out/model.bin"));
}

// Real text with GPT-2's BPE: a validation split, MFU on the progress line, the best checkpoint
// kept, and the tokenizer travelling with the weights into troupe generate (which refuses another).
TEST_F(TrainCommandTest, BpeTextValidatesAndGeneratesWithItsOwnTokenizer) {
  const char* env = std::getenv("TROUPE_DATA");
  const std::string gpt2 =
      (env != nullptr && *env != '\0' ? std::string(env) : std::string(TROUPE_SOURCE_DIR "/data")) +
      "/tokenizers/gpt2";
  if (!std::filesystem::exists(gpt2 + "/vocab.bpe")) {
    GTEST_SKIP() << "GPT-2's files are not in " << gpt2 << ": scripts/fetch_text.sh fetches them";
  }
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "The quick brown fox jumps over the lazy dog, " + std::to_string(i) + " times.\n";
  write("a.txt", text);
  write("b.txt", text.substr(0, 2000));
  Result prepared = troupe(dir_, "data prepare --tokenizer gpt2:'" + gpt2 +
                                     "' --val-files b.txt --output data/fox a.txt b.txt");
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  write("bpe.json", R"({
    "train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 50257},
    "data": {"path": "data/fox", "val_path": "data/fox_val"},
    "checkpoint": {"dir": "ckpt", "keep": 1, "keep_best": true},
    "training": {"steps": 6, "eval_interval": 3, "output_dir": "out"}})");
  Result run = troupe(dir_, "train bpe.json --local 1");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("val at step 3: loss"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("bits/byte"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("MFU"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("model FLOPs"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("validation loss"), std::string::npos) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/best"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/tokenizer/vocab.bpe"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/out/tokenizer/encoder.json"));
  EXPECT_NE(read("out/model.json").find("\"tokenizer\": \"gpt2-"), std::string::npos)
      << read("out/model.json");
  EXPECT_NE(read("out/metrics.jsonl").find("\"mfu\""), std::string::npos);
  EXPECT_NE(read("out/metrics.jsonl").find("\"val\""), std::string::npos);

  Result generated = troupe(dir_, "generate --model out --prompt 'The quick' --max-new-tokens 4");
  ASSERT_EQ(generated.code, 0) << generated.output;
  EXPECT_EQ(generated.output.rfind("The quick", 0), 0u) << generated.output;
  Result from_checkpoint =
      troupe(dir_, "generate --checkpoint ckpt --prompt 'The quick' --max-new-tokens 4");
  EXPECT_EQ(from_checkpoint.code, 0) << from_checkpoint.output;
  Result bytes = troupe(dir_, "generate --model out --prompt 'The quick' --tokenizer bytes");
  EXPECT_EQ(bytes.code, 1) << bytes.output;
  EXPECT_NE(bytes.output.find("trained with tokenizer gpt2-"), std::string::npos) << bytes.output;
  // A vocabulary altered beside the weights is refused, naming where.
  std::ofstream(dir_ + "/out/tokenizer/vocab.bpe", std::ios::app) << "x y\n";
  Result altered = troupe(dir_, "generate --model out --prompt 'The quick'");
  EXPECT_EQ(altered.code, 1) << altered.output;
  EXPECT_NE(altered.output.find("out/tokenizer"), std::string::npos) << altered.output;
}

TEST_F(TrainCommandTest, UnknownKeyFailsNamingIt) {
  std::string config = write("bad.json", R"({"train_batch_size": 8, "model": {"n_layers": 2},
    "data": {"synthetic": {"task": "addition"}}})");
  Result run = troupe(dir_, "train --config bad.json --local 1", 30);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("model.n_layers"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("starting a local cluster"), std::string::npos) << "not fast";
}

TEST_F(TrainCommandTest, InconsistentBatchSizesFailNamingTheNumbers) {
  write("bad.json", R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 2, "parallel": {"dp": 3},
    "data": {"synthetic": {"task": "addition"}}})");
  Result run = troupe(dir_, "train --config bad.json --local 1", 30);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("train_batch_size 64"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("96"), std::string::npos) << run.output;
}

TEST_F(TrainCommandTest, AControlCharacterInTheConfigIsShownNotObeyed) {
  // A NUL in a key ended the printed message there; now it shows as \x00.
  write("bad.json", R"({"train_batch_size": 8, "tr\u0000ining": {}})");
  Result run = troupe(dir_, "train --config bad.json --local 1", 30);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("tr\\x00ining"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("unknown key"), std::string::npos) << run.output;
}

TEST_F(TrainCommandTest, MissingDatasetFailsNamingIt) {
  write("bad.json", R"({"train_batch_size": 8, "data": {"path": "nowhere/tokens"}})");
  Result run = troupe(dir_, "train --config bad.json --local 1", 30);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("nowhere/tokens"), std::string::npos) << run.output;
}

TEST_F(TrainCommandTest, MissingConfigFileAndFlags) {
  Result run = troupe(dir_, "train --config nope.json --local 1", 30);
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find("nope.json"), std::string::npos) << run.output;
  Result no_cluster = troupe(dir_, "train --config '" EXAMPLE_CONFIGS "/addition_ddp.json'", 30);
  EXPECT_EQ(no_cluster.code, 2) << no_cluster.output;
  EXPECT_NE(no_cluster.output.find("--local"), std::string::npos) << no_cluster.output;
}

// `troupe train CONFIG.json`, as docs/config.md writes it; --steps that cuts
// the scheduler's decay short is warned about, naming both.
TEST_F(TrainCommandTest, TheConfigAsTheFirstArgumentAndAStepsMismatchWarned) {
  Result run = troupe(
      dir_, "train '" EXAMPLE_CONFIGS "/addition_single.json' --local 1 --steps 2 --output out");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("step 2/2"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("warning: the run trains 2 steps (training.steps or --steps) but the "
                            "scheduler's total_num_steps is 600"),
            std::string::npos)
      << run.output;
  Result twice = troupe(dir_, "train a.json --config b.json --local 1", 30);
  EXPECT_EQ(twice.code, 2) << twice.output;
  EXPECT_NE(twice.output.find("the config is given twice"), std::string::npos) << twice.output;
  Result none = troupe(dir_, "train --local 1", 30);
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("a config is required"), std::string::npos) << none.output;
}

// Ctrl-C at the terminal - SIGINT to the run's whole process group, as a
// terminal sends it: the run stops after the step in flight, checkpoints it,
// says how to resume, stops its local cluster and exits 130; the resume ends
// with the weights of a run that was never interrupted.
TEST_F(TrainCommandTest, CtrlCCheckpointsAndTheResumeEndsAsAnUninterruptedRun) {
  const std::string config = read_file(EXAMPLE_CONFIGS "/addition_ddp.json");
  auto with_dir = [&](const std::string& dir) {
    std::string c = with_checkpoint(config, "{\"dir\": \"" + dir + "\", \"interval_steps\": 1000}");
    const size_t print = c.find("\"steps_per_print\": 20");
    if (print != std::string::npos) c.replace(print, 21, "\"steps_per_print\": 1");
    return c;
  };
  write("a.json", with_dir("ckpt-a"));
  write("b.json", with_dir("ckpt-b"));
  // The run, in a session of its own (its pid is its process group's), its
  // output in b.log.
  const std::string log = dir_ + "/b.log";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setsid();
    if (::chdir(dir_.c_str()) != 0) ::_exit(126);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(TROUPE_BINARY, TROUPE_BINARY, "train", "b.json", "--local", "2", "--steps", "5000",
            "--output", "b", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // A few steps in (bounded: 240 s), the terminal's Ctrl-C.
  bool stepping = false;
  for (int i = 0; i < 4800 && !stepping; ++i) {
    stepping = read_file(log).find("step    5/5000") != std::string::npos;
    if (!stepping) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(stepping) << read_file(log);
  ASSERT_EQ(::kill(-pid, SIGINT), 0);
  int status = 0;
  for (int i = 0; i < 2400 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
    absl::SleepFor(absl::Milliseconds(50));
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the run did not stop within 120 s of Ctrl-C:\n" << read_file(log);
  }
  const std::string output = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 130) << output;
  std::smatch at;
  ASSERT_TRUE(std::regex_search(output, at, std::regex("interrupted after step ([0-9]+) of 5000")))
      << output;
  const std::string stopped = at[1];
  EXPECT_NE(output.find("stopping after the step in flight"), std::string::npos) << output;
  EXPECT_NE(output.find("checkpoint ckpt-b/step-" + std::string(8 - stopped.size(), '0') + stopped),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("troupe train b.json --local 2 --steps 5000 --output b --resume"),
            std::string::npos)
      << output;
  // Its local cluster stopped in order: no state directory is left.
  for (const auto& entry : std::filesystem::directory_iterator("/tmp")) {
    EXPECT_FALSE(
        entry.path().filename().string().starts_with("troupe-local-" + std::to_string(pid) + "-"))
        << entry.path();
  }
  // Resumed to a few steps more, it ends where a run never interrupted does.
  const std::string end = std::to_string(std::stoi(stopped) + 3);
  Result resumed = troupe(dir_, "train b.json --local 2 --steps " + end + " --output b --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from ckpt-b/step-"), std::string::npos) << resumed.output;
  Result whole = troupe(dir_, "train a.json --local 2 --steps " + end + " --output a");
  ASSERT_EQ(whole.code, 0) << whole.output;
  const std::string a = read("a/model.bin");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == read("b/model.bin")) << "the resumed run's weights differ";
}

TEST_F(TrainCommandTest, ADatasetTruncatedDuringTrainingFailsTheRunAtOnceNamingIt) {
  // The dataset is overwritten under a running job: its workers must not die
  // of SIGBUS, and the job must fail within a few steps saying why - not wait
  // out a collective's one-minute timeout on the rank whose read failed last.
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  write("a.txt", text);
  Result prepared = troupe(dir_, "data prepare --output data/tinytext a.txt");
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  write("small.json", R"({
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 256},
    "data": {"path": "data/tinytext", "shuffle": true},
    "parallel": {"dp": 2},
    "training": {"steps": 100000, "log_interval": 1000}
  })");
  Result run;
  std::thread train(
      [&] { run = troupe(dir_, "train --config small.json --local 2 --output out", 180); });
  // Once it trains, cut the tokens file down to a few samples.
  absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (absl::Now() < deadline && read("out/metrics.jsonl").size() < 1000)
    absl::SleepFor(absl::Milliseconds(50));
  absl::Time truncated = absl::Now();
  std::filesystem::resize_file(dir_ + "/data/tinytext.bin", 256);
  train.join();
  absl::Duration took = absl::Now() - truncated;
  EXPECT_NE(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("tinytext.bin: ends before token"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("truncated or replaced while in use"), std::string::npos) << run.output;
  EXPECT_LT(took, absl::Seconds(30)) << run.output;
}

// A metrics file that cannot be written costs the metrics, not the run: on a
// tmpfs that fills up during training, the run goes on, saves its final
// weights, says where the metrics stopped, and exits non-zero.
class TrainReliabilityTest : public TrainCommandTest {
 protected:
  void TearDown() override {
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
    TrainCommandTest::TearDown();
  }
  // A tmpfs of `bytes` at `name` in the scratch directory; false if this
  // process may not mount one (not root).
  bool mount_tmpfs(const std::string& name, size_t bytes) {
    std::string at = dir_ + "/" + name;
    std::filesystem::create_directories(at);
    std::string size = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, size.c_str()) != 0) return false;
    mounted_ = at;
    return true;
  }
  std::string mounted_;
};

// The same without root: /dev/full takes the open and fails every write.
TEST_F(TrainReliabilityTest, AMetricsFileThatFailsEveryWriteCostsOnlyTheMetrics) {
  Result run = troupe(dir_,
                      "train --config '" EXAMPLE_CONFIGS
                      "/addition_single.json' --local 1 --steps 3 --output out "
                      "--metrics /dev/full",
                      120);
  EXPECT_NE(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("writing the metrics failed at step 1: /dev/full: No space left on "
                            "device; training goes on without them"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("step 3/3"), std::string::npos) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/out/model.bin")) << run.output;
}

TEST_F(TrainReliabilityTest, AFullMetricsDiskCostsTheMetricsNotTheRun) {
  if (!mount_tmpfs("small", 64 << 10)) GTEST_SKIP() << "mounting a tmpfs needs root";
  // Fill it but for one page: a few steps' lines fit, then every write fails.
  {
    std::ofstream fill(dir_ + "/small/fill", std::ios::binary);
    std::string page(4096, 'x');
    for (int i = 0; i < 15; ++i)
      fill << page;
  }
  Result run = troupe(dir_,
                      "train --config '" EXAMPLE_CONFIGS
                      "/addition_single.json' --local 1 --steps 40 --output out "
                      "--metrics small/metrics.jsonl",
                      180);
  EXPECT_NE(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("writing the metrics failed at step"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("No space left on device; training goes on without them"),
            std::string::npos)
      << run.output;
  // Training went on to the end and saved its weights.
  EXPECT_NE(run.output.find("step 40/40"), std::string::npos) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/out/model.json")) << run.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/out/model.bin")) << run.output;
  EXPECT_NE(run.output.find("the weights are saved, but the metrics are incomplete"),
            std::string::npos)
      << run.output;
  // What was written before the disk filled up is whole lines.
  std::string metrics = read("small/metrics.jsonl");
  EXPECT_FALSE(metrics.empty());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m, std::regex(R"(failed at step ([0-9]+))")));
  EXPECT_GT(std::stoi(m[1]), 1) << "the first steps' lines fit";
  EXPECT_LT(std::stoi(m[1]), 40) << "the disk filled up during training";
}

}  // namespace
