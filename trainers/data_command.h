// `troupe data`: makes and inspects token datasets (actors/data/token_dataset.h).
//
//   troupe data prepare --output PREFIX FILE...      byte-level tokens of the files,
//                                                    concatenated in the order given
//   troupe data synth --task addition [--digits 2] [--samples 100000]
//                     [--seq-len 64] [--seed 1] --output PREFIX
//                                                    a synthetic task's training set
//   troupe data info PREFIX [--seq-len T]... [--check]
//                                                    the header, sample counts, and
//                                                    with --check every token's range
//
// Takes the arguments after "data" and returns the exit code: 0 on success,
// 1 on failure (a missing input, an output that cannot be written, a corrupt
// dataset: a message on stderr), 2 for a usage error.
#pragma once

#include <string>
#include <vector>

namespace troupe::trainers {

int data_command(const std::vector<std::string>& args);

}  // namespace troupe::trainers
