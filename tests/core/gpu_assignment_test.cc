// Which devices of a node's GPUs each actor holds (GpuAssignment): whole
// devices lowest first, fractions packed, freed devices given again.
#include "core/cluster/detail/gpu_assignment.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"

namespace troupe::cluster {
namespace {

using Indices = std::vector<int>;

Indices assign(GpuAssignment& gpus, uint64_t actor, double amount) {
  absl::StatusOr<Indices> given = gpus.assign(actor, amount);
  EXPECT_TRUE(given.ok()) << given.status();
  return given.value_or(Indices{-1});
}

TEST(GpuAssignmentTest, WholeGpusAreDistinctDevicesLowestFirst) {
  GpuAssignment gpus(4);
  EXPECT_EQ(assign(gpus, 1, 1), Indices{0});
  EXPECT_EQ(assign(gpus, 2, 2), (Indices{1, 2}));
  EXPECT_EQ(assign(gpus, 3, 0), Indices{});  // no GPU: no device
  EXPECT_FALSE(gpus.holds(3));
  EXPECT_EQ(gpus.of(2), (Indices{1, 2}));
  absl::StatusOr<Indices> more = gpus.assign(4, 2);
  ASSERT_FALSE(more.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  EXPECT_TRUE(absl::StrContains(more.status().message(), "4 GPUs")) << more.status();
  EXPECT_FALSE(gpus.holds(4));
  EXPECT_EQ(assign(gpus, 4, 1), Indices{3});
}

TEST(GpuAssignmentTest, FractionsPackOntoOneDevice) {
  GpuAssignment gpus(2);
  EXPECT_EQ(assign(gpus, 1, 0.5), Indices{0});
  EXPECT_EQ(assign(gpus, 2, 0.5), Indices{0});  // the same device, now full
  EXPECT_EQ(assign(gpus, 3, 0.25), Indices{1});
  EXPECT_EQ(assign(gpus, 4, 0.5), Indices{1});  // packs beside the 0.25
  // A whole GPU needs a device nobody holds any of.
  absl::StatusOr<Indices> whole = gpus.assign(5, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(whole.status())) << whole.status();
  gpus.release(1);
  gpus.release(2);
  EXPECT_EQ(assign(gpus, 5, 1), Indices{0});
}

TEST(GpuAssignmentTest, AFractionGoesWhereItFitsTightest) {
  GpuAssignment gpus(3);
  EXPECT_EQ(assign(gpus, 1, 0.5), Indices{0});
  EXPECT_EQ(assign(gpus, 2, 0.75), Indices{1});
  EXPECT_EQ(assign(gpus, 3, 0.25), Indices{1});  // 0.25 free on 1, 0.5 on 0
  EXPECT_EQ(assign(gpus, 4, 0.5), Indices{0});
  // 0.6 fits only the untouched device 2; then nothing.
  EXPECT_EQ(assign(gpus, 5, 0.6), Indices{2});
  absl::StatusOr<Indices> none = gpus.assign(6, 0.6);
  EXPECT_TRUE(absl::IsResourceExhausted(none.status())) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), "within one device")) << none.status();
}

TEST(GpuAssignmentTest, ReleasedDevicesAreGivenAgain) {
  GpuAssignment gpus(2);
  EXPECT_EQ(assign(gpus, 1, 1), Indices{0});
  EXPECT_EQ(assign(gpus, 2, 1), Indices{1});
  gpus.release(1);
  gpus.release(1);  // twice: nothing more
  EXPECT_EQ(gpus.of(1), Indices{});
  EXPECT_EQ(assign(gpus, 3, 1), Indices{0});
  // Shares that add up to a whole device free it exactly.
  gpus.release(3);
  for (uint64_t a = 10; a < 13; ++a)
    EXPECT_EQ(assign(gpus, a, 1.0 / 3), Indices{0});
  for (uint64_t a = 10; a < 13; ++a)
    gpus.release(a);
  EXPECT_EQ(assign(gpus, 4, 1), Indices{0});
}

TEST(GpuAssignmentTest, AnActorThatHoldsDevicesKeepsThem) {
  GpuAssignment gpus(2);
  EXPECT_EQ(assign(gpus, 1, 1), Indices{0});
  EXPECT_EQ(assign(gpus, 1, 1), Indices{0});  // asked again (hosted again): the same
  EXPECT_EQ(assign(gpus, 2, 1), Indices{1});
}

TEST(GpuAssignmentTest, OnlyWholeAmountsOrFractionsOfOne) {
  GpuAssignment gpus(4);
  absl::StatusOr<Indices> odd = gpus.assign(1, 1.5);
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(odd.status())) << odd.status();
  EXPECT_TRUE(check_gpu_request(0).ok());
  EXPECT_TRUE(check_gpu_request(0.3).ok());
  EXPECT_TRUE(check_gpu_request(3).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(check_gpu_request(2.5)));
}

TEST(GpuAssignmentTest, ANodeWithoutGpusGivesNone) {
  GpuAssignment gpus(0);
  EXPECT_EQ(assign(gpus, 1, 0), Indices{});
  EXPECT_TRUE(absl::IsResourceExhausted(gpus.assign(2, 0.5).status()));
}

}  // namespace
}  // namespace troupe::cluster
