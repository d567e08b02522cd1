// The training commands of the troupe executable:
//
//   troupe train --config FILE [--local N | --head HOST:PORT] [--steps N] [--output DIR]
//   troupe generate (--model DIR | --checkpoint DIR [--step N]) --prompt TEXT [--max-tokens N]
//                   [--temperature T] [--seed S]
//   troupe export --checkpoint DIR [--step N] --output FILE.safetensors
//
// Exit codes: 0 done, 1 the run failed, 2 a usage or config error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/flags.h"

namespace troupe::trainers {

int train_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);

// --step N of export and generate: N, or -1 without the flag;
// InvalidArgument for anything but a number >= 0.
absl::StatusOr<int64_t> parse_step_flag(const cluster::Flags& flags);

}  // namespace troupe::trainers
