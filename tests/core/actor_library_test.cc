// load_actor_library: the example user library (examples/user_actors) loads
// from an allowed directory and registers KeyValueShard, which then runs here
// as a worker runs it for a caller in another process; paths outside the
// allow-list, symlinks out of it, missing files and files that are not shared
// objects are refused.
//
// This binary does not include user_actors.h: KeyValueShard reaches the
// registry only through the library.
#include "core/cluster/actor_library.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/actor.h"
#include "core/codec.h"
#include "core/detail/remote_codec.h"
#include "gtest/gtest.h"

#if !defined(TROUPE_USER_ACTORS_LIB) || !defined(TROUPE_FOREIGN_ACTORS_LIB)
#error "define TROUPE_USER_ACTORS_LIB and TROUPE_FOREIGN_ACTORS_LIB: the libraries' paths"
#endif

namespace troupe::cluster {
namespace {

namespace fs = std::filesystem;

class ActorLibraryTest : public ::testing::Test {
 protected:
  // One copy of the library for the whole suite (a process loads it once):
  //   root/allowed/libuser_actors.so         the copy tests load
  //   root/allowed/alias.so                  -> libuser_actors.so (inside)
  //   root/allowed/escape.so                 -> ../outside/libuser_actors.so
  //   root/allowed/outside_dir               -> ../outside
  //   root/allowed/not_a_library.so          text
  //   root/allowed/sub/                      empty
  //   root/allowed/libforeign_actors.so      linked against another "libtroupe_core"
  //   root/outside/libuser_actors.so         a copy outside the allow-list
  //   root/allowed_not/libuser_actors.so     a sibling sharing the prefix
  static void SetUpTestSuite() {
    std::string pattern = ::testing::TempDir() + "troupe_actor_library_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    root_ = pattern;
    allowed_ = root_ / "allowed";
    for (const char* dir : {"allowed", "allowed/sub", "outside", "allowed_not"})
      fs::create_directories(root_ / dir);
    for (const char* dir : {"allowed", "outside", "allowed_not"})
      fs::copy_file(TROUPE_USER_ACTORS_LIB, root_ / dir / "libuser_actors.so");
    fs::copy_file(TROUPE_FOREIGN_ACTORS_LIB, allowed_ / "libforeign_actors.so");
    fs::create_symlink("libuser_actors.so", allowed_ / "alias.so");
    fs::create_symlink("../outside/libuser_actors.so", allowed_ / "escape.so");
    fs::create_directory_symlink("../outside", allowed_ / "outside_dir");
    std::ofstream(allowed_ / "not_a_library.so")
        << "this is a text file, long enough to have an ELF header's worth of bytes in it\n";
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }

  static std::string in_allowed(const std::string& name) { return (allowed_ / name).string(); }
  static std::vector<std::string> allow() { return {allowed_.string()}; }

