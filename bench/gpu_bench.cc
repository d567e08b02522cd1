// Training on one GPU: troupe's model on a CUDA device (nn::create_model with
// ModelStorage::device) against PyTorch's, eager and torch.compile, in one invocation.
//
//   gpu_bench [--configs gpt2-124m,llama-124m] [--batch 4] [--seq 1024] [--steps 10]
//             [--warmup 3] [--repeat 3] [--dtype fp32|bf16] [--peak-flops F] [--json FILE]
//             [--no-peer]
//
// One step: zero_grad, forward with targets (the loss back on the host), backward, AdamW over
// every parameter on the device (lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 outside
// the biases and norms' weights), on a fixed random batch, then a wait for the device. tokens/s =
// B*T / step time; a repeat's figure is its median step, the config's the median over repeats.
// MFU = tokens/s x training FLOPs per token (nn/model/flops.h: 6N + 12LCT) / the device's
// published dense peak for the dtype (--peak-flops, else a table of the GPUs we know: H100 and
// H200 SXM, A100; none for another GPU).
//
// Peer: bench/gpu_bench_torch.py, the same models and AdamW in PyTorch on the same GPU, in eager
// mode and under torch.compile, in the dtype asked (bf16: torch.autocast with fp32 masters),
// run by the first python that imports torch with CUDA (bench_util.h's find_python). Ratios are
// troupe / PyTorch tokens/s.
//
// What troupe runs: GPT-2 and Llama, fp32 (cuBLAS in pedantic fp32, no TF32), or with --dtype
// bf16 its fully connected layers' products on bf16 operands accumulating in fp32
// (ModelOptions::matmul) and everything else in fp32 (attention's products, the norms, the
// activations). Without a CUDA device the bench says why and exits 0 (1 with
// TROUPE_REQUIRE_GPU=1).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "nn/device.h"
#include "nn/device_backend.h"
#include "nn/gpt2/config.h"
#include "nn/llama/config.h"
#include "nn/memory.h"
#include "nn/model/flops.h"
#include "nn/model/model.h"

#ifndef TROUPE_GPU_BENCH_TORCH_SCRIPT
#define TROUPE_GPU_BENCH_TORCH_SCRIPT "bench/gpu_bench_torch.py"
#endif

