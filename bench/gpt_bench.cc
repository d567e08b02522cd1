// Training-step benchmark: troupe's models (nn::create_model: GPT-2 and Llama) and PyTorch side
// by side in one invocation.
//
//   gpt_bench [--configs 1M,5M,12M,25M,50M,llama-12M] [--threads N] [--steps 3] [--warmup 1]
//             [--repeat 3] [--batch B] [--seq T] [--json FILE] [--no-peer]
//             [--llama-peer auto|transformers|plain]
//
// One step: zero_grad, forward (with targets: the loss), backward, AdamW update of every
// parameter (lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 outside the biases and
// the norms' weights), on a fixed random batch of B x T tokens. tokens/s = B*T / step time. Each
// config warms up --warmup steps, then runs --repeat times --steps steps; a repeat's figure is
// its median step, the config's the median over repeats.
//
// Peer: bench/gpt_bench_torch.py, the same model (tests/reference/gpt_reference.py's GPT-2:
// tied LM head, pre-LN, tanh GELU, causal attention through F.scaled_dot_product_attention) and
// torch.optim.AdamW with the same hyperparameters, B, T, steps and thread count
// (torch.set_num_threads), run by the first python that can import torch
// (bench_util.h's find_torch_python), config by config right after troupe's run of it (never
// at the same time); without torch the peer is skipped. The llama-* configs' peer is
// transformers' LlamaForCausalLM (attn_implementation "sdpa", fp32, the loss the mean
// cross-entropy of logits[b, t] against targets[b, t], as troupe's) where transformers is
// installed, else the script's plain PyTorch Llama (F.scaled_dot_product_attention with
// is_causal and the key/value heads repeated per group); --llama-peer picks one, and the bench
// prints which ran. Ratio = troupe / PyTorch tokens/s
// (above 1: troupe is faster).
//
// troupe runs as its worker processes do (nn/process_env.h): OPENBLAS_CORETYPE set where
// OpenBLAS does not know the CPU, OMP_WAIT_POLICY=passive with OpenBLAS's pthreads build only;
// TROUPE_KEEP_ENV=1 keeps the
// environment as it is. Each config also reports the CPU time per step and the share of
// (threads x wall time) it got: well below 100% means other processes had the cores.
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_fail.h"
#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "nn/gemm.h"
#include "nn/model/model.h"
#include "nn/optim/adamw.h"
#include "nn/threads.h"

#ifndef TROUPE_GPT_BENCH_TORCH_SCRIPT
#define TROUPE_GPT_BENCH_TORCH_SCRIPT "bench/gpt_bench_torch.py"
#endif

