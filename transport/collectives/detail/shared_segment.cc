#include "transport/collectives/detail/shared_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "transport/collectives/store.h"

namespace troupe::transport::detail {
namespace {

constexpr uint64_t kMagic = 0x74726f7570657368;  // "troupesh"
constexpr size_t kPageBytes = 4096;

struct alignas(64) Header {
  uint64_t magic;
  uint32_t members;
  uint32_t buffer_bytes;
};

size_t flags_offset() {
  return sizeof(Header);
}
size_t peers_offset(int members) {
  return flags_offset() + 2 * static_cast<size_t>(members) * sizeof(SharedSegment::Flag);
}
size_t slots_offset(int members) {
  size_t end = peers_offset(members) + static_cast<size_t>(members) * sizeof(SharedSegment::Peer);
  return (end + kPageBytes - 1) / kPageBytes * kPageBytes;
}
size_t segment_bytes(int members) {
  return slots_offset(members) + 2 * static_cast<size_t>(members) * SharedSegment::kBufferBytes;
}

absl::Status system_error(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> random_name() {
  unsigned char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return system_error("getrandom");
  }
  std::string name = "/troupe-";
  for (unsigned char b : bytes)
    absl::StrAppend(&name, absl::Hex(b, absl::kZeroPad2));
  return name;
}

// Closes an fd when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SharedSegment::~SharedSegment() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

absl::Status SharedSegment::map(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return system_error("mmap of the shared segment");
  base_ = p;
  bytes_ = bytes;
  flags_ = reinterpret_cast<Flag*>(static_cast<std::byte*>(base_) + flags_offset());
  peers_ = reinterpret_cast<Peer*>(static_cast<std::byte*>(base_) + peers_offset(members_));
  slots_ = static_cast<std::byte*>(base_) + slots_offset(members_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SharedSegment>> SharedSegment::create(Store& store,
                                                                     const std::string& prefix,
                                                                     std::span<const int> members,
                                                                     int me,
                                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int n = static_cast<int>(members.size());
  const std::string name_key = absl::StrCat(prefix, "/shm/", members[0]);
  const std::string verdict_key = absl::StrCat(prefix, "/shm-ready/", members[0]);
  auto mapped_key = [&](int member) {
    return absl::StrCat(prefix, "/shm-mapped/", members[member]);
  };
  std::unique_ptr<SharedSegment> seg(new SharedSegment);
  seg->members_ = n;
  seg->me_ = me;
  const size_t bytes = segment_bytes(n);

  if (me == 0) {
    // Create, publish, wait for the others to map it, then remove the name.
    absl::StatusOr<std::string> name = random_name();
    absl::Status made = name.status();
    Fd fd;
    if (made.ok()) {
      fd.fd = ::shm_open(name->c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      if (fd.fd < 0) made = system_error(absl::StrCat("shm_open ", *name));
    }
    if (made.ok() && ::ftruncate(fd.fd, static_cast<off_t>(bytes)) != 0) {
      made = system_error("ftruncate of the shared segment");
    }
    if (made.ok()) {
      if (int e = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(bytes)); e != 0) {
        errno = e;
        made = system_error(absl::StrCat("reserving ", bytes, " bytes in /dev/shm"));
      }
    }
    if (made.ok()) made = seg->map(fd.fd, bytes);
    if (made.ok()) {
      auto* h = new (seg->base_)
          Header{kMagic, static_cast<uint32_t>(n), static_cast<uint32_t>(kBufferBytes)};
      static_cast<void>(h);
      for (int i = 0; i < 2 * n; ++i)
        new (&seg->flags_[i]) Flag;
      for (int i = 0; i < n; ++i)
        new (&seg->peers_[i]) Peer;
    }
    // The others learn the name, or that there is none (empty).
    absl::Status published = store.set(name_key, made.ok() ? *name : std::string());
    std::string failed;
    for (int m = 1; m < n && made.ok() && published.ok(); ++m) {
      absl::StatusOr<std::string> r = store.wait_get(mapped_key(m), deadline - absl::Now());
      if (!r.ok()) {
        made = r.status();
      } else if (!r->empty()) {
        made = absl::UnavailableError(absl::StrCat("rank ", members[m], ": ", *r));
      }
    }
    if (name.ok() && fd.fd >= 0) ::shm_unlink(name->c_str());
    if (!published.ok()) return published;
    if (absl::Status s = store.set(verdict_key, made.ok() ? "" : std::string(made.message()));
        !s.ok()) {
      return s;
    }
    if (!made.ok()) return made;
    if (absl::Status s = seg->agree_on_cross_memory(deadline); !s.ok()) return s;
    return seg;
  }

  absl::StatusOr<std::string> name = store.wait_get(name_key, deadline - absl::Now());
  if (!name.ok()) return name.status();
  absl::Status opened = absl::OkStatus();
  if (name->empty()) {
    opened = absl::UnavailableError(
        absl::StrCat("rank ", members[0], " could not create the shared segment"));
  } else {
    Fd fd;
    fd.fd = ::shm_open(name->c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd.fd < 0) opened = system_error(absl::StrCat("shm_open ", *name));
    struct stat st {};
    if (opened.ok() && (::fstat(fd.fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes)) {
      opened = absl::UnavailableError("the shared segment has the wrong size");
    }
    if (opened.ok()) opened = seg->map(fd.fd, bytes);
    if (opened.ok()) {
      const auto* h = static_cast<const Header*>(seg->base_);
      if (h->magic != kMagic || h->members != static_cast<uint32_t>(n)) {
        opened = absl::UnavailableError("the shared segment is not this group's");
      }
    }
  }
  if (!name->empty()) {
    if (absl::Status s =
            store.set(mapped_key(me), opened.ok() ? "" : std::string(opened.message()));
        !s.ok()) {
      return s;
    }
  }
  if (!opened.ok()) return opened;
  absl::StatusOr<std::string> verdict = store.wait_get(verdict_key, deadline - absl::Now());
  if (!verdict.ok()) return verdict.status();
  if (!verdict->empty()) return absl::UnavailableError(*verdict);
  if (absl::Status s = seg->agree_on_cross_memory(deadline); !s.ok()) return s;
  return seg;
}

template <class FlagOf>
absl::Status SharedSegment::wait_all(FlagOf flag, uint32_t count, absl::Time deadline) {
  for (int m = 0; m < members_; ++m) {
    if (m == me_) continue;
    while (!reached(flag(m), count)) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError("a member did not set up the shared segment in time");
      }
      ::usleep(20);
    }
  }
  return absl::OkStatus();
}

absl::Status SharedSegment::agree_on_cross_memory(absl::Time deadline) {
  // Piece 1 of every member: its pid and probe are published (arrive), its
  // verdict on the others is (done).
  const uint32_t c = next_piece();
  Peer& mine = peer(me_);
  mine.pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  mine.probe.store(reinterpret_cast<uint64_t>(&mine.pid), std::memory_order_relaxed);
  post(arrive(me_), c);
  if (absl::Status s = wait_all([&](int m) -> Flag& { return arrive(m); }, c, deadline); !s.ok()) {
    return s;
  }
  bool all = true;
  for (int m = 0; m < members_ && all; ++m) {
    if (m == me_) continue;
    int32_t seen = 0;
    const Peer& p = peer(m);
    all = read_from(m, p.probe.load(std::memory_order_relaxed), &seen, sizeof(seen)).ok() &&
          seen == p.pid.load(std::memory_order_relaxed);
  }
  mine.can_read.store(all ? 1 : 2, std::memory_order_relaxed);
  post(done(me_), c);
  if (absl::Status s = wait_all([&](int m) -> Flag& { return done(m); }, c, deadline); !s.ok()) {
    return s;
  }
  cross_memory_ = true;
  for (int m = 0; m < members_; ++m)
    cross_memory_ = cross_memory_ && peer(m).can_read.load(std::memory_order_relaxed) == 1;
  return absl::OkStatus();
}

absl::Status SharedSegment::read_from(int member, uint64_t address, void* to, size_t bytes) {
  const pid_t pid = peer(member).pid.load(std::memory_order_relaxed);
  auto* at = static_cast<std::byte*>(to);
  while (bytes > 0) {
    iovec local{at, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      return system_error(absl::StrCat("reading ", bytes, " bytes of process ", pid));
    }
    at += n;
    address += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void SharedSegment::post(Flag& flag, uint32_t count) {
  flag.count.store(count, std::memory_order_seq_cst);
  if (flag.sleepers.load(std::memory_order_seq_cst) > 0) {
    // Not FUTEX_PRIVATE: the sleepers are other processes.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&flag.count), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
  }
}

void SharedSegment::sleep_on(Flag& flag, uint32_t seen, absl::Duration slice) {
  flag.sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (flag.count.load(std::memory_order_seq_cst) == seen) {
    timespec ts = absl::ToTimespec(slice);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&flag.count), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  flag.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace troupe::transport::detail
