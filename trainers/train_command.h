// The training commands of the troupe executable:
//
//   troupe train --config FILE [--local N | --head HOST:PORT] [--steps N] [--output DIR]
//   troupe generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--seed S]
//
// Exit codes: 0 done, 1 the run failed, 2 a usage or config error.
#pragma once

#include <string>
#include <vector>

namespace troupe::trainers {

int train_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);

}  // namespace troupe::trainers