namespace troupe::bench {
namespace {

constexpr nn::Device kGpu = nn::Device::cuda(0);

struct Options {
  std::vector<std::string> configs = {"gpt2-124m", "llama-124m"};
  int batch = 4;
  int seq = 1024;
  int steps = 10;
  int warmup = 3;
  int repeat = 3;
  std::string dtype = "bf16";
  double peak_flops = 0;
  std::string json;
  bool peer = true;
};

// GPT-2 small (124M: 12 layers, 768 channels, 12 heads, GPT-2's vocabulary padded to 50304 as
// llm.c pads it), a Llama of its size (12 layers, 768 channels, 12 query heads over 4 key/value
// heads, an MLP of 2048, Llama 2's vocabulary of 32000, an untied head), and tiny ones for the
// smoke run.
std::optional<nn::ModelConfig> model_config(const std::string& name, int T) {
  if (name == "llama-124m" || name == "llama-tiny") {
    const bool small = name == "llama-124m";
    nn::LlamaConfig c;
    c.vocab_size = small ? 32000 : 256;
    c.hidden_size = small ? 768 : 64;
    c.intermediate_size = small ? 2048 : 96;
    c.num_hidden_layers = small ? 12 : 2;
    c.num_attention_heads = small ? 12 : 4;
    c.num_key_value_heads = small ? 4 : 2;
    c.max_position_embeddings = T;
    return nn::ModelConfig(c);
  }
  if (name == "gpt2-124m") {
    return nn::ModelConfig(nn::GPTConfig{.max_seq_len = T,
                                         .vocab_size = 50257,
                                         .padded_vocab_size = 50304,
                                         .num_layers = 12,
                                         .num_heads = 12,
                                         .channels = 768});
  }
  if (name == "gpt2-tiny") {
    return nn::ModelConfig(nn::GPTConfig{.max_seq_len = T,
                                         .vocab_size = 256,
                                         .padded_vocab_size = 256,
                                         .num_layers = 2,
                                         .num_heads = 2,
                                         .channels = 64});
  }
  return std::nullopt;
}

// The published dense peak of GPUs we know, by name and dtype; 0 when unknown.
double published_peak(const std::string& device, const std::string& dtype) {
  const bool bf16 = dtype == "bf16";
  if (device.find("H100") != std::string::npos || device.find("H200") != std::string::npos) {
    const bool pcie = device.find("PCIe") != std::string::npos;
    if (bf16) return pcie ? 756e12 : 989.4e12;
    return pcie ? 51.2e12 : 66.9e12;  // fp32 without tensor cores (TF32 is off)
  }
  if (device.find("A100") != std::string::npos) return bf16 ? 312e12 : 19.5e12;
  return 0;
}

struct Measured {
  double tokens_per_s = 0;
  double loss_first = 0, loss_last = 0;
};

// troupe's steps of `config` on the GPU.
absl::StatusOr<Measured> run_troupe(const nn::ModelConfig& config, const Options& f) {
  const nn::ModelOptions options{.matmul = f.dtype == "bf16" ? nn::DType::kBFloat16
                                                             : nn::DType::kFloat32};
  absl::StatusOr<std::unique_ptr<nn::Model>> made =
      nn::create_model(config, options, {.device = kGpu});
  if (!made.ok()) return made.status();
  nn::Model& model = **made;
  model.init_parameters(1234);
  absl::StatusOr<nn::DeviceBackend*> cuda = nn::backend(nn::DeviceKind::kCuda);
  if (!cuda.ok()) return cuda.status();
  const size_t n = model.num_params();
  nn::FloatBuffer m, v;
  if (absl::Status s = m.reset(nn::MemoryCategory::kOptimizerState, n, true, kGpu); !s.ok())
    return s;
  if (absl::Status s = v.reset(nn::MemoryCategory::kOptimizerState, n, true, kGpu); !s.ok())
    return s;
  const std::vector<nn::ParamRange> no_decay = model.layout().no_decay_ranges();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, config.vocab_size() - 1);
  const size_t BT = static_cast<size_t>(f.batch) * f.seq;
  std::vector<int32_t> inputs(BT), targets(BT);
  for (size_t i = 0; i < BT; ++i) {
    inputs[i] = token(rng);
    targets[i] = token(rng);
  }
  int update = 0;
  Measured out;
  auto step = [&]() -> absl::StatusOr<double> {
    const auto start = std::chrono::steady_clock::now();
    model.zero_grad();
    absl::StatusOr<float> loss = model.forward(inputs.data(), targets.data(), f.batch, f.seq);
    if (!loss.ok()) return loss.status();
    if (absl::Status s = model.backward(); !s.ok()) return s;
    if (absl::Status s = (*cuda)->adamw_update(
            kGpu.index, {.params = model.params(),
                         .grads = model.grads(),
                         .m = m.data(),
                         .v = v.data(),
                         .n = n,
                         .config = {.lr = 6e-4f, .beta2 = 0.95f, .weight_decay = 0.1f},
                         .lr = 6e-4f,
                         .step = ++update,
                         .no_decay = no_decay});
        !s.ok()) {
      return s;
    }
    if (absl::Status s = (*cuda)->synchronize(kGpu.index); !s.ok()) return s;
    if (update == 1) out.loss_first = *loss;
    out.loss_last = *loss;
    return seconds_since(start);
  };
  for (int i = 0; i < f.warmup; ++i) {
    absl::StatusOr<double> s = step();
    if (!s.ok()) return s.status();
  }
  std::vector<double> repeats;
  for (int r = 0; r < f.repeat; ++r) {
    std::vector<double> times;
    for (int i = 0; i < f.steps; ++i) {
      absl::StatusOr<double> s = step();
      if (!s.ok()) return s.status();
      times.push_back(*s);
    }
    repeats.push_back(median(times));
  }
  out.tokens_per_s = static_cast<double>(BT) / median(repeats);
  return out;
}

// The peer's one-line JSON report, or nullopt (saying why).
std::optional<std::string> run_peer(const std::vector<std::string>& configs, const Options& f) {
  std::optional<std::string> python =
      find_python("import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)");
  if (!python) {
    std::printf("peer: skipped (no python with torch and a CUDA device)\n");
    return std::nullopt;
  }
  // The script beside the sources it was built from, or $TROUPE_GPU_BENCH_TORCH_SCRIPT (a bundle
  // run on another machine: scripts/gpu_check.sh).
  const char* env = std::getenv("TROUPE_GPU_BENCH_TORCH_SCRIPT");
  const std::string script = env != nullptr && *env != '\0' ? env : TROUPE_GPU_BENCH_TORCH_SCRIPT;
  std::string cmd = shell_quote(*python) + " " + shell_quote(script);
  for (const std::string& c : configs)
    cmd += " --config " + shell_quote(c);
  cmd += " --batch " + std::to_string(f.batch) + " --seq " + std::to_string(f.seq) + " --steps " +
         std::to_string(f.steps) + " --warmup " + std::to_string(f.warmup) + " --repeat " +
         std::to_string(f.repeat) + " --dtype " + f.dtype;
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out = read_all(pipe);
  const int status = ::pclose(pipe);
  const size_t last = out.find_last_of('{');
  if (status != 0 || last == std::string::npos) {
    std::printf("peer: failed (exit %d)\n%s\n", status, out.c_str());
    return std::nullopt;
  }
  return out.substr(last);
}

int run(const Options& f) {
  const bool required = [] {
    const char* r = std::getenv("TROUPE_REQUIRE_GPU");
    return r != nullptr && std::string(r) == "1";
  }();
  if (nn::cuda_device_count() == 0) {
    std::printf("gpu_bench: skipped: no CUDA device (%s)\n", nn::describe_devices().c_str());
    return required ? 1 : 0;
  }
  absl::StatusOr<nn::DeviceBackend*> cuda = nn::backend(nn::DeviceKind::kCuda);
  const std::string device = (*cuda)->describe(0);
  double peak = f.peak_flops > 0 ? f.peak_flops : published_peak(device, f.dtype);
  std::printf("gpu_bench: %s, B %d x T %d, %s%s, peak %s\n", device.c_str(), f.batch, f.seq,
              f.dtype.c_str(),
              f.dtype == "bf16"
                  ? " (troupe: the linear layers' products on bf16 operands, the rest in fp32)"
                  : "",
              peak > 0 ? absl::StrCat(peak / 1e12, " TFLOPS").c_str() : "unknown (no MFU)");
  std::vector<std::string> ran;
  std::map<std::string, Measured> troupe;
  std::map<std::string, double> flops;
  int failed = 0;
  for (const std::string& name : f.configs) {
    std::optional<nn::ModelConfig> config = model_config(name, f.seq);
    if (!config) {
      std::printf(
          "%s: skipped: not a config of this bench (gpt2-124m, gpt2-tiny, llama-124m, "
          "llama-tiny)\n",
          name.c_str());
      continue;
    }
    absl::StatusOr<Measured> m = run_troupe(*config, f);
    if (!m.ok()) {
      std::printf("%s: troupe failed: %s\n", name.c_str(),
                  std::string(m.status().message()).c_str());
      ++failed;
      continue;
    }
    troupe[name] = *m;
    flops[name] = nn::training_flops_per_token(*config, f.seq);
    ran.push_back(name);
    std::printf("%s: troupe %.0f tokens/s (loss %.4f -> %.4f)\n", name.c_str(), m->tokens_per_s,
                m->loss_first, m->loss_last);
  }
  std::optional<std::string> peer = f.peer && !ran.empty() ? run_peer(ran, f) : std::nullopt;
  std::vector<Row> rows;
  for (const std::string& name : ran) {
    const double tps = troupe[name].tokens_per_s;
    for (const char* mode : {"eager", "compile"}) {
      Row row{.name = name + " vs " + mode, .unit = "tokens/s", .troupe = tps};
      if (peer) row.peer = json_number(*peer, name + "." + mode + ".tokens_per_s").value_or(0);
      rows.push_back(row);
    }
    if (peak > 0) {
      std::printf("%s: MFU troupe %.1f%%", name.c_str(), 100 * tps * flops[name] / peak);
      for (const char* mode : {"eager", "compile"}) {
        const double p =
            peer ? json_number(*peer, name + "." + mode + ".tokens_per_s").value_or(0) : 0;
        if (p > 0) std::printf(", torch %s %.1f%%", mode, 100 * p * flops[name] / peak);
      }
      std::printf("\n");
    }
  }
  print_table(peer ? "torch " + json_string(*peer, "torch_version") : "torch", rows);
  if (!f.json.empty() && !write_json(f.json, "gpu_bench", "torch", rows)) {
    std::printf("gpu_bench: cannot write %s\n", f.json.c_str());
    return 1;
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace troupe::bench

int main(int argc, char** argv) {
  troupe::bench::Options f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--configs") {
      f.configs = troupe::bench::parse_name_list(value());
    } else if (a == "--batch") {
      f.batch = std::atoi(value().c_str());
    } else if (a == "--seq") {
      f.seq = std::atoi(value().c_str());
    } else if (a == "--steps") {
      f.steps = std::atoi(value().c_str());
    } else if (a == "--warmup") {
      f.warmup = std::atoi(value().c_str());
    } else if (a == "--repeat") {
      f.repeat = std::atoi(value().c_str());
    } else if (a == "--dtype") {
      f.dtype = value();
    } else if (a == "--peak-flops") {
      f.peak_flops = std::atof(value().c_str());
    } else if (a == "--json") {
      f.json = value();
    } else if (a == "--no-peer") {
      f.peer = false;
    } else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--configs gpt2-124m,llama-124m] [--batch 4] [--seq 1024] "
                   "[--steps 10] [--warmup 3] [--repeat 3] [--dtype fp32|bf16] [--peak-flops F] "
                   "[--json FILE] [--no-peer]\n");
      return 2;
    }
  }
  if (f.batch < 1 || f.seq < 1 || f.steps < 1 || f.repeat < 1 || f.warmup < 0 ||
      (f.dtype != "fp32" && f.dtype != "bf16")) {
    std::fprintf(stderr, "gpu_bench: bad --batch, --seq, --steps, --repeat, --warmup or --dtype\n");
    return 2;
  }
  return troupe::bench::run(f);
}
