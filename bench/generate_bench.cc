// Generation benchmark: greedy decoding with troupe's KV cache, without it, and transformers'
// generate on the same model, prompt and thread count, side by side in one invocation.
//
//   generate_bench [--configs gpt-12M,llama-12M] [--threads N] [--new-tokens 128]
//                  [--prompt-tokens 16] [--warmup 1] [--repeat 3] [--json FILE] [--no-peer]
//
// Each config is a model troupe creates and initialises (seed 1337), exported in Hugging Face's
// format (nn/model/hf.h: config.json and model.safetensors, what `troupe export` writes) to a
// scratch directory. The prompt is the same --prompt-tokens ids on both sides. troupe runs
// actors::generate_tokens (greedy, no stop token) with the cache and without it (the full
// forward per token); the peer (bench/generate_bench_peer.py) loads the directory with
// AutoModelForCausalLM.from_pretrained and runs generate(do_sample=False, max_new_tokens=N,
// use_cache=True), with torch.set_num_threads(N). tokens/s = N new tokens / the wall time of one
// whole call (prefill included); --warmup calls, then the median of --repeat. The new tokens of
// the cached run must equal the uncached run's and transformers' (a mismatch is reported, with
// its first position, and makes the exit status 1). Goal: cached >= 2x transformers.
//
// The peer runs with the first python that can import torch (bench_util.h's find_torch_python),
// after troupe's runs of the config (never at the same time); without torch or transformers it
// is skipped with a message. troupe runs as its worker processes do (bench/compute_env.h).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/generation.h"
#include "bench/bench_fail.h"
#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "checkpoint/safetensors.h"
#include "core/io/env.h"
#include "nn/gemm.h"
#include "nn/model/hf.h"
#include "nn/model/model.h"
#include "nn/threads.h"

#ifndef TROUPE_GENERATE_BENCH_PEER_SCRIPT
#define TROUPE_GENERATE_BENCH_PEER_SCRIPT "bench/generate_bench_peer.py"
#endif

namespace troupe::bench {
namespace {

struct Config {
  std::string name;
  nn::ModelConfig model;
};

nn::ModelConfig gpt(int L, int C, int NH, int V, int T) {
  nn::GPTConfig c;
  c.max_seq_len = T;
  c.vocab_size = V;
  c.num_layers = L;
  c.num_heads = NH;
  c.channels = C;
  return c;
}

nn::ModelConfig llama(int L, int C, int NH, int KV, int I, int V, int T) {
  nn::LlamaConfig c;
  c.vocab_size = V;
  c.hidden_size = C;
  c.intermediate_size = I;
  c.num_hidden_layers = L;
  c.num_attention_heads = NH;
  c.num_key_value_heads = KV;
  c.max_position_embeddings = T;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  return c;
}

// gpt_bench's 12M models (64-channel heads, grouped KV heads for Llama) with room for a prompt
// and 128 new tokens and more; the tiny ones for CI's smoke test.
const std::vector<Config>& all_configs() {
  static const std::vector<Config> configs = {
      {"gpt-12M", gpt(6, 384, 6, 4096, 512)},
      {"llama-12M", llama(6, 384, 6, 3, 1024, 4096, 512)},
      {"gpt-tiny", gpt(2, 64, 4, 256, 64)},
      {"llama-tiny", llama(2, 64, 4, 2, 192, 256, 64)},
  };
  return configs;
}
constexpr const char* kDefaultConfigs = "gpt-12M,llama-12M";

struct Timed {
  double tokens_per_s = 0;
  std::vector<int32_t> ids;
};

Timed run_troupe(nn::Model& model, const std::vector<int32_t>& prompt, int new_tokens, bool cache,
                 int warmup, int repeat) {
  const actors::GenerateOptions options{
      .max_new_tokens = new_tokens, .stop_token = -1, .use_kv_cache = cache};
  auto call = [&](std::vector<int32_t>* ids) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> out =
        value_or_die(actors::generate_tokens(model, {prompt}, options), "generate_tokens");
    const double s = seconds_since(start);
    *ids = out[0];
    return s;
  };
  Timed result;
  for (int i = 0; i < warmup; ++i)
    call(&result.ids);
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i)
    times.push_back(call(&result.ids));
  result.tokens_per_s = new_tokens / median(times);
  return result;
}

// The model's weights as a Hugging Face directory `dir`.
void export_model(const nn::Model& model, const std::string& dir) {
  std::filesystem::create_directories(dir);
  io::Env* env = io::Env::posix();
  const std::vector<nn::HfTensor> tensors = nn::hf_tensors(model.config(), model.params());
  if (absl::Status s = checkpoint::write_safetensors(env, dir + "/model.safetensors", tensors,
                                                     {{"format", "pt"}});
      !s.ok()) {
    die(absl::StrCat("export: ", s.ToString()));
  }
  const std::string config = nn::hf_config_json(model.config()).dump(2) + "\n";
  if (absl::Status s =
          io::write_file_atomically(env, dir + "/config.json", config.data(), config.size());
      !s.ok()) {
    die(absl::StrCat("export: ", s.ToString()));
  }
}