namespace troupe::bench {
namespace {

struct ModelConfig {
  std::string name;
  troupe::nn::Architecture arch = troupe::nn::Architecture::kGpt2;
  int L, C, NH, V, T, B;  // max_seq_len = T; no vocabulary padding (PyTorch's model has none)
  int KV = 0, I = 0;      // Llama: key/value heads, the MLP's width
  bool llama() const { return arch == troupe::nn::Architecture::kLlama; }
  troupe::nn::ModelConfig model_config() const {
    if (llama()) {
      troupe::nn::LlamaConfig config;
      config.vocab_size = V;
      config.hidden_size = C;
      config.intermediate_size = I;
      config.num_hidden_layers = L;
      config.num_attention_heads = NH;
      config.num_key_value_heads = KV;
      config.max_position_embeddings = T;
      config.rms_norm_eps = 1e-6;
      config.rope_theta = 10000.0;
      config.tie_word_embeddings = false;
      return config;
    }
    troupe::nn::GPTConfig config;
    config.max_seq_len = T;
    config.vocab_size = V;
    config.num_layers = L;
    config.num_heads = NH;
    config.channels = C;
    return config;
  }
  size_t params() const { return troupe::nn::model_layout(model_config()).num_params(); }
};

ModelConfig gpt(std::string name, int L, int C, int NH, int V, int T, int B) {
  return {std::move(name), troupe::nn::Architecture::kGpt2, L, C, NH, V, T, B};
}

ModelConfig llama(std::string name, int L, int C, int NH, int KV, int I, int V, int T, int B) {
  return {std::move(name), troupe::nn::Architecture::kLlama, L, C, NH, V, T, B, KV, I};
}

// Named by their approximate parameter count. Heads of 64 channels as GPT-2's (32 in the
// smallest); B is chosen so that a step takes 0.4-3 s on two cores (troupe or PyTorch, fp32)
// and each side needs under 2 GiB.
//
// The Llama configs match the GPT ones' widths, depths, T and B: 64-channel heads with grouped
// key/value heads (NH / 2 or NH / 4), a SwiGLU MLP of about 8/3 C rounded to a multiple of 64, an
// untied head, no biases (Hugging Face's LlamaConfig defaults: rms_norm_eps 1e-6, rope_theta 1e4).
const std::vector<ModelConfig>& all_configs() {
  static const std::vector<ModelConfig> configs = {
      gpt("1M", 4, 128, 4, 2048, 256, 16), gpt("5M", 4, 256, 4, 8192, 256, 8),
      gpt("12M", 6, 384, 6, 4096, 256, 8), gpt("25M", 6, 512, 8, 8192, 512, 4),
      gpt("50M", 6, 768, 12, 8192, 512, 2), gpt("tiny", 2, 64, 4, 256, 32, 2),  // CI's smoke test
      // pipeline_bench's model and micro-batch, in one process: what its stages compute.
      gpt("pipe", 8, 256, 4, 256, 128, 4), llama("llama-5M", 4, 256, 4, 2, 704, 4096, 256, 8),
      llama("llama-12M", 6, 384, 6, 3, 1024, 4096, 256, 8),
      llama("llama-25M", 6, 512, 8, 2, 1344, 8192, 512, 4),
      llama("llama-tiny", 2, 64, 4, 2, 192, 256, 32, 2),  // CI's smoke test
  };
  return configs;
}

// What --configs runs when not given.
constexpr const char* kDefaultConfigs = "1M,5M,12M,25M,50M,llama-12M";

struct Phases {
  double zero_grad = 0, forward = 0, backward = 0, adamw = 0;
  double total() const { return zero_grad + forward + backward + adamw; }
};

struct TroupeResult {
  double step_s = 0;
  // CPU time of the process over the timed steps / (their wall time x threads): well below 1
  // when other processes took the cores (the run is then disturbed; idle waits count as CPU time
  // only while OpenMP and OpenBLAS threads spin).
  double cpu_share = 0;
  double cpu_per_step = 0;  // CPU seconds per timed step (mean): with 1 thread, about the
                            // step time of an undisturbed run
  Phases phases;            // medians of each phase over every timed step
  float loss_first = 0, loss_last = 0;
  size_t memory_bytes = 0;
};

void ok_or_die(const absl::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.ToString());
}

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TroupeResult run_troupe(const ModelConfig& mc, int threads, int steps, int warmup, int repeat) {
  std::unique_ptr<nn::Model> model =
      value_or_die(nn::create_model(mc.model_config()), mc.name + ": create_model");
  nn::Model& gpt = *model;
  gpt.init_parameters(1337);
  const size_t n = gpt.num_params();
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const nn::AdamWConfig adamw{
      .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  const std::vector<nn::ParamRange> no_decay = gpt.layout().no_decay_ranges();
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0, mc.V - 1);
  std::vector<int32_t> inputs(static_cast<size_t>(mc.B) * mc.T), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = token(rng);
    targets[i] = token(rng);
  }

  int t = 0;  // AdamW's step count
  std::vector<float> losses;
  auto step = [&](Phases* p) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    gpt.zero_grad();
    const auto t1 = clock::now();
    losses.push_back(value_or_die(gpt.forward(inputs.data(), targets.data(), mc.B, mc.T),
                                  mc.name + ": forward"));
    const auto t2 = clock::now();
    ok_or_die(gpt.backward(), mc.name + ": backward");
    const auto t3 = clock::now();
    nn::adamw_update_parallel(gpt.params(), gpt.grads(), m.data(), v.data(), n, adamw, adamw.lr,
                              ++t, no_decay, nn::num_threads());
    const auto t4 = clock::now();
    auto s = [](clock::time_point a, clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    *p = {s(t0, t1), s(t1, t2), s(t2, t3), s(t3, t4)};
  };