  static inline fs::path root_;
  static inline fs::path allowed_;
};

// Calls `method` of the actor behind `actor` the way a node serves a caller
// in another process: encoded arguments in, encoded result out.
template <class U, class... A>
Result<U> call_as_remote(detail::ActorHandle& actor, const ActorTypeInfo& type,
                         std::string_view method, const A&... args) {
  const MethodInfo* m = type.method(stable_id(method));
  if (m == nullptr) return absl::NotFoundError(std::string(method));
  Writer w;
  encode_values(w, args...);
  Reader in(w.bytes(), w.buffers());
  auto promise = std::make_shared<std::promise<Result<U>>>();
  std::future<Result<U>> result = promise->get_future();
  absl::Status sent = m->invoke(actor, in, [promise](Writer& out) {
    Reader reply(out.bytes(), out.buffers());
    promise->set_value(detail::decode_result<U>(reply));
  });
  if (!sent.ok()) return sent;
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return absl::DeadlineExceededError(std::string(method));
  }
  return result.get();
}

TEST_F(ActorLibraryTest, LoadingRegistersTheLibrarysActorTypes) {
  absl::StatusOr<std::vector<std::string>> types =
      load_actor_library(in_allowed("libuser_actors.so"), allow());
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(*types, std::vector<std::string>{"KeyValueShard"});

  const ActorTypeInfo* type = find_actor_type("KeyValueShard");
  ASSERT_NE(type, nullptr);
  EXPECT_EQ(find_actor_type(stable_id("KeyValueShard")), type);
  for (const char* method :
       {"KeyValueShard::put", "KeyValueShard::get", "KeyValueShard::size", "KeyValueShard::name"}) {
    EXPECT_NE(type->method(stable_id(method)), nullptr) << method;
  }
  EXPECT_NE(find_constructor(*type, detail::constructor_signature<std::string>()), nullptr)
      << "TROUPE_ACTOR_CONSTRUCTOR(KeyValueShard, std::string)";
  EXPECT_NE(find_constructor(*type, detail::constructor_signature<>()), nullptr);
  EXPECT_EQ(find_constructor(*type, detail::constructor_signature<int>()), nullptr);

  std::vector<std::string> all = registered_actor_types();
  EXPECT_NE(std::find(all.begin(), all.end(), "KeyValueShard"), all.end());
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
}

TEST_F(ActorLibraryTest, ALoadedActorTypeSpawnsAndAnswersCalls) {
  ASSERT_TRUE(load_actor_library(in_allowed("libuser_actors.so"), allow()).ok());
  const ActorTypeInfo* type = find_actor_type("KeyValueShard");
  ASSERT_NE(type, nullptr);

  ActorSystem system;
  Writer args;
  encode_values(args, std::string("shard-7"));
  Reader args_in(args.bytes(), args.buffers());
  auto shard = system.spawn_remote(*type, {.name = "kv"},
                                   detail::constructor_signature<std::string>(), args_in);
  ASSERT_TRUE(shard.ok()) << shard.status();
  detail::ActorHandle& actor = **shard;

  using std::string;
  EXPECT_EQ(call_as_remote<string>(actor, *type, "KeyValueShard::name").value(), "shard-7");
  EXPECT_EQ(
      call_as_remote<bool>(actor, *type, "KeyValueShard::put", string("a"), string("1")).value(),
      true);
  EXPECT_EQ(
      call_as_remote<bool>(actor, *type, "KeyValueShard::put", string("b"), string("2")).value(),
      true);
  EXPECT_EQ(
      call_as_remote<bool>(actor, *type, "KeyValueShard::put", string("a"), string("3")).value(),
      false);
  EXPECT_EQ(call_as_remote<std::optional<string>>(actor, *type, "KeyValueShard::get", string("a"))
                .value(),
            std::optional<string>("3"));
  EXPECT_EQ(call_as_remote<std::optional<string>>(actor, *type, "KeyValueShard::get", string("z"))
                .value(),
            std::nullopt);
  EXPECT_EQ(call_as_remote<int64_t>(actor, *type, "KeyValueShard::size").value(), 2);
  system.shutdown();
}

TEST_F(ActorLibraryTest, LoadingTheSameFileAgainIsANoOp) {
  auto first = load_actor_library(in_allowed("libuser_actors.so"), allow());
  ASSERT_TRUE(first.ok()) << first.status();
  // The same path, a symlink inside the allowed directory, a detour through
  // "..": all resolve to the file already loaded.
  for (const std::string& path : {in_allowed("libuser_actors.so"), in_allowed("alias.so"),
                                  in_allowed("sub/../libuser_actors.so")}) {
    auto again = load_actor_library(path, allow());
    ASSERT_TRUE(again.ok()) << path << ": " << again.status();
    EXPECT_EQ(*again, *first) << path;
  }
  EXPECT_NE(find_actor_type("KeyValueShard"), nullptr);
}

TEST_F(ActorLibraryTest, APathOutsideTheAllowedDirectoriesIsPermissionDenied) {
  for (const std::string& path :
       {(root_ / "outside/libuser_actors.so").string(), in_allowed("../outside/libuser_actors.so"),
        in_allowed("sub/../../outside/libuser_actors.so"),
        (root_ / "allowed_not/libuser_actors.so").string()}) {
    absl::StatusOr<std::vector<std::string>> types = load_actor_library(path, allow());
    ASSERT_FALSE(types.ok()) << path;
    EXPECT_EQ(types.status().code(), absl::StatusCode::kPermissionDenied) << types.status();
    EXPECT_TRUE(absl::StrContains(types.status().message(), fs::canonical(allowed_).string()))
        << types.status() << "names the allowed directories";
  }
  // No allow-list allows nothing; an allowed directory that does not exist is ignored.
  auto none = load_actor_library(in_allowed("libuser_actors.so"), {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), kActorLibDirsEnv)) << none.status();
  auto missing_dir =
      load_actor_library(in_allowed("libuser_actors.so"), {(root_ / "no_such_dir").string()});
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kPermissionDenied);
  // The allowed directory itself is not a library inside it.
  EXPECT_EQ(load_actor_library(allowed_.string(), allow()).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(ActorLibraryTest, ASymlinkOutOfTheAllowedDirectoryIsRefused) {
  for (const char* name : {"escape.so", "outside_dir/libuser_actors.so"}) {
    auto types = load_actor_library(in_allowed(name), allow());
    EXPECT_EQ(types.status().code(), absl::StatusCode::kPermissionDenied)
        << name << ": " << types.status();
    EXPECT_TRUE(
        absl::StrContains(types.status().message(), (root_ / "outside").filename().string()))
        << types.status();
  }
  // An allowed directory given through a symlink is allowed as what it points to.
  fs::create_directory_symlink(allowed_, root_ / "allowed_link");
  auto through_link =
      load_actor_library(in_allowed("libuser_actors.so"), {(root_ / "allowed_link").string()});
  EXPECT_TRUE(through_link.ok()) << through_link.status();
  fs::remove(root_ / "allowed_link");
}

TEST_F(ActorLibraryTest, AMissingFileIsNotFound) {
  auto missing = load_actor_library(in_allowed("no_such_library.so"), allow());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  auto missing_dir = load_actor_library(in_allowed("no_such_dir/library.so"), allow());
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kNotFound) << missing_dir.status();
  // Outside the allow-list, whether a file exists is not disclosed.
  auto outside = load_actor_library((root_ / "outside/no_such_library.so").string(), allow());
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied) << outside.status();
  EXPECT_EQ(load_actor_library("", allow()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ActorLibraryTest, AFileThatIsNotASharedObjectIsFailedPrecondition) {
  auto text = load_actor_library(in_allowed("not_a_library.so"), allow());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kFailedPrecondition) << text.status();
  // dlerror()'s text.
  EXPECT_TRUE(absl::StrContains(text.status().message(), "invalid ELF header")) << text.status();
  auto dir = load_actor_library(in_allowed("sub"), allow());
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition) << dir.status();
  // A failed load is not remembered as loaded.
  auto again = load_actor_library(in_allowed("not_a_library.so"), allow());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ActorLibraryTest, ALibraryBuiltAgainstAnotherTroupeIsFailedPrecondition) {
  // Its types would land in the other libtroupe_core's registry, unseen here.
  auto foreign = load_actor_library(in_allowed("libforeign_actors.so"), allow());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition) << foreign.status();
  EXPECT_TRUE(absl::StrContains(foreign.status().message(), "libforeign_troupe_core"))
      << foreign.status();
}

TEST(ActorLibraryDirsTest, ComeFromTheEnvironment) {
  const char* saved = std::getenv(kActorLibDirsEnv);
  std::optional<std::string> original = saved ? std::optional<std::string>(saved) : std::nullopt;

  ASSERT_EQ(setenv(kActorLibDirsEnv, "/opt/a::/opt/b:", 1), 0);
  EXPECT_EQ(actor_library_dirs_from_env(), (std::vector<std::string>{"/opt/a", "/opt/b"}));
  ASSERT_EQ(unsetenv(kActorLibDirsEnv), 0);
  EXPECT_TRUE(actor_library_dirs_from_env().empty());

  if (original) setenv(kActorLibDirsEnv, original->c_str(), 1);
}

}  // namespace
}  // namespace troupe::cluster
