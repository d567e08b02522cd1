#include "actors/data/token_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/data/llmc_format.h"
#include "actors/data/nanogpt_format.h"

namespace troupe::actors {

static_assert(std::endian::native == std::endian::little,
              "PREFIX.bin is little-endian and is read as it is");

struct TokenDataset::Storage {
  TokenDatasetHeader header;
  std::string name;
  // The tokens: PREFIX.bin, open read-only and read with pread (not mapped:
  // a file truncated while in use then fails a read with an error naming
  // it, where a mapping would kill the process with SIGBUS), or `owned`.
  int fd = -1;
  uint64_t first_token_byte = 0;  // an llm.c file's header comes first
  std::optional<LlmcFormat> llmc;
  std::vector<int32_t> owned;
  bool in_memory = false;  // `owned`, checked by from_tokens

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

absl::Status posix_error(const std::string& context, int err) {
  std::string text = absl::StrCat(context, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(text) : absl::UnavailableError(text);
}

absl::StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return posix_error(absl::StrCat("cannot open dataset header ", path), errno);
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return posix_error(absl::StrCat("cannot read dataset header ", path), errno);
  return text.str();
}

template <class T>
absl::Status copy_tokens(const T* in, int64_t offset, int64_t count, int64_t vocab_size,
                         const std::string& name, int32_t* out) {
  for (int64_t k = 0; k < count; ++k) {
    uint32_t token = in[k];  // token offset + k
    if (token >= static_cast<uint64_t>(vocab_size)) {
      return absl::DataLossError(absl::StrCat(name, ": token ", offset + k, " is ", token,
                                              ", not below vocab_size ", vocab_size,
                                              " (corrupt file or wrong header?)"));
    }
    out[k] = static_cast<int32_t>(token);
  }
  return absl::OkStatus();
}

// Reads tokens [offset, offset + count) of width T from `fd` (PREFIX.bin),
// whose first token is at byte `base`.
template <class T>
absl::Status read_file_tokens(int fd, uint64_t base, int64_t offset, int64_t count,
                              const TokenDatasetHeader& header, const std::string& name,
                              int32_t* out) {
  std::vector<T> buffer(static_cast<size_t>(count));
  auto* raw = reinterpret_cast<char*>(buffer.data());
  const size_t bytes = buffer.size() * sizeof(T);
  for (size_t done = 0; done < bytes;) {
    ssize_t n = ::pread(fd, raw + done, bytes - done,
                        static_cast<off_t>(base + static_cast<size_t>(offset) * sizeof(T) + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return posix_error(absl::StrCat("cannot read ", name), errno);
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(
          name, ": ends before token ", offset + static_cast<int64_t>(done / sizeof(T)), " of the ",
          header.num_tokens,
          " its header promises: the file was truncated or replaced while in use"));
    }
    done += static_cast<size_t>(n);
  }
  return copy_tokens(buffer.data(), offset, count, header.vocab_size, name, out);
}

// Reads exactly n bytes at byte `at` of `fd`; false when the file is shorter.
absl::StatusOr<bool> read_at(int fd, uint64_t at, size_t n, void* out, const std::string& name) {
  auto* raw = static_cast<char*>(out);
  for (size_t done = 0; done < n;) {
    ssize_t got = ::pread(fd, raw + done, n - done, static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return posix_error(absl::StrCat("cannot read ", name), errno);
    if (got == 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::optional<TokenDataset>> TokenDataset::open_llmc(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // a prefix, or nothing: open() names what is missing
  auto storage = std::make_shared<Storage>();
  storage->fd = fd;  // closed with the storage
  storage->name = path;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return posix_error(absl::StrCat("cannot stat ", path), errno);
  std::array<int32_t, kLlmcHeaderInts> header{};
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < sizeof(header)) {
    return std::nullopt;
  }
  absl::StatusOr<bool> read = read_at(fd, 0, sizeof(header), header.data(), path);
  if (!read.ok()) return read.status();
  if (!*read || !is_llmc_magic(header[0])) return std::nullopt;
  absl::StatusOr<TokenDatasetHeader> parsed =
      parse_llmc_header(header, static_cast<uint64_t>(st.st_size), path);
  if (!parsed.ok()) return parsed.status();
  storage->header = *std::move(parsed);
  storage->first_token_byte = sizeof(header);
  storage->llmc = header[0] == llmc_format_info(LlmcFormat::kGpt2).magic ? LlmcFormat::kGpt2
                                                                         : LlmcFormat::kLlama3;
  return TokenDataset(std::move(storage));
}

absl::StatusOr<std::optional<TokenDataset>> TokenDataset::open_nanogpt(const std::string& path) {
  // A FILE.bin with no troupe header FILE.json beside it (that would make it a troupe dataset's).
  if (path.size() <= 4 || path.compare(path.size() - 4, 4, ".bin") != 0) return std::nullopt;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (::access((path.substr(0, path.size() - 4) + ".json").c_str(), F_OK) == 0) {
    return std::nullopt;
  }
  absl::StatusOr<TokenDatasetHeader> header =
      nanogpt_header(path, static_cast<uint64_t>(st.st_size));
  if (!header.ok()) return header.status();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return posix_error(absl::StrCat("cannot open ", path), errno);
  auto storage = std::make_shared<Storage>();
  storage->fd = fd;
  storage->name = path;
  storage->header = *std::move(header);
  return TokenDataset(std::move(storage));
}

absl::StatusOr<TokenDataset> TokenDataset::open(const std::string& prefix) {
  absl::StatusOr<std::optional<TokenDataset>> llmc = open_llmc(prefix);
  if (!llmc.ok()) return llmc.status();
  if (llmc->has_value()) return **std::move(llmc);
  absl::StatusOr<std::optional<TokenDataset>> nanogpt = open_nanogpt(prefix);
  if (!nanogpt.ok()) return nanogpt.status();
  if (nanogpt->has_value()) return **std::move(nanogpt);
  const std::string json_path = prefix + ".json";
  const std::string bin_path = prefix + ".bin";
  absl::StatusOr<std::string> text = read_text(json_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<TokenDatasetHeader> header = parse_header(*text, json_path);
  if (!header.ok()) return header.status();

  auto storage = std::make_shared<Storage>();
  storage->header = *std::move(header);
  storage->name = bin_path;
  int fd = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return posix_error(absl::StrCat("cannot open dataset tokens ", bin_path), errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return posix_error(absl::StrCat("cannot stat ", bin_path), err);
  }
  const TokenDatasetHeader& h = storage->header;
  const uint64_t expected = static_cast<uint64_t>(h.num_tokens) * dtype_bytes(h.dtype);
  if (static_cast<uint64_t>(st.st_size) != expected) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        bin_path, ": ", st.st_size, " bytes, but ", json_path, " says ", h.num_tokens, " ",
        dtype_name(h.dtype), " tokens (", expected, " bytes); truncated or mismatched files?"));
  }
  storage->fd = fd;
  return TokenDataset(std::move(storage));
}

absl::StatusOr<TokenDataset> TokenDataset::from_tokens(std::vector<int32_t> tokens,
                                                       int64_t vocab_size, std::string tokenizer,
                                                       std::string source) {
  const std::string name = "in-memory tokens";
  if (vocab_size < 1 || vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": vocab_size ", vocab_size, " is not in [1, ", kMaxVocabSize, "]"));
  }
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (tokens[k] < 0 || tokens[k] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": token ", k, " is ", tokens[k], ", not in [0, ", vocab_size, ")"));
    }
  }
  auto storage = std::make_shared<Storage>();
  storage->header = {.dtype = dtype_for_vocab(vocab_size),
                     .vocab_size = vocab_size,
                     .num_tokens = static_cast<int64_t>(tokens.size()),
                     .tokenizer = std::move(tokenizer),
                     .source = std::move(source)};
  storage->name = name;
  storage->owned = std::move(tokens);
  storage->in_memory = true;
  return TokenDataset(std::move(storage));
}