struct PeerRun {
  std::string versions;
  double tokens_per_s = 0;
  std::vector<int32_t> ids;
};

// The peer on `dir`; nothing (with the reason printed) when it fails.
std::optional<PeerRun> run_peer(const std::string& python, const std::string& dir,
                                const std::vector<int32_t>& prompt, int new_tokens, int threads,
                                int warmup, int repeat) {
  std::string ids;
  for (int32_t t : prompt)
    absl::StrAppend(&ids, ids.empty() ? "" : ",", t);
  const std::string cmd = absl::StrCat(
      shell_quote(python), " ", shell_quote(TROUPE_GENERATE_BENCH_PEER_SCRIPT), " --model ",
      shell_quote(dir), " --prompt ", ids, " --new-tokens ", new_tokens, " --threads ", threads,
      " --warmup ", warmup, " --repeat ", repeat, " --parent-pid ", ::getpid());
  std::fflush(stdout);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    std::printf("transformers: cannot start %s - peer skipped\n", python.c_str());
    return std::nullopt;
  }
  const std::string out = read_all(pipe);
  const int status = ::pclose(pipe);
  std::string json;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json = line;
  }
  const std::optional<double> tps = json_number(json, "tokens_per_s");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !tps) {
    std::printf("transformers: failed (exit status %d) - peer skipped for this config\n",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return std::nullopt;
  }
  PeerRun run;
  run.versions = absl::StrCat("torch ", json_string(json, "torch_version"), ", transformers ",
                              json_string(json, "transformers_version"));
  run.tokens_per_s = *tps;
  const size_t open = json.find('[', json.find("\"ids\""));
  const size_t close = json.find(']', open);
  if (open != std::string::npos && close != std::string::npos) {
    for (const std::string& item : parse_name_list(json.substr(open + 1, close - open - 1)))
      run.ids.push_back(std::atoi(item.c_str()));
  }
  return run;
}

// "" when equal, else where the first difference is.
std::string mismatch(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  if (a == b) return "";
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i])
    ++i;
  return absl::StrCat("differ from new token ", i, " (", i < a.size() ? a[i] : -1, " vs ",
                      i < b.size() ? b[i] : -1, "; lengths ", a.size(), " and ", b.size(), ")");
}

}  // namespace
}  // namespace troupe::bench

