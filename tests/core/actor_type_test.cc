// Registration: stable ids, method names, unlisted methods.
#include <gtest/gtest.h>

#include "tests/core/test_actors.h"

namespace troupe::testing {
namespace {

class Partial {
 public:
  int listed() { return 1; }
  int unlisted() { return 2; }
};
TROUPE_ACTOR(Partial, &Partial::listed);

TEST(ActorTypeTest, RegistryHasStableIdsAndQualifiedNames) {
  const ActorTypeInfo* type = find_actor_type("Counter");
  ASSERT_NE(type, nullptr);
  EXPECT_EQ(type->id, stable_id("Counter"));
  ASSERT_EQ(type->methods.size(), 7u);
  EXPECT_EQ(type->methods[0].name, "Counter::add");
  EXPECT_EQ(type->methods[0].id, stable_id("Counter::add"));
  EXPECT_EQ(type->methods[6].name, "Counter::boom");
  EXPECT_EQ(&actor_type_of<Counter>(), type);
  EXPECT_EQ(find_actor_type("NoSuchActor"), nullptr);
  // FNV-1a 64 of "a": fixed across builds and processes.
  EXPECT_EQ(stable_id("a"), 0xaf63dc4c8601ec8cull);
}

TEST(ActorTypeTest, MethodNamesDropNamespaces) {
  std::vector<std::string> names =
      detail::parse_method_names("&Counter::add,  & ns::inner::Shard::apply ,&X::y");
  EXPECT_EQ(names, (std::vector<std::string>{"Counter::add", "Shard::apply", "X::y"}));
}

TEST(ActorTypeTest, CallingAnUnlistedMethodIsAnError) {
  ActorSystem system({.threads = 1});
  auto actor = system.spawn<Partial>({});
  ASSERT_TRUE(actor.ok());
  EXPECT_EQ(*actor->call(&Partial::listed).get(absl::Seconds(10)), 1);
  absl::StatusOr<int> r = actor->call(&Partial::unlisted).get(absl::Seconds(10));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("TROUPE_ACTOR(Partial"), absl::string_view::npos);
}

TEST(ActorIdTest, NodeAndSequence) {
  ActorId id = ActorId::make(3, 42);
  EXPECT_EQ(id.node(), 3u);
  EXPECT_EQ(id.sequence(), 42u);
  EXPECT_EQ(to_string(id), "actor-3-42");
  EXPECT_FALSE(ActorId{}.valid());
}

}  // namespace
}  // namespace troupe::testing
