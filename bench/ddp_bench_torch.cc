// ddp_bench's peer: PyTorch DistributedDataParallel, run by bench/ddp_bench_torch.py; see
// ddp_bench.h.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/ddp_bench.h"

#ifndef TROUPE_DDP_BENCH_TORCH_SCRIPT
#define TROUPE_DDP_BENCH_TORCH_SCRIPT "bench/ddp_bench_torch.py"
#endif

namespace troupe::bench::ddp {
namespace {

constexpr int kTorchTimeoutS = 900;  // one PyTorch run, start to end

}  // namespace

TorchRun run_torch(const std::string& python, const ModelConfig& mc, int dp, int threads, int steps,
                   int warmup, int64_t bucket_elements) {
  const double bucket_mb = static_cast<double>(bucket_elements) * 4 / (1 << 20);
  char bucket[32];
  std::snprintf(bucket, sizeof bucket, "%.6f", bucket_mb);
  std::string cmd = "timeout -k 10 " + std::to_string(kTorchTimeoutS + 60) + " " +
                    shell_quote(python) + " " + shell_quote(TROUPE_DDP_BENCH_TORCH_SCRIPT) +
                    " --dp " + std::to_string(dp) + " --threads " + std::to_string(threads) +
                    " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                    " --bucket-cap-mb " + bucket + " --timeout " + std::to_string(kTorchTimeoutS) +
                    " --parent-pid " + std::to_string(::getpid()) + " --config " + mc.name + ":" +
                    std::to_string(mc.L) + ":" + std::to_string(mc.C) + ":" +
                    std::to_string(mc.NH) + ":" + std::to_string(mc.V) + ":" +
                    std::to_string(mc.T) + ":" + std::to_string(mc.B);
  std::fflush(stdout);
  TorchRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    run.why = "peer failed: cannot start " + python;
    return run;
  }
  const std::string out = read_all(pipe);
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::string json;  // the last line that holds a JSON object
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') json = line;
  }
  if (code == 3) {
    std::string reason = json_string(json, "skipped");
    run.why = "peer skipped: " + (reason.empty() ? std::string("cannot run here") : reason);
    return run;
  }
  if (code == 124 || code == 137) {
    run.why = "peer failed: timed out after " + std::to_string(kTorchTimeoutS) + " s";
    return run;
  }
  std::optional<double> samples = json_number(json, "samples_per_s");
  if (code != 0 || !samples) {
    run.why = "peer failed: exit code " + std::to_string(code) + " (its reason is above)";
    return run;
  }
  run.ok = true;
  run.version = json_string(json, "torch_version");
  run.attention = json_string(json, "attention");
  auto num = [&](const char* key) { return json_number(json, key).value_or(0); };
  run.step_s = num("step_s");
  run.samples_per_s = *samples;
  run.tokens_per_s = num("tokens_per_s");
  run.params = num("params");
  run.cpu_share = num("cpu_share");
  run.cpu_s_per_step = num("cpu_s_per_step");
  run.nosync_step_s = num("nosync_step_s");
  run.comm_alone_s = num("comm_alone_s");
  run.num_buckets = num("num_buckets");
  run.tail_s = json_number(json, "tail_s").value_or(-1);
  run.loss_first = num("loss_first");
  run.loss_last = num("loss_last");
  return run;
}

}  // namespace troupe::bench::ddp