  Phases p;
  for (int i = 0; i < warmup; ++i)
    step(&p);
  std::vector<double> repeat_medians;
  std::vector<double> zg, fw, bw, ad;
  double wall = 0;
  const double cpu_start = process_cpu_seconds();
  for (int r = 0; r < repeat; ++r) {
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
      step(&p);
      times.push_back(p.total());
      wall += p.total();
      zg.push_back(p.zero_grad);
      fw.push_back(p.forward);
      bw.push_back(p.backward);
      ad.push_back(p.adamw);
    }
    repeat_medians.push_back(median(times));
  }
  const double cpu = process_cpu_seconds() - cpu_start;
  for (float l : losses) {
    if (!std::isfinite(l)) die(mc.name + ": troupe's loss is not finite");
  }
  TroupeResult res;
  res.step_s = median(repeat_medians);
  res.cpu_share = cpu / (wall * threads);
  res.cpu_per_step = cpu / (repeat * steps);
  res.phases = {median(zg), median(fw), median(bw), median(ad)};
  res.loss_first = losses.front();
  res.loss_last = losses.back();
  res.memory_bytes = gpt.memory().total() + 2 * n * sizeof(float);  // + AdamW's m and v
  return res;
}

// ---- PyTorch -------------------------------------------------------------------------

struct TorchRun {
  std::string python;
  std::string version;
  std::string attention;
  std::string llama;  // the Llama model's implementation (when a Llama config ran)
  std::map<std::string, double> values;  // "NAME.tokens_per_s" etc.
};

// Runs gpt_bench_torch.py with `python` on the configs; nothing (with the reason printed) when
// the script fails. Its progress lines go to our stderr as they come.
std::optional<TorchRun> run_torch(const std::string& python,
                                  const std::vector<ModelConfig>& configs, int threads, int steps,
                                  int warmup, int repeat, const std::string& llama_impl) {
  std::string cmd = shell_quote(python) + " " + shell_quote(TROUPE_GPT_BENCH_TORCH_SCRIPT) +
                    " --threads " + std::to_string(threads) + " --steps " + std::to_string(steps) +
                    " --warmup " + std::to_string(warmup) + " --repeat " + std::to_string(repeat) +
                    " --parent-pid " + std::to_string(::getpid()) + " --llama-impl " +
                    shell_quote(llama_impl);
  for (const ModelConfig& mc : configs) {
    std::vector<int> dims = {mc.L, mc.C, mc.NH};
    if (mc.llama()) dims.insert(dims.end(), {mc.KV, mc.I});
    dims.insert(dims.end(), {mc.V, mc.T, mc.B});
    cmd += mc.llama() ? " --llama-config " : " --config ";
    cmd += mc.name;
    for (int d : dims) {
      cmd += ':';
      cmd += std::to_string(d);
    }
  }
  std::printf("torch: running %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    std::printf("torch: cannot start %s - peer skipped\n", python.c_str());
    return std::nullopt;
  }
  const std::string out = read_all(pipe);
  const int status = ::pclose(pipe);
  // The result is the last line that holds a JSON object.
  std::string json;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json = line;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  TorchRun run;
  run.python = python;
  run.version = json_string(json, "torch_version");
  run.attention = json_string(json, "attention");
  run.llama = json_string(json, "llama");
  for (const ModelConfig& mc : configs) {
    for (const char* field : {"tokens_per_s", "step_s", "params", "loss_first", "loss_last",
                              "cpu_share", "cpu_s_per_step"}) {
      const std::string key = mc.name + "." + field;
      if (std::optional<double> v = json_number(json, key)) run.values[key] = *v;
    }
  }
  if (code != 0 || run.values.empty()) {
    std::printf("torch: failed (exit code %d) - peer skipped for this config\n", code);
    return std::nullopt;
  }
  return run;
}

