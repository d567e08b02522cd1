// ZeRO benchmark: troupe's zero_optimization stages 0-3 (DataParallelTrainer on a LocalCluster
// of troupe worker processes) against DeepSpeed's (stages 0-3, its CPU accelerator over gloo)
// and PyTorch FSDP2 (fully_shard, gloo), every side reading the same DeepSpeed JSON for the
// same GPT, in one invocation.
//
//   zero_bench [--config FILE] [--ranks 2] [--threads 1] [--stages 0,1,2,3] [--steps 8]
//              [--warmup 2] [--repeat 3] [--skip-peers] [--tiny] [--json FILE]
//
// The config: FILE, or the one written here (--tiny: CI's smoke size): a GPT of 6 layers x 384
// (6 heads), seq 128, vocab 256 (10.8M parameters), micro-batch 4 per rank, no accumulation,
// AdamW (lr 1e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1), gradient_clipping 1.0 (set on
// both sides: DeepSpeed 0.19.8 defaults it to 1.0 when the key is absent), DeepSpeed's
// zero_optimization defaults; troupe's data is its synthetic addition task, the peers' random
// tokens of the same shape. Each side runs --warmup steps, then --steps timed steps, with
// --threads compute threads per rank (troupe: its workers' OMP_NUM_THREADS and --threads;
// the peers: torch.set_num_threads).
//
// Per side and stage: samples/s (the global batch / the median step time), the largest rank's
// peak RSS (troupe: getrusage of its worker process; the peers: VmHWM of each rank's process),
// bytes each rank sent per step (troupe: counted by its collectives as they send; the peers:
// what a ring sends for the torch.distributed collectives they call, which the peer script
// counts) and, for troupe, the model state per rank. --repeat rounds,
// troupe and the peers back to back at each stage, never at once; the figures are medians over
// the rounds, the ratios medians of each round's ratio. Peers that are not installed (no torch,
// no deepspeed for the python found) are skipped with a message; bench/setup_torch_peers.sh
// makes a virtual environment with both.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "bench/zero_bench.h"
#include "nn/model/model.h"
#include "trainers/config.h"

namespace troupe::bench::zero {
namespace {

struct Shape {
  int L, C, NH, T, V, B;
};

std::string config_json(const Shape& s, int ranks) {
  std::ostringstream o;
  o << R"({"train_batch_size": )" << s.B * ranks << R"(, "train_micro_batch_size_per_gpu": )" << s.B
    << R"(, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW",
                "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "zero_optimization": {"stage": 0},
  "model": {"n_layer": )"
    << s.L << R"(, "n_head": )" << s.NH << R"(, "n_embd": )" << s.C << R"(, "seq_len": )" << s.T
    << R"(, "vocab_size": )" << s.V << R"(},
  "data": {"synthetic": {"task": "addition", "digits": 3, "num_samples": 4096, "seed": 7}},
  "parallel": {"dp": )"
    << ranks << R"(},
  "training": {"steps": 1, "seed": 1337}})";
  return o.str();
}

double med(const std::vector<Run>& runs, double Run::*field) {
  std::vector<double> v;
  for (const Run& r : runs)
    if (r.ok) v.push_back(r.*field);
  return v.empty() ? 0 : median(v);
}

// The median over rounds of a / b, each round's pair.
double ratio(const std::vector<Run>& a, const std::vector<Run>& b, double Run::*field) {
  std::vector<double> v;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i].ok && b[i].ok && b[i].*field > 0) v.push_back(a[i].*field / b[i].*field);
  return v.empty() ? 0 : median(v);
}

std::string mib(double bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f MiB", bytes / (1 << 20));
  return out;
}

}  // namespace
}  // namespace troupe::bench::zero

