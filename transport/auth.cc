#include "transport/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace troupe::transport {
namespace {

std::string_view role_label(Role role) {
  return role == Role::kClient ? "troupe-auth-v1 client" : "troupe-auth-v1 server";
}

void fill_random(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) {
    // The OS entropy source failed; no safe way to go on.
    std::abort();
  }
}

}  // namespace

std::string generate_token() {
  std::array<uint8_t, 32> bytes;
  fill_random(bytes.data(), bytes.size());
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

absl::StatusOr<std::string> read_token_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return absl::NotFoundError(absl::StrCat("token file ", path, " does not exist"));
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read token file ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  std::string contents;
  absl::Status s;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file"));
  } else if (st.st_size > static_cast<off_t>(kMaxTokenFileBytes)) {
    s = absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " is ", st.st_size, " bytes: too large to hold a token"));
  } else {
    char buf[kMaxTokenFileBytes];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        s = absl::PermissionDeniedError(
            absl::StrCat("cannot read token file ", path, ": ", std::strerror(errno)));
        break;
      }
      contents.append(buf, static_cast<size_t>(n));
      if (contents.size() > kMaxTokenFileBytes) {
        s = absl::InvalidArgumentError(
            absl::StrCat("token file ", path, " is too large to hold a token"));
        break;
      }
    }
  }
  ::close(fd);
  if (!s.ok()) return s;
  std::string token(absl::StripAsciiWhitespace(contents));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

absl::Status write_token_file(const std::string& path, std::string_view token) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create token file ", path, ": ", std::strerror(errno)));
  }
  ::fchmod(fd, 0600);  // in case it existed with wider permissions
  std::string line = std::string(token) + "\n";
  ssize_t written = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size())) {
    return absl::InternalError(
        absl::StrCat("cannot write token file ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> resolve_token(const std::string& token_file) {
  if (!token_file.empty()) return read_token_file(token_file);
  if (const char* env = std::getenv("TROUPE_TOKEN"); env != nullptr && env[0] != '\0') {
    return std::string(absl::StripAsciiWhitespace(env));
  }
  return absl::FailedPreconditionError(
      "no cluster token: pass --token-file PATH (the head writes one to its state dir) "
      "or set TROUPE_TOKEN");
}

Nonce random_nonce() {
  Nonce n;
  fill_random(n.data(), n.size());
  return n;
}

Mac compute_proof(std::string_view token, Role role, const Nonce& their_nonce,
                  const Nonce& my_nonce) {
  std::string_view label = role_label(role);
  std::vector<uint8_t> data(label.begin(), label.end());
  data.insert(data.end(), their_nonce.begin(), their_nonce.end());
  data.insert(data.end(), my_nonce.begin(), my_nonce.end());
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), data.data(), data.size(),
       mac.data(), &len);
  return mac;
}

bool proofs_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace troupe::transport