// ---- Output ----------------------------------------------------------------------------

std::string si(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

// bench_util.h's layout (benchmark, peer, cases with name, unit, troupe, peer, ratio) plus each
// config's shape and step times.
bool write_gpt_json(const std::string& path, const std::string& peer, int threads,
                    const std::vector<ModelConfig>& configs, const std::vector<TroupeResult>& ours,
                    const std::optional<TorchRun>& torch) {
  std::ofstream out(path);
  if (!out) return false;
  out << "{\n  \"benchmark\": \"gpt_bench\",\n  \"peer\": \"" << json_escape(peer)
      << "\",\n  \"threads\": " << threads << ",\n  \"gemm\": \"" << json_escape(nn::gemm_backend())
      << "\",\n  \"llama_peer\": \"" << json_escape(torch ? torch->llama : "")
      << "\",\n  \"cases\": [\n";
  for (size_t i = 0; i < configs.size(); ++i) {
    const ModelConfig& mc = configs[i];
    const TroupeResult& r = ours[i];
    const double tokens = static_cast<double>(mc.B) * mc.T;
    auto peer_value = [&](const char* field) {
      const std::string key = mc.name + "." + field;
      return torch && torch->values.count(key) ? torch->values.at(key) : 0.0;
    };
    const double peer_tps = peer_value("tokens_per_s");
    const double tps = tokens / r.step_s;
    out << "    {\"name\": \"" << mc.name << "\", \"architecture\": \""
        << troupe::nn::architecture_name(mc.arch)
        << "\", \"unit\": \"tokens/s\", \"troupe\": " << tps << ", \"peer\": " << peer_tps
        << ", \"ratio\": " << (peer_tps > 0 ? tps / peer_tps : 0) << ", \"params\": " << mc.params()
        << ", \"L\": " << mc.L << ", \"C\": " << mc.C << ", \"NH\": " << mc.NH
        << ", \"KV\": " << (mc.llama() ? mc.KV : mc.NH)
        << ", \"I\": " << (mc.llama() ? mc.I : 4 * mc.C) << ", \"V\": " << mc.V
        << ", \"T\": " << mc.T << ", \"B\": " << mc.B << ", \"troupe_step_s\": " << r.step_s
        << ", \"troupe_zero_grad_s\": " << r.phases.zero_grad
        << ", \"troupe_forward_s\": " << r.phases.forward
        << ", \"troupe_backward_s\": " << r.phases.backward
        << ", \"troupe_adamw_s\": " << r.phases.adamw << ", \"troupe_cpu_share\": " << r.cpu_share
        << ", \"troupe_cpu_s_per_step\": " << r.cpu_per_step
        << ", \"peer_step_s\": " << peer_value("step_s")
        << ", \"peer_cpu_share\": " << peer_value("cpu_share")
        << ", \"peer_cpu_s_per_step\": " << peer_value("cpu_s_per_step") << "}"
        << (i + 1 < configs.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  return static_cast<bool>(out);
}

}  // namespace
}  // namespace troupe::bench

using namespace troupe::bench;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: gpt_bench [--configs NAME,...] [--threads N] [--steps N] [--warmup N]\n"
        "                 [--repeat N] [--batch B] [--seq T] [--json FILE] [--no-peer]\n"
        "                 [--llama-peer auto|transformers|plain]\n"
        "default configs: %s\nconfigs:",
        kDefaultConfigs);
    for (const ModelConfig& mc : all_configs())
      std::printf(" %s", mc.name.c_str());
    std::printf(
        "\nPyTorch runs as the peer when $TROUPE_TORCH_PYTHON (else /tmp/torchenv, python3,\n"
        "/usr/bin/python3) can import torch. troupe runs with OPENBLAS_CORETYPE and\n"
        "(with OpenBLAS's pthreads build) OMP_WAIT_POLICY=passive set as its worker\n"
        "processes do (TROUPE_KEEP_ENV=1: as inherited).\n");
    return 0;
  }
  const int threads = static_cast<int>(flags.get_long("--threads", cores_available()));
  const int steps = static_cast<int>(flags.get_long("--steps", 3));
  const int warmup = static_cast<int>(flags.get_long("--warmup", 1));
  const int repeat = static_cast<int>(flags.get_long("--repeat", 3));
  const int batch = static_cast<int>(flags.get_long("--batch", 0));
  const int seq = static_cast<int>(flags.get_long("--seq", 0));
  const std::string json = flags.get("--json", "");
  const std::string names = flags.get("--configs", kDefaultConfigs);
  const std::string llama_peer = flags.get("--llama-peer", "auto");
  if (threads < 1 || steps < 1 || warmup < 0 || repeat < 1 || batch < 0 || seq < 0) {
    std::fprintf(stderr,
                 "gpt_bench: --threads, --steps and --repeat must be at least 1, --warmup, "
                 "--batch and --seq at least 0\n");
    return 2;
  }
  if (llama_peer != "auto" && llama_peer != "transformers" && llama_peer != "plain") {
    std::fprintf(stderr, "gpt_bench: --llama-peer must be auto, transformers or plain\n");
    return 2;
  }
  std::vector<ModelConfig> configs;
  std::istringstream list(names);
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty() || std::any_of(configs.begin(), configs.end(),
                                    [&](const ModelConfig& mc) { return mc.name == name; })) {
      continue;
    }
    auto it = std::find_if(all_configs().begin(), all_configs().end(),
                           [&](const ModelConfig& mc) { return mc.name == name; });
    if (it == all_configs().end()) {
      std::fprintf(stderr, "gpt_bench: no config named %s (--help lists them)\n", name.c_str());
      return 2;
    }
    configs.push_back(*it);
    if (batch > 0) configs.back().B = batch;
    if (seq > 0) configs.back().T = seq;
    if (absl::Status s = configs.back().model_config().validate(); !s.ok()) {
      std::fprintf(stderr, "gpt_bench: %s: %s\n", name.c_str(), s.ToString().c_str());
      return 2;
    }
  }
  if (configs.empty()) {
    std::fprintf(stderr, "gpt_bench: --configs names no config\n");
    return 2;
  }

  reexec_keeping_peer_wait_policy(argv);  // bench/compute_env.h
  auto env_or = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr && *v != '\0' ? v : "unset");
  };
  const std::string our_env = "OPENBLAS_CORETYPE " + env_or("OPENBLAS_CORETYPE") +
                              ", OMP_WAIT_POLICY " + env_or("OMP_WAIT_POLICY");
  restore_peer_wait_policy();  // for the peer; this process's OpenMP has read it
  troupe::nn::set_num_threads(threads);
  std::printf(
      "gpt_bench: %d threads, %d warm-up steps, %d repeats of %d steps; GEMM: %s (%s); load "
      "%.1f\n",
      threads, warmup, repeat, steps, troupe::nn::gemm_backend().c_str(), our_env.c_str(),
      load_average());
  if (const std::string warning = troupe::nn::gemm_backend_warning(); !warning.empty()) {
    std::printf("gpt_bench: WARNING: %s\n", warning.c_str());
  }
  std::printf("%-10s %-6s %4s %5s %4s %4s %5s %6s %5s %4s %10s\n", "config", "arch", "L", "C", "NH",
              "KV", "MLP", "V", "T", "B", "params");
  for (const ModelConfig& mc : configs) {
    std::printf("%-10s %-6s %4d %5d %4d %4d %5d %6d %5d %4d %10zu\n", mc.name.c_str(),
                troupe::nn::architecture_name(mc.arch), mc.L, mc.C, mc.NH,
                mc.llama() ? mc.KV : mc.NH, mc.llama() ? mc.I : 4 * mc.C, mc.V, mc.T, mc.B,
                mc.params());
  }
  std::fflush(stdout);

  // Config by config, troupe then PyTorch, so that the two of a pair see the machine in the
  // same state (it is shared: the loads of other processes come and go).
  std::optional<std::string> python;
  if (!flags.has("--no-peer")) {
    python = find_torch_python();
    if (!python) {
      std::printf(
          "torch: not installed (set TROUPE_TORCH_PYTHON to a python that can import torch; see "
          "docs/benchmarks.md) - peer skipped\n");
    }
  }
  std::vector<TroupeResult> ours;
  std::optional<TorchRun> torch;
  for (const ModelConfig& mc : configs) {
    TroupeResult r = run_troupe(mc, threads, steps, warmup, repeat);
    const double tokens = static_cast<double>(mc.B) * mc.T;
    std::printf(
        "troupe: %s: %.1f ms/step (zero_grad %.1f, forward %.1f, backward %.1f, adamw %.1f), "
        "%s tokens/s, loss %.4f -> %.4f, %.0f MiB, cpu %.0f%% (%.1f ms/step), load %.1f\n",
        mc.name.c_str(), r.step_s * 1e3, r.phases.zero_grad * 1e3, r.phases.forward * 1e3,
        r.phases.backward * 1e3, r.phases.adamw * 1e3, si(tokens / r.step_s).c_str(), r.loss_first,
        r.loss_last, static_cast<double>(r.memory_bytes) / (1 << 20), r.cpu_share * 100,
        r.cpu_per_step * 1e3, load_average());
    std::fflush(stdout);
    ours.push_back(r);
    if (!python) continue;
    std::optional<TorchRun> run =
        run_torch(*python, {mc}, threads, steps, warmup, repeat, llama_peer);
    if (!run) continue;
    if (mc.llama() && !run->llama.empty()) {
      std::printf("torch: %s: Llama model: %s\n", mc.name.c_str(), run->llama.c_str());
    }
    if (!torch) {
      torch = std::move(run);
      std::printf("torch: %s from %s, attention: %s\n", torch->version.c_str(),
                  torch->python.c_str(), torch->attention.c_str());
    } else {
      torch->values.insert(run->values.begin(), run->values.end());
    }
  }
  const std::string peer = torch ? "PyTorch " + torch->version : "none";

  std::vector<Row> rows;
  std::vector<std::string> short_of_goal, without_peer;
  for (size_t i = 0; i < configs.size(); ++i) {
    const ModelConfig& mc = configs[i];
    Row row{mc.name + " (" + si(static_cast<double>(mc.params())) + " params, B" +
                std::to_string(mc.B) + " T" + std::to_string(mc.T) + ")",
            "tokens/s", static_cast<double>(mc.B) * mc.T / ours[i].step_s, 0};
    if (torch && torch->values.count(mc.name + ".tokens_per_s")) {
      row.peer = torch->values.at(mc.name + ".tokens_per_s");
      const double their_params =
          torch->values.count(mc.name + ".params") ? torch->values.at(mc.name + ".params") : 0;
      if (their_params != static_cast<double>(mc.params())) {
        std::printf("gpt_bench: WARNING: %s has %zu parameters here and %.0f in PyTorch\n",
                    mc.name.c_str(), mc.params(), their_params);
      }
      if (row.ratio() < 1.2) short_of_goal.push_back(mc.name);
    } else {
      without_peer.push_back(mc.name);
    }
    rows.push_back(row);
  }
  print_table(torch ? "PyTorch" : "-", rows);
  if (torch) {
    auto join = [](const std::vector<std::string>& items) {
      std::string out;
      for (const std::string& name : items)
        out += (out.empty() ? "" : ", ") + name;
      return out;
    };
    std::printf("goal, troupe >= 1.2x PyTorch on every config: %s%s%s%s\n",
                short_of_goal.empty() ? "met" : "not met: ", join(short_of_goal).c_str(),
                without_peer.empty() ? "" : "; no PyTorch figure for ", join(without_peer).c_str());
  }
  if (!json.empty() && !write_gpt_json(json, peer, threads, configs, ours, torch)) {
    std::fprintf(stderr, "gpt_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
