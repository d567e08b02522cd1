// nanoGPT's Shakespeare character-level run, troupe against nanoGPT's own PyTorch code, in one
// invocation.
//
//   nanogpt_bench [--steps 2000] [--threads N] [--data DIR] [--json FILE] [--no-peer]
//
// The run: nanoGPT's CPU configuration for shakespeare_char (4 layers, 4 heads, 128 wide, context
// 64, batch 12, AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1, 100 warm-up steps and a cosine
// decay to 1e-4 at the last step, gradient clipping at 1.0, dropout 0), on the byte-level
// Shakespeare datasets `troupe data prepare --tokenizer bytes` makes from the corpus of
// scripts/fetch_text.sh: DIR/shakespeare_char (38 works) for training and DIR/shakespeare_char_val
// (Hamlet, Julius Caesar, The Tempest and the Sonnets) for validation. DIR: --data, else
// $TROUPE_DATA, else data/ in the source tree. When the datasets are missing and the corpus is
// there the bench prepares them; without the corpus it says it is skipped and exits 0 (as CI's
// smoke run needs).
//
// troupe: `troupe train` on examples/configs/shakespeare_char.json made into one process's run
// (parallel.dp 1, micro-batch 12, no checkpoints, training.steps and the scheduler's
// total_num_steps --steps, validation at the end only) with --local 1 --threads N; its summary
// gives the throughput (tokens over the sum of the steps' times) and the validation loss over every
// window of the validation split; its metrics file the median step.
//
// Peer: bench/nanogpt_bench_peer.py, nanoGPT's model.py and train.py loop (random windows through
// np.memmap, AdamW from configure_optimizers, get_lr, clip_grad_norm_) with the same config, steps,
// threads (torch.set_num_threads) and data, the validation loss over the same windows; run by the
// first python that can import torch (bench_util.h's find_torch_python) after troupe's run (never
// at the same time). Without torch the peer is skipped.
//
// Both sides run with OPENBLAS_CORETYPE set where OpenBLAS does not know the CPU
// (bench/compute_env.h); troupe also with OMP_WAIT_POLICY=passive under OpenBLAS's pthreads build,
// the peer with the policy the bench was started with. Ratio = troupe / PyTorch tokens/s over the
// whole run (above 1: troupe is faster); goal: at least 1.5x, and a validation loss of at most 1.95
// after the 2,000 steps.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_util.h"
#include "bench/compute_env.h"
#include "nn/gemm.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_NANOGPT_BENCH_PEER_SCRIPT
#define TROUPE_NANOGPT_BENCH_PEER_SCRIPT "bench/nanogpt_bench_peer.py"
#endif
#ifndef TROUPE_SOURCE_DIR
#define TROUPE_SOURCE_DIR "."
#endif

