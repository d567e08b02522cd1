// troupe export: a checkpoint's weights as one safetensors file with Hugging
// Face GPT-2 names, for transformers' GPT2LMHeadModel (docs/checkpoint.md).
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/consolidate.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/safetensors.h"
#include "core/cluster/flags.h"
#include "nn/memory.h"
#include "trainers/train_command.h"

namespace troupe::trainers {
namespace {

void print_export_help() {
  std::printf(
      "usage: troupe export --checkpoint DIR [--step N] --output FILE.safetensors\n\n"
      "Writes the weights of a checkpoint (the newest in DIR whose files pass their\n"
      "checksums, or step N) as one safetensors file with Hugging Face GPT-2 names\n"
      "(transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), the linear\n"
      "layers in GPT-2's Conv1D orientation, and the GPT2Config in its metadata\n"
      "(\"config\"). Any layout's checkpoint (dp, ZeRO stage) gives the same file.\n\n"
      "  from transformers import GPT2Config, GPT2LMHeadModel\n"
      "  from safetensors import safe_open\n"
      "  import json, safetensors.torch\n"
      "  meta = safe_open(\"model.safetensors\", \"pt\").metadata()\n"
      "  model = GPT2LMHeadModel(GPT2Config(**json.loads(meta[\"config\"])))\n"
      "  model.load_state_dict(safetensors.torch.load_file(\"model.safetensors\"), "
      "strict=False)\n");
}

int fail(const std::string& text) {
  std::fprintf(stderr, "troupe export: %s\n", cluster::printable(text).c_str());
  return 1;
}

}  // namespace

absl::StatusOr<int64_t> parse_step_flag(const cluster::Flags& flags) {
  if (!flags.has("step")) return -1;
  int64_t step = 0;
  if (!absl::SimpleAtoi(flags.get("step"), &step) || step < 0) {
    return absl::InvalidArgumentError("--step takes a step number >= 0");
  }
  return step;
}

int export_command(const std::vector<std::string>& args) {
  auto flags = cluster::Flags::parse("export", args, {"checkpoint", "step", "output"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", cluster::printable(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help()) {
    print_export_help();
    return 0;
  }
  if (!flags->has("checkpoint") || !flags->has("output")) {
    std::fprintf(stderr, "troupe export: --checkpoint DIR and --output FILE are required\n");
    return 2;
  }
  absl::StatusOr<int64_t> step = parse_step_flag(*flags);
  if (!step.ok()) {
    std::fprintf(stderr, "troupe export: %s\n", std::string(step.status().message()).c_str());
    return 2;
  }
  checkpoint::Env* env = checkpoint::Env::posix();
  absl::StatusOr<checkpoint::ConsolidatedWeights> weights = checkpoint::consolidate(
      env, flags->get("checkpoint"), *step >= 0 ? std::optional<int64_t>(*step) : std::nullopt);
  if (!weights.ok()) return fail(std::string(weights.status().message()));
  for (const std::string& line : weights->skipped)
    std::fprintf(stderr, "troupe export: %s\n", cluster::printable(line).c_str());
  const checkpoint::Manifest& m = weights->manifest;
  std::vector<checkpoint::SafeTensor> tensors =
      checkpoint::hf_gpt2_tensors(m.model, weights->params.data());
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"config", checkpoint::hf_gpt2_config_json(m.model)},
      {"troupe_step", absl::StrCat(m.step)},
      {"troupe_checkpoint", weights->step_dir}};
  const std::string output = flags->get("output");
  if (absl::Status s = checkpoint::write_safetensors(env, output, tensors, metadata); !s.ok()) {
    return fail(std::string(s.message()));
  }
  int64_t values = 0;
  for (const checkpoint::SafeTensor& t : tensors)
    values += static_cast<int64_t>(t.data.size());
  std::printf("wrote %s: %zu tensors, %lld parameters (%s), GPT-2 names, from %s\n", output.c_str(),
              tensors.size(), static_cast<long long>(values), nn::format_bytes(values * 4).c_str(),
              weights->step_dir.c_str());
  return 0;
}

}  // namespace troupe::trainers
