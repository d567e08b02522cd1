// Tensor-parallel ranks simulated as threads of one test process: a group whose all-reduces wait
// for every rank, reduce in rank order and hand the result back (the same bits on every rank).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "nn/layers/parallel.h"

namespace troupe::nn {

// tp ranks as threads: each collective waits for all, reduces in rank order, hands back.
class SimulatedGroup {
 public:
  explicit SimulatedGroup(int tp) : tp_(tp), sync_(tp), slots_(tp) {}

  AllReduceFn sum(int rank) {
    return [this, rank](float* data, size_t n) { return reduce(rank, data, n, false); };
  }
  AllReduceFn max(int rank) {
    return [this, rank](float* data, size_t n) { return reduce(rank, data, n, true); };
  }
  // A rank whose work failed leaves the group for good, between collectives: the others'
  // collectives, the one they wait in and every later one, return Aborted instead of waiting.
  void leave() {
    aborted_ = true;
    sync_.arrive_and_drop();
  }
  void run(const std::function<void(int rank)>& body) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < tp_; r++)
      ranks.emplace_back(body, r);
    for (std::thread& t : ranks)
      t.join();
  }
  int calls() const { return calls_; }

 private:
  struct Slot {
    float* data;
    size_t n;
  };
  absl::Status reduce(int rank, float* data, size_t n, bool is_max) {
    slots_[rank] = {data, n};
    sync_.arrive_and_wait();
    if (aborted_) return absl::AbortedError("a rank of the simulated group left it");
    if (rank == 0) {
      calls_++;
      result_.assign(slots_[0].data, slots_[0].data + n);
      for (int r = 1; r < tp_; r++) {
        if (slots_[r].n != n) ADD_FAILURE() << "rank " << r << " reduces " << slots_[r].n;
        for (size_t i = 0; i < n; i++) {
          float v = slots_[r].data[i];
          result_[i] = is_max ? std::max(result_[i], v) : result_[i] + v;
        }
      }
    }
    sync_.arrive_and_wait();
    std::copy(result_.begin(), result_.end(), data);
    sync_.arrive_and_wait();
    return absl::OkStatus();
  }

  const int tp_;
  std::barrier<> sync_;
  std::vector<Slot> slots_;
  std::vector<float> result_;
  int calls_ = 0;
  std::atomic<bool> aborted_ = false;
};

}  // namespace troupe::nn