namespace troupe::bench {
namespace {

namespace fs = std::filesystem;

constexpr double kGoalRatio = 1.5;
constexpr double kGoalValLoss = 1.95;
constexpr int kConfigSteps = 2000;  // the config's run, which the validation goal is for
constexpr int kTokensPerStep = 12 * 64;
// The works held out for validation, as scripts/demo.sh and docs/data.md hold them out.
const char* const kValWorks[] = {"hamlet.txt", "julius_caesar.txt", "tempest.txt", "sonnets.txt"};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

std::string default_data_dir() {
  const char* env = std::getenv("TROUPE_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(TROUPE_SOURCE_DIR "/data");
}

bool datasets_present(const std::string& prefix) {
  for (const char* suffix : {".bin", ".json", "_val.bin", "_val.json"}) {
    if (!fs::exists(prefix + suffix)) return false;
  }
  return true;
}

// Makes DIR/shakespeare_char{,_val} from the corpus in DIR/shakespeare. Returns why not, or "".
std::string prepare_datasets(const std::string& dir, const std::string& prefix) {
  const fs::path corpus = fs::path(dir) / "shakespeare";
  std::vector<std::string> works;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(corpus, ec)) {
    if (e.path().extension() == ".txt") works.push_back(e.path().string());
  }
  std::sort(works.begin(), works.end());
  std::vector<std::string> val;
  for (const char* name : kValWorks) {
    const fs::path p = corpus / name;
    if (!fs::exists(p)) return absl::StrCat(p.string(), " is missing");
    val.push_back(p.string());
  }
  std::string cmd =
      absl::StrCat(shell_quote(TROUPE_BINARY), " data prepare --tokenizer bytes --val-files ",
                   shell_quote(absl::StrJoin(val, ",")), " --output ", shell_quote(prefix));
  for (const std::string& w : works)
    absl::StrAppend(&cmd, " ", shell_quote(w));
  std::printf("nanogpt_bench: preparing the datasets: %s\n", cmd.c_str());
  std::fflush(stdout);
  const int status = std::system(cmd.c_str());
  if (status != 0 || !datasets_present(prefix)) {
    return absl::StrCat("troupe data prepare failed (status ", status, ")");
  }
  return "";
}

struct Side {
  bool ran = false;
  std::string skipped;             // why not, when it did not run
  double tokens_per_s = 0;         // the whole run
  double tokens_per_s_median = 0;  // the median step (after the first 10)
  double val_loss = -1;
  double loss_first = 0, loss_last = 0;
  double step_s_p90 = 0;
  int slow_steps = 0;     // steps over twice the median
  double slow_share = 0;  // their share of the run's step time
  double cpu_share = 0;   // the peer only
  double load_after = -1;
  double seconds = 0;  // the invocation's wall time, start-up and validation included
  std::string version;
};

// The number after `key` in `line`, if `line` holds it.
std::optional<double> number_after(const std::string& line, const std::string& key) {
  const size_t at = line.find(key);
  if (at == std::string::npos) return std::nullopt;
  const char* begin = line.c_str() + at + key.size();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return v;
}

// Runs `cmd` through the shell, every line of its output (stdout and stderr) echoed with
// `prefix`; returns the output and sets *code to its exit status (-1: killed or not started).
std::string run_echoing(const std::string& cmd, const std::string& prefix, int* code) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *code = -1;
    return out;
  }
  char line[8192];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    out += line;
    std::printf("%s%s", prefix.c_str(), line);
    std::fflush(stdout);
  }
  const int status = ::pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

