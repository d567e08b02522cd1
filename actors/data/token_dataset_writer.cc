#include "actors/data/token_dataset_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace troupe::actors {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

absl::Status posix_error(const std::string& context, int err) {
  std::string text = absl::StrCat(context, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(text);
    default:
      return absl::UnavailableError(text);
  }
}

absl::Status write_all(int fd, const uint8_t* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return posix_error(absl::StrCat("cannot write ", path), errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Writes `text` to a new file `path` and syncs it.
absl::Status write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return posix_error(absl::StrCat("cannot create ", path), errno);
  absl::Status s = write_all(fd, reinterpret_cast<const uint8_t*>(text.data()), text.size(), path);
  if (s.ok() && ::fsync(fd) != 0) s = posix_error(absl::StrCat("cannot sync ", path), errno);
  if (::close(fd) != 0 && s.ok()) s = posix_error(absl::StrCat("cannot close ", path), errno);
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> TokenDatasetWriter::create(
    std::string prefix, int64_t vocab_size, std::string tokenizer, std::string source) {
  if (vocab_size < 1 || vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat("dataset ", prefix, ": vocab_size ", vocab_size,
                                                   " is not in [1, ", kMaxVocabSize, "]"));
  }
  // The prefix's directory is created if missing (as `troupe data prepare
  // --output data/name` is expected to do).
  std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return absl::InternalError(absl::StrCat("dataset ", prefix, ": ", ec.message()));
  std::unique_ptr<TokenDatasetWriter> w(new TokenDatasetWriter());
  w->prefix_ = std::move(prefix);
  const std::string suffix = absl::StrCat(".tmp.", ::getpid());
  w->bin_temp_ = w->prefix_ + ".bin" + suffix;
  w->json_temp_ = w->prefix_ + ".json" + suffix;
  w->header_ = {.dtype = dtype_for_vocab(vocab_size),
                .vocab_size = vocab_size,
                .num_tokens = 0,
                .tokenizer = std::move(tokenizer),
                .source = std::move(source)};
  w->fd_ = ::open(w->bin_temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) {
    return posix_error(
        absl::StrCat("cannot write dataset ", w->prefix_, ": cannot create ", w->bin_temp_), errno);
  }
  w->buffer_.reserve(kBufferBytes);
  return w;
}

TokenDatasetWriter::~TokenDatasetWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::remove(bin_temp_.c_str());
    std::remove(json_temp_.c_str());
  }
}

absl::Status TokenDatasetWriter::append(std::span<const int32_t> tokens) {
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset ", prefix_, ": append after finish"));
  }
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (tokens[k] < 0 || tokens[k] >= header_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset ", prefix_, ": token ", header_.num_tokens + static_cast<int64_t>(k), " is ",
          tokens[k], ", not in [0, ", header_.vocab_size, ")"));
    }
  }
  const int width = dtype_bytes(header_.dtype);
  for (int32_t token : tokens) {
    const uint32_t t = static_cast<uint32_t>(token);
    buffer_.push_back(static_cast<uint8_t>(t));
    buffer_.push_back(static_cast<uint8_t>(t >> 8));
    if (width == 4) {
      buffer_.push_back(static_cast<uint8_t>(t >> 16));
      buffer_.push_back(static_cast<uint8_t>(t >> 24));
    }
    if (buffer_.size() >= kBufferBytes) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
  }
  header_.num_tokens += static_cast<int64_t>(tokens.size());
  return absl::OkStatus();
}

absl::Status TokenDatasetWriter::flush() {
  absl::Status s = write_all(fd_, buffer_.data(), buffer_.size(), bin_temp_);
  buffer_.clear();
  return s;
}

absl::Status TokenDatasetWriter::finish() {
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("dataset ", prefix_, ": finished twice"));
  }
  finished_ = true;
  absl::Status s = flush();
  if (s.ok() && ::fsync(fd_) != 0) s = posix_error(absl::StrCat("cannot sync ", bin_temp_), errno);
  if (::close(fd_) != 0 && s.ok()) s = posix_error(absl::StrCat("cannot close ", bin_temp_), errno);
  fd_ = -1;
  if (s.ok()) s = write_file(json_temp_, header_to_json(header_));
  if (!s.ok()) return s;
  const std::string bin = prefix_ + ".bin";
  const std::string json = prefix_ + ".json";
  if (std::rename(bin_temp_.c_str(), bin.c_str()) != 0) {
    return posix_error(absl::StrCat("cannot rename ", bin_temp_, " to ", bin), errno);
  }
  committed_ = true;  // the .bin is in place; only the header's temp file is left
  if (std::rename(json_temp_.c_str(), json.c_str()) != 0) {
    absl::Status err = posix_error(absl::StrCat("cannot rename ", json_temp_, " to ", json), errno);
    std::remove(json_temp_.c_str());
    return err;
  }
  return absl::OkStatus();
}

absl::Status write_token_dataset(const std::string& prefix, std::span<const int32_t> tokens,
                                 int64_t vocab_size, const std::string& tokenizer,
                                 const std::string& source) {
  auto writer = TokenDatasetWriter::create(prefix, vocab_size, tokenizer, source);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->append(tokens); !s.ok()) return s;
  return (*writer)->finish();
}

}  // namespace troupe::actors