const TokenDatasetHeader& TokenDataset::header() const {
  return storage_->header;
}

const std::string& TokenDataset::name() const {
  return storage_->name;
}

std::optional<LlmcFormat> TokenDataset::llmc_format() const {
  return storage_->llmc;
}

int64_t TokenDataset::num_samples(int seq_len) const {
  const int64_t n = num_tokens();
  return n < 1 || seq_len < 1 ? 0 : (n - 1) / seq_len;
}

absl::Status TokenDataset::read_tokens(int64_t offset, int64_t count, int32_t* out) const {
  const Storage& s = *storage_;
  if (offset < 0 || count < 0 || offset > s.header.num_tokens - count) {
    return absl::OutOfRangeError(absl::StrCat(s.name, ": tokens [", offset, ", ", offset + count,
                                              ") are not within [0, ", s.header.num_tokens, ")"));
  }
  if (count == 0) return absl::OkStatus();
  if (s.in_memory) {
    std::memcpy(out, s.owned.data() + offset, static_cast<size_t>(count) * sizeof(int32_t));
    return absl::OkStatus();
  }
  if (s.header.dtype == TokenDtype::kUint16) {
    return read_file_tokens<uint16_t>(s.fd, s.first_token_byte, offset, count, s.header, s.name,
                                      out);
  }
  return read_file_tokens<uint32_t>(s.fd, s.first_token_byte, offset, count, s.header, s.name, out);
}

absl::Status TokenDataset::read_sample(int64_t i, int seq_len, int32_t* inputs,
                                       int32_t* targets) const {
  const int64_t n = num_samples(seq_len);
  if (i < 0 || i >= n) {
    return absl::OutOfRangeError(absl::StrCat(name(), ": sample ", i, " of seq_len ", seq_len,
                                              " is not within [0, ", n, ")"));
  }
  // One read of the window's T + 1 tokens (for a file: one pread).
  std::vector<int32_t> window(static_cast<size_t>(seq_len) + 1);
  if (absl::Status s = read_tokens(i * seq_len, seq_len + 1, window.data()); !s.ok()) return s;
  std::memcpy(inputs, window.data(), static_cast<size_t>(seq_len) * sizeof(int32_t));
  std::memcpy(targets, window.data() + 1, static_cast<size_t>(seq_len) * sizeof(int32_t));
  return absl::OkStatus();
}

absl::Status TokenDataset::for_each_chunk(
    const std::function<absl::Status(int64_t offset, std::span<const int32_t> tokens)>& fn) const {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int32_t> buffer(static_cast<size_t>(std::min(kChunk, num_tokens())));
  for (int64_t offset = 0; offset < num_tokens(); offset += kChunk) {
    const int64_t count = std::min(kChunk, num_tokens() - offset);
    if (absl::Status s = read_tokens(offset, count, buffer.data()); !s.ok()) return s;
    if (absl::Status s = fn(offset, std::span<const int32_t>(buffer.data(), count)); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::Status TokenDataset::check_tokens() const {
  return for_each_chunk([](int64_t, std::span<const int32_t>) { return absl::OkStatus(); });
}

}  // namespace troupe::actors