using namespace troupe::bench;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: generate_bench [--configs NAME,...] [--threads N] [--new-tokens N]\n"
        "                      [--prompt-tokens N] [--warmup N] [--repeat N] [--json FILE]\n"
        "                      [--no-peer]\n"
        "default configs: %s\nconfigs:",
        kDefaultConfigs);
    for (const Config& c : all_configs())
      std::printf(" %s", c.name.c_str());
    std::printf(
        "\ntransformers runs as the peer when $TROUPE_TORCH_PYTHON (else /tmp/torchenv,\n"
        "python3, /usr/bin/python3) can import torch and transformers.\n");
    return 0;
  }
  const int threads = static_cast<int>(flags.get_long("--threads", 2));
  const int new_tokens = static_cast<int>(flags.get_long("--new-tokens", 128));
  const int prompt_tokens = static_cast<int>(flags.get_long("--prompt-tokens", 16));
  const int warmup = static_cast<int>(flags.get_long("--warmup", 1));
  const int repeat = static_cast<int>(flags.get_long("--repeat", 3));
  const std::string json = flags.get("--json", "");
  if (threads < 1 || new_tokens < 1 || prompt_tokens < 1 || warmup < 0 || repeat < 1) {
    std::fprintf(stderr,
                 "generate_bench: --threads, --new-tokens, --prompt-tokens and --repeat must be at "
                 "least 1, --warmup at least 0\n");
    return 2;
  }
  std::vector<Config> configs;
  for (const std::string& name : parse_name_list(flags.get("--configs", kDefaultConfigs))) {
    auto it = std::find_if(all_configs().begin(), all_configs().end(),
                           [&](const Config& c) { return c.name == name; });
    if (it == all_configs().end()) {
      std::fprintf(stderr, "generate_bench: no config named %s (--help lists them)\n",
                   name.c_str());
      return 2;
    }
    if (prompt_tokens + new_tokens > it->model.max_seq_len()) {
      std::fprintf(stderr,
                   "generate_bench: %s: %d prompt + %d new tokens exceed its max_seq_len %d\n",
                   name.c_str(), prompt_tokens, new_tokens, it->model.max_seq_len());
      return 2;
    }
    configs.push_back(*it);
  }
  if (configs.empty()) {
    std::fprintf(stderr, "generate_bench: --configs names no config\n");
    return 2;
  }

  reexec_keeping_peer_wait_policy(argv);  // bench/compute_env.h
  restore_peer_wait_policy();             // for the peer; this process's OpenMP has read it
  troupe::nn::set_num_threads(threads);
  std::printf(
      "generate_bench: %d threads, %d prompt tokens, %d new tokens, greedy, %d warm-up "
      "calls, median of %d; GEMM: %s\n",
      threads, prompt_tokens, new_tokens, warmup, repeat, troupe::nn::gemm_backend().c_str());
  std::optional<std::string> python;
  if (!flags.has("--no-peer")) {
    python = find_torch_python();
    if (!python) {
      std::printf(
          "transformers: torch not installed (set TROUPE_TORCH_PYTHON to a python that can "
          "import torch and transformers; see docs/benchmarks.md) - peer skipped\n");
    }
  }
  char scratch_template[] = "/tmp/generate_bench.XXXXXX";
  const char* scratch = ::mkdtemp(scratch_template);
  if (scratch == nullptr) die("cannot make a scratch directory under /tmp");

  std::vector<Row> rows;
  std::vector<std::string> problems, short_of_goal;
  std::string peer_versions;
  for (const Config& c : configs) {
    std::unique_ptr<troupe::nn::Model> model =
        value_or_die(troupe::nn::create_model(c.model), absl::StrCat(c.name, ": create_model"));
    model->init_parameters(1337);
    std::vector<int32_t> prompt;
    for (int t = 0; t < prompt_tokens; ++t)
      prompt.push_back((t * 37 + 11) % c.model.vocab_size());
    const Timed cached = run_troupe(*model, prompt, new_tokens, true, warmup, repeat);
    const Timed uncached = run_troupe(*model, prompt, new_tokens, false, warmup, repeat);
    std::printf("troupe: %s (%zu params): cached %.1f tokens/s, uncached %.1f tokens/s (%.2fx)\n",
                c.name.c_str(), model->num_params(), cached.tokens_per_s, uncached.tokens_per_s,
                cached.tokens_per_s / uncached.tokens_per_s);
    if (const std::string m = mismatch(cached.ids, uncached.ids); !m.empty()) {
      problems.push_back(absl::StrCat(c.name, ": troupe's cached and uncached greedy tokens ", m));
    }
    Row row_cached{absl::StrCat(c.name, " greedy, KV cache"), "tokens/s", cached.tokens_per_s, 0};
    Row row_uncached{absl::StrCat(c.name, " greedy, no cache"), "tokens/s", uncached.tokens_per_s,
                     0};
    if (python) {
      const std::string dir = absl::StrCat(scratch, "/", c.name);
      export_model(*model, dir);
      std::optional<PeerRun> peer =
          run_peer(*python, dir, prompt, new_tokens, threads, warmup, repeat);
      if (peer) {
        peer_versions = peer->versions;
        row_cached.peer = row_uncached.peer = peer->tokens_per_s;
        std::printf("transformers: %s: %.1f tokens/s (%s)\n", c.name.c_str(), peer->tokens_per_s,
                    peer->versions.c_str());
        if (const std::string m = mismatch(cached.ids, peer->ids); !m.empty()) {
          problems.push_back(
              absl::StrCat(c.name, ": troupe's and transformers' greedy tokens ", m));
        } else {
          std::printf("transformers: %s: the same %d greedy tokens as troupe's\n", c.name.c_str(),
                      new_tokens);
        }
        if (row_cached.ratio() < 2.0) short_of_goal.push_back(c.name);
      }
    }
    rows.push_back(row_cached);
    rows.push_back(row_uncached);
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);

  print_table(peer_versions.empty() ? "-" : "transformers", rows);
  if (!peer_versions.empty()) {
    std::string names;
    for (const std::string& n : short_of_goal)
      absl::StrAppend(&names, names.empty() ? "" : ", ", n);
    std::printf("goal, troupe with the cache >= 2x transformers' generate: %s%s\n",
                short_of_goal.empty() ? "met" : "not met: ", names.c_str());
  }
  for (const std::string& p : problems)
    std::printf("generate_bench: MISMATCH: %s\n", p.c_str());
  if (!json.empty() &&
      !write_json(
          json, "generate_bench",
          peer_versions.empty() ? "none" : absl::StrCat("transformers (", peer_versions, ")"),
          rows)) {
    std::fprintf(stderr, "generate_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return problems.empty() ? 0 : 1;
}
