#include "actors/zero_param_gather.h"

#include <algorithm>

#include "actors/step_clock.h"

namespace troupe::actors {
namespace {

// A segment used again within this many pieces stays gathered: a block's
// forward and its backward have only the head between them.
constexpr int kReuseDistance = 2;

}  // namespace

std::vector<std::vector<int>> ParamGather::pieces(int num_layers) {
  const int L = num_layers, E = 0, F = L + 1;
  std::vector<std::vector<int>> p;
  p.push_back({E});
  for (int l = 0; l < L; ++l)
    p.push_back({1 + l});
  p.push_back({F, E});
  for (int l = L - 1; l >= 0; --l)
    p.push_back({1 + l});
  p.push_back({E});
  return p;
}

ParamGather::ParamGather(const ParamGatherOptions& options, nn::Model& gpt, CollectiveGroup& group,
                         const ZeroPartition& partition, const float* own_params, BufferPool& pool)
    : options_(options),
      gpt_(gpt),
      group_(group),
      partition_(partition),
      own_params_(own_params),
      pieces_(pieces(gpt.config().num_layers())),
      pool_(pool) {
  for (const nn::ParamRange& r : gpt.layout().segment_ranges()) {
    Segment s;
    s.range = r;
    for (size_t count : partition_.counts(r.begin, r.end))
      s.bytes.push_back(count * sizeof(float));
    s.persistent =
        options_.buffered && static_cast<int64_t>(r.size()) < options_.persistence_threshold;
    segments_.push_back(std::move(s));
  }
}

absl::Status ParamGather::issue(int segment) {
  Segment& s = segments_[segment];
  const nn::ParamRange own = partition_.own();
  const nn::ParamRange mine = partition_.own_in(s.range.begin, s.range.end);
  const float* input = nullptr;
  float* output = nullptr;
  if (options_.buffered) {
    absl::StatusOr<nn::FloatBuffer> buffer = pool_.take(s.range.size(), /*zero=*/false);
    if (!buffer.ok()) return buffer.status();
    s.buffer = *std::move(buffer);
    // (This rank's block may be empty: then it is not read.)
    input = mine.size() > 0 ? own_params_ + (mine.begin - own.begin) : own_params_;
    output = s.buffer.data();
  } else {
    input = gpt_.params() + mine.begin;  // in place: this rank's block of the output
    output = gpt_.params() + s.range.begin;
  }
  s.issued_at = now_ms();
  s.work = group_.allgather_v_async(input, output, s.bytes);
  s.present = true;
  s.waited = false;
  return absl::OkStatus();
}

absl::Status ParamGather::wait(int segment) {
  Segment& s = segments_[segment];
  if (s.waited) return absl::OkStatus();
  const double t0 = now_ms();
  absl::Status st = CollectiveGroup::wait(s.work);
  wait_ms_ += now_ms() - t0;
  if (!st.ok()) return st;
  comm_ms_ += ms_since_epoch(s.work.finished_at()) - s.issued_at;
  s.waited = true;
  if (options_.buffered) return gpt_.bind_parameters(s.range.begin, s.range.end, s.buffer.data());
  return absl::OkStatus();
}

absl::Status ParamGather::begin_step(int micro_batches) {
  drain();
  wait_ms_ = comm_ms_ = 0;
  micro_batches_ = std::max(micro_batches, 1);
  micro_ = 0;
  failed_ = absl::OkStatus();
  if (!options_.buffered) {
    // Every step, whatever this rank's shard did: whether a rank joins a
    // collective must never depend on what it alone knows.
    for (int i = 0; i < static_cast<int>(segments_.size()); ++i) {
      if (absl::Status s = issue(i); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  for (int i = 0; i < static_cast<int>(segments_.size()); ++i) {
    if (!segments_[i].persistent) continue;
    if (absl::Status s = issue(i); !s.ok()) return s;
  }
  prefetch(0);
  return absl::OkStatus();
}

size_t ParamGather::live_elements() const {
  size_t n = 0;
  for (const Segment& s : segments_)
    if (s.present) n += s.range.size();
  return n;
}

void ParamGather::prefetch(int from_pos) {
  if (options_.prefetch_elements <= 0) return;
  const int end = micro_batches_ * num_pieces();
  size_t in_flight = 0;
  for (const Segment& s : segments_)
    if (s.present && !s.waited && !s.persistent) in_flight += s.range.size();
  size_t live = live_elements();
  const auto prefetch = static_cast<size_t>(options_.prefetch_elements);
  const auto max_live = static_cast<size_t>(std::max<int64_t>(options_.max_live_elements, 0));
  // One micro-batch ahead at most.
  for (int pos = from_pos; pos < std::min(end, from_pos + num_pieces()); ++pos) {
    for (int seg : at(pos)) {
      Segment& s = segments_[seg];
      if (s.present || s.persistent) continue;
      const size_t n = s.range.size();
      if (in_flight > 0 && in_flight + n > prefetch) return;
      if (live + n > max_live) return;
      // A gather this rank cannot issue now must not be issued later instead:
      // the ranks' collectives would pair up out of order. The step fails.
      if (absl::Status st = issue(seg); !st.ok()) {
        failed_ = st;
        return;
      }
      in_flight += n;
      live += n;
    }
  }
}

absl::Status ParamGather::acquire(int piece) {
  if (!failed_.ok()) return failed_;
  if (!all_.empty()) return absl::OkStatus();  // gather_all bound everything
  const int pos = position(micro_, piece);
  for (int seg : at(pos)) {
    if (!segments_[seg].present) {
      if (absl::Status s = issue(seg); !s.ok()) return s;
    }
  }
  for (int seg : at(pos)) {
    if (absl::Status s = wait(seg); !s.ok()) return s;
  }
  if (options_.buffered) prefetch(pos + 1);
  return failed_;
}

void ParamGather::release(int piece) {
  const int pos = position(micro_, piece);
  if (options_.buffered && all_.empty()) {
    const int end = micro_batches_ * num_pieces();
    for (int seg : at(pos)) {
      if (segments_[seg].persistent) continue;
      bool soon = false;
      for (int q = pos + 1; q <= pos + kReuseDistance && q < end; ++q) {
        const std::vector<int>& uses = at(q);
        soon = soon || std::find(uses.begin(), uses.end(), seg) != uses.end();
      }
      if (!soon) free_segment(seg);
    }
  }
  if (piece + 1 == num_pieces()) ++micro_;
}

void ParamGather::free_segment(int segment) {
  Segment& s = segments_[segment];
  if (s.present && !s.waited) CollectiveGroup::wait(s.work).IgnoreError();
  pool_.give(std::move(s.buffer));
  s.present = false;
  s.waited = false;
}

absl::Status ParamGather::gather_all() {
  if (!options_.buffered) {
    if (absl::Status s = begin_step(1); !s.ok()) return s;
    for (int i = 0; i < static_cast<int>(segments_.size()); ++i) {
      if (absl::Status s = wait(i); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  drain();
  const nn::ParamRange whole = partition_.whole();
  absl::StatusOr<nn::FloatBuffer> taken = pool_.take(whole.size(), /*zero=*/false);
  if (!taken.ok()) return taken.status();
  nn::FloatBuffer buffer = *std::move(taken);
  std::vector<size_t> bytes;
  for (size_t count : partition_.counts(whole.begin, whole.end))
    bytes.push_back(count * sizeof(float));
  absl::Status s =
      CollectiveGroup::wait(group_.allgather_v_async(own_params_, buffer.data(), bytes));
  if (s.ok()) s = gpt_.bind_parameters(whole.begin, whole.end, buffer.data());
  if (!s.ok()) {
    pool_.drop(std::move(buffer));
    return s;
  }
  all_.push_back(std::move(buffer));
  return absl::OkStatus();
}

void ParamGather::drain() {
  for (int i = 0; i < static_cast<int>(segments_.size()); ++i) {
    Segment& s = segments_[i];
    if (s.present && !s.waited) {
      CollectiveGroup::wait(s.work).IgnoreError();  // the step that issued it reports it
      s.waited = !options_.buffered;
    }
    if (options_.buffered) free_segment(i);
  }
  // The whole model's copy is not wanted again until the next evaluation.
  for (nn::FloatBuffer& b : all_)
    pool_.drop(std::move(b));
  all_.clear();
}

}  // namespace troupe::actors