using namespace troupe::bench;
using namespace troupe::bench::zero;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "zero_bench [--config FILE] [--ranks 2] [--threads 1] [--stages 0,1,2,3] [--steps 8]\n"
        "           [--warmup 2] [--repeat 3] [--skip-peers] [--tiny] [--json FILE]\n");
    return 0;
  }
  reexec_keeping_peer_wait_policy(argv);  // bench/compute_env.h
  const bool tiny = flags.has("--tiny");
  const int ranks = static_cast<int>(flags.get_long("--ranks", 2));
  const int threads = static_cast<int>(flags.get_long("--threads", 1));
  const int steps = static_cast<int>(flags.get_long("--steps", tiny ? 2 : 8));
  const int warmup = static_cast<int>(flags.get_long("--warmup", tiny ? 1 : 2));
  const int repeat = static_cast<int>(flags.get_long("--repeat", tiny ? 1 : 3));
  const std::vector<int> stages = parse_int_list(flags.get("--stages", "0,1,2,3"));
  const bool skip_peers = flags.has("--skip-peers");
  const std::string json_path = flags.get("--json", "");
  if (ranks < 1 || ranks > 16 || threads < 1 || steps < 1 || warmup < 0 || repeat < 1 ||
      stages.empty() ||
      std::any_of(stages.begin(), stages.end(), [](int s) { return s < 0 || s > 3; })) {
    std::fprintf(stderr, "zero_bench: bad arguments (see --help)\n");
    return 2;
  }
  std::string config = flags.get("--config", "");
  if (config.empty()) {
    const Shape shape = tiny ? Shape{2, 64, 4, 32, 256, 2} : Shape{6, 384, 6, 128, 256, 4};
    config = "/tmp/zero_bench_" + std::to_string(::getpid()) + ".json";
    std::ofstream(config) << config_json(shape, ranks);
  }
  const troupe::trainers::TrainConfig parsed = [&] {
    auto c = troupe::trainers::load_train_config(config);
    if (!c.ok()) {
      std::fprintf(stderr, "zero_bench: %s\n", std::string(c.status().message()).c_str());
      std::exit(2);
    }
    return *c;
  }();
  const double psi = static_cast<double>(troupe::nn::model_layout(parsed.model).num_params());
  std::printf(
      "zero_bench: GPT %d layers x %d, seq %d, vocab %d (%.2fM parameters), micro-batch %lld, "
      "%d ranks x %d threads, %d + %d steps, %d rounds\n",
      parsed.model.num_layers(), parsed.model.hidden_size(), parsed.model.max_seq_len(),
      parsed.model.vocab_size(), psi / 1e6, static_cast<long long>(parsed.micro_batch_size), ranks,
      threads, warmup, steps, repeat);

  std::optional<std::string> python;
  if (!skip_peers) {
    restore_peer_wait_policy();
    python = find_torch_python();
    if (!python) std::printf("peers skipped: no python here can import torch\n");
  }
  std::map<int, std::vector<Run>> troupe, deepspeed;
  std::vector<Run> fsdp2;
  {
    for (int round = 0; round < repeat; ++round) {
      for (int stage : stages) {
        Run t = run_troupe(config, stage, ranks, threads, steps, warmup);
        std::printf("  round %d  troupe    zero-%d  %7.2f samples/s  peak RSS %s  sent %s/step\n",
                    round + 1, stage, t.samples_per_s, mib(t.peak_rss).c_str(),
                    mib(t.sent_bytes).c_str());
        troupe[stage].push_back(t);
        if (!python) continue;
        Run d = run_peer(*python, "deepspeed", config, stage, ranks, threads, steps, warmup);
        if (d.ok) {
          std::printf("  round %d  deepspeed zero-%d  %7.2f samples/s  peak RSS %s  sent %s/step\n",
                      round + 1, stage, d.samples_per_s, mib(d.peak_rss).c_str(),
                      d.sent_bytes >= 0 ? mib(d.sent_bytes).c_str() : "?");
        } else {
          std::printf("  round %d  deepspeed zero-%d  %s\n", round + 1, stage, d.why.c_str());
        }
        deepspeed[stage].push_back(d);
      }
      if (!python) continue;
      Run f = run_peer(*python, "fsdp2", config, 3, ranks, threads, steps, warmup);
      if (f.ok) {
        std::printf("  round %d  fsdp2             %7.2f samples/s  peak RSS %s  sent %s/step\n",
                    round + 1, f.samples_per_s, mib(f.peak_rss).c_str(),
                    f.sent_bytes >= 0 ? mib(f.sent_bytes).c_str() : "?");
      } else {
        std::printf("  round %d  fsdp2    %s\n", round + 1, f.why.c_str());
      }
      fsdp2.push_back(f);
    }
  }

  // psi's units: what a ring moves of the fp32 model in one reduce-scatter or allgather.
  const double unit = 4 * psi * (ranks - 1) / std::max(1, ranks);
  std::printf(
      "\n| stage | troupe samples/s | DeepSpeed samples/s | troupe/DS | troupe RSS | DS RSS | "
      "RSS troupe/DS | troupe model state | troupe sent/step | DS sent/step |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int stage : stages) {
    const std::vector<Run>& t = troupe[stage];
    const std::vector<Run>& d = deepspeed[stage];
    const bool peer =
        !d.empty() && std::any_of(d.begin(), d.end(), [](const Run& r) { return r.ok; });
    char sent[64] = "-";
    if (unit > 0) std::snprintf(sent, sizeof sent, "%.2f psi", med(t, &Run::sent_bytes) / unit);
    char ds_sent[64] = "-";
    if (peer && unit > 0 && med(d, &Run::sent_bytes) > 0) {
      std::snprintf(ds_sent, sizeof ds_sent, "%.2f psi", med(d, &Run::sent_bytes) / unit);
    }
    std::printf(
        "| %d | %.2f | %s | %s | %s | %s | %s | %s | %s | %s |\n", stage,
        med(t, &Run::samples_per_s),
        peer ? std::to_string(med(d, &Run::samples_per_s)).substr(0, 6).c_str() : "-",
        peer ? (std::to_string(ratio(t, d, &Run::samples_per_s)).substr(0, 4) + "x").c_str() : "-",
        mib(med(t, &Run::peak_rss)).c_str(), peer ? mib(med(d, &Run::peak_rss)).c_str() : "-",
        peer ? (std::to_string(ratio(t, d, &Run::peak_rss)).substr(0, 4) + "x").c_str() : "-",
        mib(med(t, &Run::model_state)).c_str(), sent, ds_sent);
  }
  const bool have3 = troupe.count(3) > 0, have0 = troupe.count(0) > 0;
  std::printf("\nGoals:\n");
  if (have3 && have0) {
    std::printf("  troupe ZeRO-3 / troupe DDP samples/s: %.2f (goal >= 0.95)\n",
                ratio(troupe[3], troupe[0], &Run::samples_per_s));
  }
  for (int stage : stages) {
    const std::vector<Run>& d = deepspeed[stage];
    if (std::none_of(d.begin(), d.end(), [](const Run& r) { return r.ok; })) continue;
    const double goal = stage == 3 ? 1.5 : stage == 0 ? 1.0 : 1.25;
    std::printf(
        "  zero-%d: troupe / DeepSpeed samples/s %.2f (goal >= %.2f), peak RSS %.2f "
        "(goal <= 0.5)\n",
        stage, ratio(troupe[stage], deepspeed[stage], &Run::samples_per_s), goal,
        ratio(troupe[stage], deepspeed[stage], &Run::peak_rss));
  }
  if (have3 && std::any_of(fsdp2.begin(), fsdp2.end(), [](const Run& r) { return r.ok; })) {
    std::printf("  troupe ZeRO-3 / FSDP2 samples/s: %.2f (goal >= 1.4), peak RSS %.2f\n",
                ratio(troupe[3], fsdp2, &Run::samples_per_s),
                ratio(troupe[3], fsdp2, &Run::peak_rss));
  }
  if (have3 && unit > 0) {
    std::printf("  troupe ZeRO-3 sent per step: %.3f psi (goal: within 5%% of 3)\n",
                med(troupe[3], &Run::sent_bytes) / unit);
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"bench\": \"zero_bench\", \"ranks\": " << ranks << ", \"threads\": " << threads
        << ", \"params\": " << psi << ", \"stages\": [";
    for (size_t i = 0; i < stages.size(); ++i) {
      const int s = stages[i];
      out << (i ? ", " : "") << "{\"stage\": " << s
          << ", \"troupe_samples_per_s\": " << med(troupe[s], &Run::samples_per_s)
          << ", \"troupe_peak_rss\": " << med(troupe[s], &Run::peak_rss)
          << ", \"troupe_sent_bytes\": " << med(troupe[s], &Run::sent_bytes)
          << ", \"troupe_model_state\": " << med(troupe[s], &Run::model_state)
          << ", \"deepspeed_samples_per_s\": " << med(deepspeed[s], &Run::samples_per_s)
          << ", \"deepspeed_peak_rss\": " << med(deepspeed[s], &Run::peak_rss)
          << ", \"deepspeed_sent_bytes\": " << med(deepspeed[s], &Run::sent_bytes) << "}";
    }
    out << "], \"fsdp2_samples_per_s\": " << med(fsdp2, &Run::samples_per_s)
        << ", \"fsdp2_peak_rss\": " << med(fsdp2, &Run::peak_rss) << "}\n";
    if (!out) {
      std::fprintf(stderr, "zero_bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (flags.get("--config", "").empty()) std::remove(config.c_str());
  return 0;
}