Side run_troupe(const std::string& prefix, int steps, int threads, int warmup,
                const std::string& work) {
  Side side;
  const std::string config_path = TROUPE_SOURCE_DIR "/examples/configs/shakespeare_char.json";
  std::ifstream in(config_path);
  nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    side.skipped = absl::StrCat("cannot read ", config_path);
    return side;
  }
  config["parallel"] = {{"dp", 1}};
  config["train_batch_size"] = 12;
  config["train_micro_batch_size_per_gpu"] = 12;
  config["gradient_accumulation_steps"] = 1;
  config.erase("checkpoint");
  config["scheduler"]["params"]["total_num_steps"] = steps;
  config["scheduler"]["params"]["warmup_num_steps"] = warmup;
  config["data"]["path"] = prefix;
  config["data"]["val_path"] = prefix + "_val";
  config["training"]["steps"] = steps;
  config["training"]["output_dir"] = work + "/run";
  config["training"].erase("eval_interval");  // validation at the end only
  const std::string run_config = work + "/shakespeare_char.json";
  std::ofstream(run_config) << config.dump(2) << "\n";

  const std::string cmd =
      absl::StrCat(shell_quote(TROUPE_BINARY), " train ", shell_quote(run_config),
                   " --local 1 --threads ", threads, " 2>&1");
  std::printf("troupe: running %s\n", cmd.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  int code = 0;
  const std::string out = run_echoing(cmd, "troupe: ", &code);
  side.seconds = seconds_since(start);
  side.load_after = load_average();
  std::istringstream lines(out);
  std::optional<double> tps, val;
  for (std::string line; std::getline(lines, line);) {
    if (auto v = number_after(line, "  throughput ")) tps = v;
    if (auto v = number_after(line, "  validation loss ")) val = v;
    if (line.rfind("done: ", 0) == 0) {
      const size_t at = line.find("loss ");
      if (at != std::string::npos) {
        std::sscanf(line.c_str() + at, "loss %lf -> %lf", &side.loss_first, &side.loss_last);
      }
    }
  }
  if (code != 0 || !tps || !val) {
    side.skipped = absl::StrCat("troupe train failed (exit status ", code, ")");
    return side;
  }
  side.ran = true;
  side.tokens_per_s = *tps;
  side.val_loss = *val;
  // The median step, from the metrics file (one line a step; validation lines have no step_ms).
  std::ifstream metrics(work + "/run/metrics.jsonl");
  std::vector<double> step_ms;
  for (std::string line; std::getline(metrics, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step_ms") && j["step_ms"].is_number()) {
      step_ms.push_back(j["step_ms"].get<double>());
    }
  }
  double total_ms = 0;
  for (double ms : step_ms)
    total_ms += ms;
  std::vector<double> timed = step_ms;
  if (timed.size() > 10) timed.erase(timed.begin(), timed.begin() + 10);
  const double m = median(timed);
  if (m > 0) {
    side.tokens_per_s_median = kTokensPerStep / (m / 1000);
    std::sort(timed.begin(), timed.end());
    side.step_s_p90 =
        timed[static_cast<size_t>(0.9 * static_cast<double>(timed.size() - 1))] / 1000;
    double slow_ms = 0;
    for (double ms : step_ms) {
      if (ms > 2 * m) {
        ++side.slow_steps;
        slow_ms += ms;
      }
    }
    side.slow_share = total_ms > 0 ? slow_ms / total_ms : 0;
  }
  return side;
}

Side run_peer(const std::string& python, const std::string& prefix, int steps, int threads,
              int warmup) {
  Side side;
  const std::string cmd = absl::StrCat(
      shell_quote(python), " ", shell_quote(TROUPE_NANOGPT_BENCH_PEER_SCRIPT), " --train ",
      shell_quote(prefix + ".bin"), " --val ", shell_quote(prefix + "_val.bin"), " --threads ",
      threads, " --steps ", steps, " --warmup-iters ", warmup, " --lr-decay-iters ", steps,
      " --parent-pid ", ::getpid());
  std::printf("torch: running %s\n", cmd.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  int code = 0;
  // stdout only: the progress on stderr goes to ours as it comes.
  const std::string out = run_echoing(cmd, "torch: ", &code);
  side.seconds = seconds_since(start);
  side.load_after = load_average();
  std::string last;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') last = line;
  }
  nlohmann::json j = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("skipped")) {
    side.skipped = j["skipped"].is_string() ? j["skipped"].get<std::string>() : "skipped";
    return side;
  }
  if (code != 0 || !j.is_object() || !j.contains("tokens_per_s")) {
    side.skipped = absl::StrCat("failed (exit status ", code, ")");
    return side;
  }
  side.ran = true;
  side.version = j.value("torch_version", std::string());
  side.tokens_per_s = j.value("tokens_per_s", 0.0);
  side.tokens_per_s_median = j.value("tokens_per_s_median", 0.0);
  side.val_loss = j.value("val_loss", -1.0);
  side.loss_first = j.value("loss_first", 0.0);
  side.loss_last = j.value("loss_last", 0.0);
  side.cpu_share = j.value("cpu_share", 0.0);
  side.step_s_p90 = j.value("step_s_p90", 0.0);
  side.slow_steps = j.value("slow_steps", 0);
  side.slow_share = j.value("slow_share", 0.0);
  return side;
}

