#include "actors/stage_turns.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace troupe::actors {
namespace {

// How often a waiting chunk asks go_on.
constexpr auto kPoll = std::chrono::milliseconds(20);

}  // namespace

std::shared_ptr<StageTurns> StageTurns::of(const std::string& key,
                                           const std::vector<pipeline::PipelineOp>& program) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<StageTurns>> stages;
  std::lock_guard<std::mutex> lock(mu);
  // Stages whose chunks are all gone (a finished job, a respawn) leave.
  std::erase_if(stages, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<StageTurns>& entry = stages[key];
  std::shared_ptr<StageTurns> turns = entry.lock();
  if (turns == nullptr) {
    turns = std::make_shared<StageTurns>(program);
    entry = turns;
  }
  return turns;
}

StageTurns::StageTurns(const std::vector<pipeline::PipelineOp>& program) {
  int chunks = 0;
  for (const pipeline::PipelineOp& op : program) {
    chunk_at_.push_back(op.chunk);
    chunks = std::max(chunks, op.chunk + 1);
  }
  chunks_.resize(static_cast<size_t>(chunks));
}

size_t StageTurns::next_of(int chunk, size_t after) const {
  size_t i = after;
  while (i < chunk_at_.size() && chunk_at_[i] != chunk)
    ++i;
  return i;
}

void StageTurns::join(int chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  Chunk& c = chunks_[static_cast<size_t>(chunk)];
  c = Chunk{.present = true};
  changed_.notify_all();
}

void StageTurns::leave(int chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  chunks_[static_cast<size_t>(chunk)].present = false;
  changed_.notify_all();
}

void StageTurns::begin(int chunk, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  Chunk& c = chunks_[static_cast<size_t>(chunk)];
  c.step = step;
  c.ended = false;
  c.next = next_of(chunk, 0);
  changed_.notify_all();
}

bool StageTurns::is_next(int chunk, int64_t step, size_t turn) const {
  for (size_t other = 0; other < chunks_.size(); ++other) {
    const Chunk& c = chunks_[other];
    if (static_cast<int>(other) == chunk || !c.present) continue;
    if (c.step < step) return false;  // it has not begun the step yet
    if (c.step == step && !c.ended && c.next < turn) return false;
  }
  return true;
}

absl::Status StageTurns::await(int chunk, int64_t step, size_t turn, const GoOn& go_on,
                               absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!is_next(chunk, step, turn)) {
    if (go_on) {
      lock.unlock();
      absl::Status s = go_on();
      lock.lock();
      if (!s.ok()) return s;
      if (is_next(chunk, step, turn)) break;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("model chunk ", chunk, " waited too long for its turn at op ", turn,
                       " of step ", step, " (another chunk of its stage did not go on)"));
    }
    changed_.wait_for(lock, kPoll);
  }
  return absl::OkStatus();
}

void StageTurns::ran(int chunk, size_t turn) {
  std::lock_guard<std::mutex> lock(mu_);
  chunks_[static_cast<size_t>(chunk)].next = next_of(chunk, turn + 1);
  changed_.notify_all();
}

void StageTurns::end(int chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  chunks_[static_cast<size_t>(chunk)].ended = true;
  changed_.notify_all();
}

}  // namespace troupe::actors
