#include "trainers/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::trainers {
namespace {

// --- Protocol buffer wire format, the few shapes an Event needs. ---

void varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void key(std::string* out, int field, int wire_type) {
  varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
template <typename T>
void little_endian(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 are little-endian
  out->append(bytes, sizeof(T));
}
void bytes_field(std::string* out, int field, std::string_view data) {
  key(out, field, 2);
  varint(out, data.size());
  out->append(data);
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary). Summary: value = 1 (repeated Value). Value: tag = 1, simple_value = 2
// (float).
std::string event(double wall_time, int64_t step) {
  std::string e;
  key(&e, 1, 1);
  little_endian(&e, wall_time);
  key(&e, 2, 0);
  varint(&e, static_cast<uint64_t>(step));
  return e;
}

uint32_t mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) != 0 ? 0x82f63b78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  for (unsigned char b : data)
    crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view data) {
  return mask(crc32c(data));
}

absl::StatusOr<TensorBoardWriter> TensorBoardWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("TensorBoard: cannot create ", dir, ": ", ec.message()));
  }
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  // TensorBoard's own naming: events.out.tfevents.<seconds>.<host>, here with the pid so that
  // two runs in one directory in the same second do not share a file.
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(now),
                                        ".", host_name(), ".", ::getpid(), ".troupe");
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("TensorBoard: cannot create ", path, ": ", std::strerror(errno)));
  }
  TensorBoardWriter writer(file, path);
  std::string first = event(now, 0);
  bytes_field(&first, 3, "brain.Event:2");
  if (absl::Status s = writer.record(first); !s.ok()) return s;
  return writer;
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)),
      path_(std::move(other.path_)),
      failed_(std::move(other.failed_)),
      flushed_(other.flushed_) {}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::record(const std::string& data, bool flush) {
  if (!failed_.ok()) return failed_;
  std::string header;
  little_endian(&header, static_cast<uint64_t>(data.size()));
  std::string framed = header;
  little_endian(&framed, masked_crc32c(header));
  framed += data;
  little_endian(&framed, masked_crc32c(data));
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size() ||
      (flush && std::fflush(file_) != 0)) {
    failed_ = absl::InternalError(
        absl::StrCat("TensorBoard: writing ", path_, ": ", std::strerror(errno)));
  }
  return failed_;
}

absl::Status TensorBoardWriter::scalar(std::string_view tag, int64_t step, double value,
                                       double wall_seconds, bool flush) {
  std::string v;
  bytes_field(&v, 1, tag);
  key(&v, 2, 5);
  little_endian(&v, static_cast<float>(value));
  std::string summary;
  bytes_field(&summary, 1, v);
  std::string e = event(wall_seconds, step);
  bytes_field(&e, 5, summary);
  return record(e, flush);
}

absl::Status TensorBoardWriter::report(const cluster::MetricsReport& report) {
  for (const cluster::MetricPoint& p : report.points) {
    if (p.name == "step" || !std::isfinite(p.value)) continue;
    std::string tag = p.name;
    if (!p.labels.empty()) {
      // One label, not a rank's: name/value.
      const size_t eq = p.labels.find("=\"");
      if (p.labels.find("rank=") != std::string::npos || eq == std::string::npos ||
          p.labels.find(',') != std::string::npos || !p.labels.ends_with("\"")) {
        continue;
      }
      tag = absl::StrCat(p.name, "/", p.labels.substr(eq + 2, p.labels.size() - eq - 3));
    }
    if (absl::Status s = scalar(tag, report.step, p.value, report.unix_seconds, false); !s.ok()) {
      return s;
    }
  }
  // A step's scalars reach the file together, at most every second (TensorBoard's own writer
  // flushes every two minutes); the rest at close.
  const absl::Time now = absl::Now();
  if (now - flushed_ < absl::Seconds(1)) return failed_;
  flushed_ = now;
  if (failed_.ok() && std::fflush(file_) != 0) {
    failed_ = absl::InternalError(
        absl::StrCat("TensorBoard: writing ", path_, ": ", std::strerror(errno)));
  }
  return failed_;
}

}  // namespace troupe::trainers
