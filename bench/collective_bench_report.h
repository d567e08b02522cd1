// collective_bench's output: the figures every run brought back, as tables
// (one per rank count) and as JSON.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/collective_bench.h"

namespace troupe::bench::collective {

struct Report {
  Plan plan;
  int repeat = 1;
  std::string transport;  // troupe's
  std::string algorithm;  // troupe's
  // Each run's slowest-rank figures, by (rank count, library), in run order.
  std::map<std::pair<int, Library>, std::vector<RankFigures>> runs;
  // Peers that failed to run (not for a wrong result), with the error.
  std::map<Library, std::string> dropped;
};

// Prints, for each rank count: each size's iterations, troupe's algbw and
// busbw, the peers' busbw and troupe/peer busbw ratios (above 1: troupe
// faster); then the 8-byte latencies with peer/troupe ratios (above 1: troupe
// faster). GB/s are 1e9 bytes per second; figures are medians over runs.
void print_report(const Report& report, const std::vector<int>& rank_counts);

// Writes every figure: per rank count and size, each library's seconds per
// run, median time, algbw and busbw, and the ratios; the latencies; the
// skipped peers. Returns false if the file cannot be written.
bool write_report_json(const std::string& path, const Report& report,
                       const std::vector<int>& rank_counts);

}  // namespace troupe::bench::collective
