#include "checkpoint/shard_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "checkpoint/checksum.h"
#include "nn/model/model.h"

namespace troupe::checkpoint {
namespace {

// Bytes appended (and hashed) at a time: large enough for sequential
// bandwidth, small enough to stay in cache between the hash and the write.
constexpr size_t kWriteChunk = size_t{4} << 20;

std::string step_name(const std::string& step_dir) {
  return std::filesystem::path(step_dir).filename().string();
}

absl::Status file_error(const std::string& step_dir, const std::string& file,
                        const std::string& what) {
  return absl::DataLossError(absl::StrCat(step_name(step_dir), ": ", file, " ", what));
}

// A file that is not there is missing data (DataLoss); any other failure to
// open it (permissions, too many open files, a file server's hiccup) is
// passed on as it is, so that it is not taken for a corrupt checkpoint.
absl::Status open_error(const std::string& step_dir, const std::string& file,
                        const absl::Status& s) {
  if (absl::IsNotFound(s)) return file_error(step_dir, file, "is missing");
  return s;
}

const ShardEntry* find_entry(const ShardRecord& shard, const std::string& state) {
  for (const ShardEntry& e : shard.entries) {
    if (e.state == state) return &e;
  }
  return nullptr;
}

// Reads one entry whole into `out` (its length in bytes) and checks it.
absl::Status read_entry(io::Env* env, const std::string& step_dir, const ShardRecord& shard,
                        const ShardEntry& entry, void* out) {
  absl::StatusOr<std::unique_ptr<io::RandomAccessFile>> f =
      env->new_random_access_file(step_dir + "/" + shard.file);
  if (!f.ok()) return open_error(step_dir, shard.file, f.status());
  if ((*f)->size() < entry.offset + entry.length) {
    return file_error(step_dir, shard.file,
                      absl::StrCat("is truncated (", (*f)->size(), " bytes; its ", entry.state,
                                   " ends at ", entry.offset + entry.length, ")"));
  }
  if (absl::Status s = (*f)->read(entry.offset, entry.length, out); !s.ok()) {
    // A short read is a truncated file; any other error is the reader's, not the data's.
    if (absl::IsDataLoss(s)) return file_error(step_dir, shard.file, "is truncated");
    return s;
  }
  if (xxh64(out, entry.length) != entry.xxh64) {
    return file_error(step_dir, shard.file,
                      absl::StrCat("checksum mismatch in its ", entry.state, " (corrupt?)"));
  }
  return absl::OkStatus();
}

// One contiguous copy: reader elements [dst, dst + n) from elements
// [src, src + n) of the checkpoint's slice t.
struct Piece {
  int64_t dst = 0;
  int t = 0;
  int64_t src = 0;
  int64_t n = 0;
};

// A run of the whole model's buffer, [whole, whole + n), that the
// checkpoint's slice t holds at [at, at + n) of its buffer.
struct SavedRun {
  int64_t whole = 0;
  int t = 0;
  int64_t at = 0;
  int64_t n = 0;
};

// Where a checkpoint of `tp` slices holds each element of the whole model,
// in whole-buffer order: the runs tile it once (a tensor every slice holds
// whole is taken from slice 0).
std::vector<SavedRun> saved_runs(const nn::ModelConfig& model, int tp) {
  const nn::ModelLayout whole = nn::model_layout(model);
  std::set<size_t> replicated;  // where such tensors start in the whole buffer
  for (const nn::ParamTensor& t : whole.tensors()) {
    if (t.split == nn::TensorSplit::kReplicated) replicated.insert(t.offset);
  }
  std::vector<SavedRun> runs;
  for (int t = 0; t < tp; ++t) {
    const nn::ModelLayout slice = nn::model_layout(model, {.rank = t, .size = tp});
    nn::for_each_slice_run(whole, slice, [&](size_t w, size_t at, size_t n) {
      if (t > 0 && replicated.contains(w)) return;
      runs.push_back({.whole = static_cast<int64_t>(w),
                      .t = t,
                      .at = static_cast<int64_t>(at),
                      .n = static_cast<int64_t>(n)});
    });
  }
  std::sort(runs.begin(), runs.end(),
            [](const SavedRun& a, const SavedRun& b) { return a.whole < b.whole; });
  return runs;
}

// The copies that fill elements [begin, end) of the reader's slice from the
// checkpoint's runs, in the reader's order, touching ones merged.
std::vector<Piece> pieces_of(const nn::ModelLayout& whole, const nn::ModelLayout& reader,
                             const std::vector<SavedRun>& saved, int64_t begin, int64_t end) {
  std::vector<Piece> pieces;
  auto add = [&](const Piece& piece) {
    if (!pieces.empty()) {
      Piece& last = pieces.back();
      if (last.t == piece.t && last.dst + last.n == piece.dst && last.src + last.n == piece.src) {
        last.n += piece.n;
        return;
      }
    }
    pieces.push_back(piece);
  };
  nn::for_each_slice_run(whole, reader, [&](size_t w, size_t at, size_t n) {
    const auto run_at = static_cast<int64_t>(at);
    const int64_t lo = std::max(begin, run_at);
    const int64_t hi = std::min(end, run_at + static_cast<int64_t>(n));
    if (lo >= hi) return;
    const int64_t whole_lo = static_cast<int64_t>(w) + (lo - run_at);
    const int64_t whole_hi = whole_lo + (hi - lo);
    // The saved run holding whole_lo, then those after it up to whole_hi.
    auto it = std::upper_bound(saved.begin(), saved.end(), whole_lo,
                               [](int64_t x, const SavedRun& r) { return x < r.whole; });
    for (--it; it != saved.end() && it->whole < whole_hi; ++it) {
      const int64_t from = std::max(whole_lo, it->whole);
      const int64_t to = std::min(whole_hi, it->whole + it->n);
      if (from >= to) continue;
      add({.dst = lo - begin + (from - whole_lo),
           .t = it->t,
           .src = it->at + (from - it->whole),
           .n = to - from});
    }
  });
  return pieces;
}

}  // namespace

absl::StatusOr<std::vector<ShardEntry>> write_shard_file(
    io::Env* env, const std::string& dir, const std::string& name,
    const std::vector<StateArray>& arrays, const std::function<void(uint64_t)>& await_bytes) {
  std::vector<ShardEntry> entries;
  absl::Status written =
      io::write_file_atomically(env, dir + "/" + name, [&](io::WritableFile& f) -> absl::Status {
        uint64_t offset = 0;
        for (const StateArray& a : arrays) {
          const size_t bytes = a.n * sizeof(float);
          const char* p = reinterpret_cast<const char*>(a.data);
          Xxh64 sum;
          for (size_t at = 0; at < bytes; at += kWriteChunk) {
            const size_t n = std::min(kWriteChunk, bytes - at);
            if (await_bytes) await_bytes(offset + at + n);
            sum.update(p + at, n);
            if (absl::Status s = f.append(p + at, n); !s.ok()) return s;
          }
          entries.push_back(
              {.state = a.state, .offset = offset, .length = bytes, .xxh64 = sum.digest()});
          offset += bytes;
        }
        return absl::OkStatus();
      });
  if (!written.ok()) return written;
  return entries;
}

absl::Status read_state(io::Env* env, const std::string& step_dir, const Manifest& manifest,
                        const std::string& state, const nn::ModelConfig& model,
                        const nn::TensorSlice& slice, int64_t begin, int64_t end, float* out) {
  if (model != manifest.model) {
    return absl::InvalidArgumentError(
        absl::StrCat(step_name(step_dir), ": the checkpoint is of another model"));
  }
  if (absl::Status s = nn::validate_slice(model, slice); !s.ok()) return s;
  const nn::ModelLayout whole = nn::model_layout(model);
  const nn::ModelLayout reader = nn::model_layout(model, slice);
  if (begin < 0 || begin > end || end > static_cast<int64_t>(reader.num_params())) {
    return absl::InvalidArgumentError(absl::StrCat("read_state: range [", begin, ", ", end,
                                                   ") is not within the slice's ",
                                                   reader.num_params(), " elements"));
  }
  if (begin == end) return absl::OkStatus();
  const std::vector<Piece> pieces =
      pieces_of(whole, reader, saved_runs(model, manifest.layout.tp), begin, end);
  std::vector<float> scratch;
  int64_t copied = 0;
  for (const ShardRecord& shard : manifest.shards) {
    if (shard.begin == shard.end) continue;
    const ShardEntry* entry = find_entry(shard, state);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(step_name(step_dir), ": the checkpoint holds no ", state, " state"));
    }
    auto overlaps = [&](const Piece& p) {
      return p.t == shard.owner.t && p.src < shard.end && shard.begin < p.src + p.n;
    };
    if (std::none_of(pieces.begin(), pieces.end(), overlaps)) continue;
    // The common case, a range saved by one owner and read back whole:
    // straight into the reader's buffer.
    const Piece* exact = nullptr;
    for (const Piece& p : pieces) {
      if (p.t == shard.owner.t && p.src <= shard.begin && shard.end <= p.src + p.n) exact = &p;
    }
    float* entry_data;
    if (exact != nullptr) {
      entry_data = out + exact->dst + (shard.begin - exact->src);
    } else {
      scratch.resize(static_cast<size_t>(shard.end - shard.begin));
      entry_data = scratch.data();
    }
    if (absl::Status s = read_entry(env, step_dir, shard, *entry, entry_data); !s.ok()) return s;
    for (const Piece& p : pieces) {
      if (p.t != shard.owner.t) continue;
      const int64_t lo = std::max(p.src, shard.begin);
      const int64_t hi = std::min(p.src + p.n, shard.end);
      if (lo >= hi) continue;
      copied += hi - lo;
      if (exact != nullptr) continue;
      std::memcpy(out + p.dst + (lo - p.src), entry_data + (lo - shard.begin),
                  static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
  if (copied != end - begin) {
    return absl::DataLossError(absl::StrCat(step_name(step_dir), ": its shards hold ", copied,
                                            " of the ", end - begin, " elements asked for"));
  }
  return absl::OkStatus();
}

absl::Status check_files(io::Env* env, const std::string& step_dir, const Manifest& manifest) {
  for (const ShardRecord& shard : manifest.shards) {
    uint64_t needed = 0;
    for (const ShardEntry& e : shard.entries)
      needed = std::max(needed, e.offset + e.length);
    absl::StatusOr<std::unique_ptr<io::RandomAccessFile>> f =
        env->new_random_access_file(step_dir + "/" + shard.file);
    if (!f.ok()) return open_error(step_dir, shard.file, f.status());
    if ((*f)->size() != needed) {
      return file_error(step_dir, shard.file,
                        absl::StrCat("has ", (*f)->size(), " bytes, the manifest says ", needed,
                                     (*f)->size() < needed ? " (truncated)" : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status verify_checksums(io::Env* env, const std::string& step_dir, const Manifest& manifest) {
  std::vector<char> buffer;
  for (const ShardRecord& shard : manifest.shards) {
    for (const ShardEntry& e : shard.entries) {
      buffer.resize(e.length);
      if (absl::Status s = read_entry(env, step_dir, shard, e, buffer.data()); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::checkpoint
