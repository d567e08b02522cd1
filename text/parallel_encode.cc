#include "text/parallel_encode.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace troupe::text {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 18;

bool cut_allowed(absl::string_view text, size_t p) {
  const auto c = static_cast<unsigned char>(text[p]);
  return text[p - 1] == '\n' && c > 0x20 && c < 0x7f;
}

// Runs work(i) for i in [0, n) on up to `threads` threads.
template <typename F>
void run_parallel(size_t n, int threads, F&& work) {
  const size_t workers = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i)
      work(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;)
        work(i);
    });
  }
  for (std::thread& t : pool)
    t.join();
}

// The text's pieces, as encode_parallel cuts them.
std::vector<absl::string_view> chunks_of(const Tokenizer& tokenizer, absl::string_view text) {
  std::vector<absl::string_view> chunks;
  if (!tokenizer.splits_at_lines() || text.size() <= kChunkBytes) {
    chunks.push_back(text);
    return chunks;
  }
  size_t at = 0;
  for (size_t cut : line_cuts(text, kChunkBytes)) {
    chunks.push_back(text.substr(at, cut - at));
    at = cut;
  }
  chunks.push_back(text.substr(at));
  return chunks;
}

void encode_one(const Tokenizer& tokenizer, absl::string_view text, bool special,
                std::vector<int32_t>* out) {
  if (special) {
    tokenizer.encode_with_special(text, out);
  } else {
    tokenizer.encode(text, out);
  }
}

std::vector<int32_t> join(std::vector<std::vector<int32_t>>& parts) {
  size_t total = 0;
  for (const auto& p : parts)
    total += p.size();
  std::vector<int32_t> ids;
  ids.reserve(total);
  for (auto& p : parts) {
    ids.insert(ids.end(), p.begin(), p.end());
    std::vector<int32_t>().swap(p);
  }
  return ids;
}

}  // namespace

std::vector<size_t> line_cuts(absl::string_view text, size_t chunk_bytes) {
  std::vector<size_t> cuts;
  if (chunk_bytes == 0) return cuts;
  size_t target = chunk_bytes;
  while (target < text.size()) {
    size_t p = target;
    while (p < text.size() && !cut_allowed(text, p))
      ++p;
    if (p >= text.size()) break;
    cuts.push_back(p);
    target = p + chunk_bytes;
  }
  return cuts;
}

std::vector<int32_t> encode_parallel(const Tokenizer& tokenizer, absl::string_view text,
                                     int threads, bool special) {
  std::vector<absl::string_view> chunks = chunks_of(tokenizer, text);
  std::vector<std::vector<int32_t>> parts(chunks.size());
  run_parallel(chunks.size(), threads,
               [&](size_t i) { encode_one(tokenizer, chunks[i], special, &parts[i]); });
  return join(parts);
}

std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer,
                                                   std::span<const absl::string_view> documents,
                                                   int threads, bool special) {
  // Every chunk of every document is one unit of work; documents are joined afterwards.
  std::vector<std::pair<size_t, absl::string_view>> units;
  for (size_t d = 0; d < documents.size(); ++d) {
    for (absl::string_view chunk : chunks_of(tokenizer, documents[d]))
      units.emplace_back(d, chunk);
  }
  std::vector<std::vector<int32_t>> parts(units.size());
  run_parallel(units.size(), threads,
               [&](size_t i) { encode_one(tokenizer, units[i].second, special, &parts[i]); });
  std::vector<std::vector<int32_t>> out(documents.size());
  size_t u = 0;
  for (size_t d = 0; d < documents.size(); ++d) {
    std::vector<std::vector<int32_t>> mine;
    for (; u < units.size() && units[u].first == d; ++u)
      mine.push_back(std::move(parts[u]));
    out[d] = join(mine);
  }
  return out;
}

}  // namespace troupe::text