nlohmann::json side_json(const Side& s) {
  nlohmann::json j = {{"ran", s.ran}};
  if (!s.ran) {
    j["skipped"] = s.skipped;
    return j;
  }
  j["tokens_per_s"] = s.tokens_per_s;
  j["tokens_per_s_median"] = s.tokens_per_s_median;
  j["val_loss"] = s.val_loss;
  j["loss_first"] = s.loss_first;
  j["loss_last"] = s.loss_last;
  j["seconds"] = s.seconds;
  j["load_after"] = s.load_after;
  j["step_s_p90"] = s.step_s_p90;
  j["slow_steps"] = s.slow_steps;
  j["slow_share"] = s.slow_share;
  if (!s.version.empty()) j["torch_version"] = s.version;
  if (s.cpu_share > 0) j["cpu_share"] = s.cpu_share;
  return j;
}

}  // namespace
}  // namespace troupe::bench

using namespace troupe::bench;

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  const int cores = cores_available();
  if (flags.has("--help")) {
    std::printf(
        "usage: nanogpt_bench [--steps 2000] [--threads %d] [--data DIR] [--json FILE] "
        "[--no-peer]\n"
        "DIR: what scripts/fetch_text.sh filled (default $TROUPE_DATA, else %s/data); the\n"
        "character-level datasets DIR/shakespeare_char{,_val} are prepared when missing.\n"
        "PyTorch (bench/nanogpt_bench_peer.py, nanoGPT's model and loop) runs as the peer when\n"
        "$TROUPE_TORCH_PYTHON (else the environment bench/setup_torch_peers.sh makes, python3,\n"
        "/usr/bin/python3) can import torch.\n",
        cores, TROUPE_SOURCE_DIR);
    return 0;
  }
  const int steps = static_cast<int>(flags.get_long("--steps", kConfigSteps));
  const int threads = static_cast<int>(flags.get_long("--threads", cores));
  const std::string dir = flags.get("--data", default_data_dir());
  const std::string json_path = flags.get("--json", "");
  if (steps < 2 || threads < 1) {
    std::fprintf(stderr, "nanogpt_bench: --steps must be at least 2, --threads at least 1\n");
    return 2;
  }
  // The config's 100 warm-up steps of 2,000, in proportion for shorter runs.
  const int warmup = std::clamp(steps / 20, 1, 100);

  reexec_keeping_peer_wait_policy(argv);  // bench/compute_env.h
  auto env_or = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr && *v != '\0' ? v : "unset");
  };

  const std::string prefix = dir + "/shakespeare_char";
  if (!datasets_present(prefix)) {
    if (!fs::exists(dir + "/shakespeare/" + kValWorks[0])) {
      std::printf(
          "nanogpt_bench: skipped: %s/shakespeare is missing (scripts/fetch_text.sh %s fetches "
          "the corpus)\n",
          dir.c_str(), dir.c_str());
      return 0;
    }
    if (const std::string why = prepare_datasets(dir, prefix); !why.empty()) {
      std::fprintf(stderr, "nanogpt_bench: %s\n", why.c_str());
      return 1;
    }
  }

  std::printf(
      "nanogpt_bench: shakespeare_char, 4 layers, 4 heads, 128 wide, context 64, batch 12; %d "
      "steps (%d warm-up), %d threads; %s, %d cores, load %.1f; OPENBLAS_CORETYPE %s, "
      "OMP_WAIT_POLICY %s (troupe)\n",
      steps, warmup, threads, cpu_model().c_str(), cores, load_average(),
      env_or("OPENBLAS_CORETYPE").c_str(), env_or("OMP_WAIT_POLICY").c_str());
  if (const std::string warning = troupe::nn::gemm_backend_warning(); !warning.empty()) {
    std::printf("nanogpt_bench: WARNING: troupe's GEMM: %s\n", warning.c_str());
  }
  std::fflush(stdout);

  std::error_code ec;
  const std::string work =
      (fs::temp_directory_path() / absl::StrCat("nanogpt_bench.", ::getpid())).string();
  fs::create_directories(work, ec);
  const Side ours = run_troupe(prefix, steps, threads, warmup, work);
  fs::remove_all(work, ec);
  if (!ours.ran) {
    std::fprintf(stderr, "nanogpt_bench: %s\n", ours.skipped.c_str());
    return 1;
  }

  restore_peer_wait_policy();  // the peer runs as PyTorch users run it
  Side peer;
  if (flags.has("--no-peer")) {
    peer.skipped = "--no-peer";
  } else if (std::optional<std::string> python = find_torch_python()) {
    peer = run_peer(*python, prefix, steps, threads, warmup);
  } else {
    peer.skipped =
        "torch is not installed (set TROUPE_TORCH_PYTHON to a python that can import torch; see "
        "docs/benchmarks.md)";
  }
  if (!peer.ran) std::printf("torch: %s - peer skipped\n", peer.skipped.c_str());

  std::printf("\n%-28s %14s %14s %8s\n", "case", "troupe", "PyTorch", "ratio");
  auto row = [&](const char* name, double a, double b, const char* unit) {
    if (b > 0) {
      std::printf("%-28s %14.0f %14.0f %7.2fx   (%s)\n", name, a, b, a / b, unit);
    } else {
      std::printf("%-28s %14.0f %14s %8s   (%s)\n", name, a, "-", "-", unit);
    }
  };
  row("tokens/s, whole run", ours.tokens_per_s, peer.ran ? peer.tokens_per_s : 0, "tokens/s");
  row("tokens/s, median step", ours.tokens_per_s_median, peer.ran ? peer.tokens_per_s_median : 0,
      "tokens/s");
  std::printf("%-28s %14.4f %14s\n", "validation loss", ours.val_loss,
              peer.ran ? absl::StrCat(peer.val_loss).c_str() : "-");
  std::printf("%-28s %14s %14s\n", "training loss, first -> last",
              absl::StrCat(ours.loss_first, " -> ", ours.loss_last).c_str(),
              peer.ran ? absl::StrCat(peer.loss_first, " -> ", peer.loss_last).c_str() : "-");
  auto tail = [](const Side& s) {
    return absl::StrFormat("p90 step %.1f ms, %d steps over twice the median (%.0f%% of the time)",
                           s.step_s_p90 * 1e3, s.slow_steps, 100 * s.slow_share);
  };
  std::printf("troupe: %s\n", tail(ours).c_str());
  if (peer.ran) std::printf("torch: %s\n", tail(peer).c_str());
  std::printf("load after troupe's run %.1f%s\n", ours.load_after,
              peer.ran ? absl::StrFormat(", after PyTorch's %.1f; PyTorch %s, its cpu share %.0f%%",
                                         peer.load_after, peer.version, 100 * peer.cpu_share)
                             .c_str()
                       : "");

  const double ratio =
      peer.ran && peer.tokens_per_s > 0 ? ours.tokens_per_s / peer.tokens_per_s : 0;
  std::vector<std::string> missed;
  if (peer.ran && ratio < kGoalRatio) missed.push_back(absl::StrFormat("ratio %.2fx", ratio));
  if (steps >= kConfigSteps && ours.val_loss > kGoalValLoss) {
    missed.push_back(absl::StrFormat("validation loss %.4f", ours.val_loss));
  }
  std::printf("goal: >= %.1fx, validation loss <= %.2f: %s%s%s\n", kGoalRatio, kGoalValLoss,
              missed.empty() ? (peer.ran ? "met" : "met where measured") : "not met: ",
              absl::StrJoin(missed, ", ").c_str(),
              absl::StrCat(peer.ran ? "" : " (no PyTorch figure)",
                           steps >= kConfigSteps ? "" : " (the loss goal is for 2000 steps)")
                  .c_str());

  if (!json_path.empty()) {
    const nlohmann::json j = {{"benchmark", "nanogpt_bench"},
                              {"peer", peer.ran ? absl::StrCat("PyTorch ", peer.version) : "none"},
                              {"steps", steps},
                              {"threads", threads},
                              {"cpu", cpu_model()},
                              {"troupe", side_json(ours)},
                              {"pytorch", side_json(peer)},
                              {"ratio", ratio}};
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "nanogpt_bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
