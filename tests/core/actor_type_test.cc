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

// (Calling Partial::unlisted does not compile: tests/compile_fail.)
TEST(ActorTypeTest, ACallCarriesItsMethodsIndexInTheList) {
  ActorSystem system({.threads = 1});
  auto actor = system.spawn<Partial>({});
  ASSERT_TRUE(actor.ok());
  EXPECT_EQ(*actor->call(&Partial::listed).get(absl::Seconds(10)), 1);
  EXPECT_EQ((detail::MethodSlot<Partial, 0>(&Partial::listed).index), 0);
  // Found by the compiler, as the registry numbers them.
  static_assert(detail::index_in(&Counter::get, detail::MethodsOf<Counter>{}) == 1);
  static_assert(detail::index_in(&Counter::boom, detail::MethodsOf<Counter>{}) == 6);
  static_assert(detail::index_in(&Partial::unlisted, detail::MethodsOf<Partial>{}) == -1);
  static_assert(detail::MethodTypes<Partial>::kSize == 1);
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
