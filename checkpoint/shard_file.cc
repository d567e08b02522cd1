#include "checkpoint/shard_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "checkpoint/checksum.h"

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
absl::Status read_entry(Env* env, const std::string& step_dir, const ShardRecord& shard,
                        const ShardEntry& entry, void* out) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> f =
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

// One contiguous copy: reader elements [dst, dst + n) from checkpoint buffer
// elements [src, src + n).
struct Piece {
  int64_t dst = 0;
  int64_t src = 0;
  int64_t n = 0;
};

}  // namespace

absl::StatusOr<std::vector<ShardEntry>> write_shard_file(
    Env* env, const std::string& dir, const std::string& name,
    const std::vector<StateArray>& arrays, const std::function<void(uint64_t)>& await_bytes) {
  const std::string tmp = dir + "/" + name + ".tmp";
  std::vector<ShardEntry> entries;
  absl::Status written = [&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<WritableFile>> f = env->new_writable_file(tmp);
    if (!f.ok()) return f.status();
    uint64_t offset = 0;
    for (const StateArray& a : arrays) {
      const size_t bytes = a.n * sizeof(float);
      const char* p = reinterpret_cast<const char*>(a.data);
      Xxh64 sum;
      for (size_t at = 0; at < bytes; at += kWriteChunk) {
        const size_t n = std::min(kWriteChunk, bytes - at);
        if (await_bytes) await_bytes(offset + at + n);
        sum.update(p + at, n);
        if (absl::Status s = (*f)->append(p + at, n); !s.ok()) return s;
      }
      entries.push_back(
          {.state = a.state, .offset = offset, .length = bytes, .xxh64 = sum.digest()});
      offset += bytes;
    }
    if (absl::Status s = (*f)->sync(); !s.ok()) return s;
    if (absl::Status s = (*f)->close(); !s.ok()) return s;
    return env->rename_file(tmp, dir + "/" + name);
  }();
  if (!written.ok()) {
    env->remove_file(tmp).IgnoreError();  // it may not exist
    return written;
  }
  if (absl::Status s = env->sync_dir(dir); !s.ok()) return s;
  return entries;
}

absl::Status read_state(Env* env, const std::string& step_dir, const Manifest& manifest,
                        const std::string& state, const std::vector<TensorRecord>& tensors,
                        int64_t begin, int64_t end, float* out) {
  if (begin >= end) return absl::OkStatus();
  // The reader's range, tensor by tensor, mapped through the names to the
  // checkpoint's buffer; touching pieces merged.
  std::map<std::string, const TensorRecord*> saved;
  for (const TensorRecord& t : manifest.tensors)
    saved[t.name] = &t;
  std::vector<Piece> pieces;
  for (const TensorRecord& t : tensors) {
    const int64_t lo = std::max(begin, t.offset);
    const int64_t hi = std::min(end, t.offset + t.size);
    if (lo >= hi) continue;
    auto it = saved.find(t.name);
    if (it == saved.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(step_name(step_dir), ": the checkpoint has no tensor ", t.name));
    }
    if (it->second->shape != t.shape) {
      return absl::InvalidArgumentError(absl::StrCat(step_name(step_dir), ": tensor ", t.name,
                                                     " has another shape in the checkpoint"));
    }
    Piece piece{.dst = lo - begin, .src = it->second->offset + (lo - t.offset), .n = hi - lo};
    if (!pieces.empty() && pieces.back().dst + pieces.back().n == piece.dst &&
        pieces.back().src + pieces.back().n == piece.src) {
      pieces.back().n += piece.n;
    } else {
      pieces.push_back(piece);
    }
  }
  std::vector<float> scratch;
  int64_t copied = 0;
  for (const ShardRecord& shard : manifest.shards) {
    if (shard.begin == shard.end) continue;
    const ShardEntry* entry = find_entry(shard, state);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(step_name(step_dir), ": the checkpoint holds no ", state, " state"));
    }
    bool needed = false;
    for (const Piece& p : pieces)
      needed = needed || (p.src < shard.end && shard.begin < p.src + p.n);
    if (!needed) continue;
    // The common case, a range saved by one owner and read back whole:
    // straight into the reader's buffer.
    const Piece* exact = nullptr;
    for (const Piece& p : pieces) {
      if (p.src <= shard.begin && shard.end <= p.src + p.n) exact = &p;
    }
    float* whole;
    if (exact != nullptr) {
      whole = out + exact->dst + (shard.begin - exact->src);
    } else {
      scratch.resize(static_cast<size_t>(shard.end - shard.begin));
      whole = scratch.data();
    }
    if (absl::Status s = read_entry(env, step_dir, shard, *entry, whole); !s.ok()) return s;
    for (const Piece& p : pieces) {
      const int64_t lo = std::max(p.src, shard.begin);
      const int64_t hi = std::min(p.src + p.n, shard.end);
      if (lo >= hi) continue;
      copied += hi - lo;
      if (exact != nullptr) continue;
      std::memcpy(out + p.dst + (lo - p.src), whole + (lo - shard.begin),
                  static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
  if (copied != end - begin) {
    return absl::DataLossError(absl::StrCat(step_name(step_dir), ": its shards hold ", copied,
                                            " of the ", end - begin, " elements asked for"));
  }
  return absl::OkStatus();
}

absl::Status check_files(Env* env, const std::string& step_dir, const Manifest& manifest) {
  for (const ShardRecord& shard : manifest.shards) {
    uint64_t needed = 0;
    for (const ShardEntry& e : shard.entries)
      needed = std::max(needed, e.offset + e.length);
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> f =
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

absl::Status verify_checksums(Env* env, const std::string& step_dir, const Manifest& manifest) {
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
