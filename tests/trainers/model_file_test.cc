// The weights `troupe train` writes and `troupe generate` reads: they round
// trip, and a file that is not what it claims is refused naming the problem.
#include "trainers/model_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "nn/model/model.h"

namespace troupe::trainers {
namespace {

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/troupe-model-test-XXXXXX";
    ASSERT_NE(::mkdtemp(path), nullptr);
    dir_ = path;
    saved_.model = kDefaultModel;
    saved_.params.assign(nn::model_layout(saved_.model).num_params(), 0.25f);
    saved_.step = 7;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string header(const std::string& model_json, size_t num_params) {
    return absl::StrCat(R"({"format": "troupe-gpt", "version": 1, "dtype": "float32", )",
                        R"("num_params": )", num_params, R"(, "model": )", model_json, "}");
  }

  std::string dir_;
  SavedModel saved_;
};

TEST_F(ModelFileTest, RoundTrips) {
  ASSERT_TRUE(save_model(dir_, saved_).ok());
  absl::StatusOr<SavedModel> loaded = load_model(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->params, saved_.params);
  EXPECT_EQ(loaded->step, 7);
  EXPECT_EQ(loaded->model.num_layers(), saved_.model.num_layers());
}

// ZeRO-3 without consolidation: a file per rank's partition, joined on load;
// a partition missing or of the wrong size is refused naming its file.
TEST_F(ModelFileTest, PartitionsRoundTripAsOneModel) {
  for (size_t i = 0; i < saved_.params.size(); ++i)
    saved_.params[i] = static_cast<float>(i % 1000);
  const size_t n = saved_.params.size();
  saved_.partitions = {n / 3 + 1, n / 3 + 1, n - 2 * (n / 3 + 1)};
  ASSERT_TRUE(save_model(dir_, saved_).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/model.bin"));
  absl::StatusOr<SavedModel> loaded = load_model(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->params, saved_.params);
  EXPECT_EQ(loaded->partitions, saved_.partitions);
  const std::string second = dir_ + "/" + partition_file_name(1, 3);
  EXPECT_EQ(partition_file_name(1, 3), "model.part-1-of-3.bin");
  std::filesystem::resize_file(second, 8);
  EXPECT_TRUE(absl::StrContains(load_model(dir_).status().message(), "model.part-1-of-3.bin"));
  std::filesystem::remove(second);
  EXPECT_TRUE(absl::IsNotFound(load_model(dir_).status()));
  saved_.partitions = {1, 2};  // not the parameter count
  EXPECT_TRUE(absl::IsInvalidArgument(save_model(dir_, saved_)));
}

TEST_F(ModelFileTest, NonFiniteWeightsAreRefusedNamingTheParameter) {
  saved_.params[12345 % saved_.params.size()] = std::nanf("");
  ASSERT_TRUE(save_model(dir_, saved_).ok());
  absl::StatusOr<SavedModel> loaded = load_model(dir_);
  EXPECT_TRUE(absl::IsDataLoss(loaded.status())) << loaded.status();
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "is NaN")) << loaded.status();
  saved_.params.assign(saved_.params.size(), 0.0f);
  saved_.params[3] = INFINITY;
  ASSERT_TRUE(save_model(dir_, saved_).ok());
  EXPECT_TRUE(absl::StrContains(load_model(dir_).status().message(), "parameter 3 is infinite"));
}

TEST_F(ModelFileTest, HeadersThatAreNotOursAreDataLoss) {
  auto refused = [&](const std::string& text, const std::string& expected) {
    absl::StatusOr<std::pair<SavedModel, size_t>> h = parse_model_header(text, "model.json");
    EXPECT_TRUE(absl::IsDataLoss(h.status())) << text << ": " << h.status();
    EXPECT_TRUE(absl::StrContains(h.status().message(), expected))
        << text << ": " << h.status() << " lacks " << expected;
  };
  const std::string model =
      R"({"n_layer": 2, "n_head": 4, "n_embd": 64, "seq_len": 64, "vocab_size": 256,
          "padded_vocab_size": 256})";
  size_t n = saved_.params.size();
  ASSERT_TRUE(parse_model_header(header(model, n), "model.json").ok());
  refused("", "parse error");
  refused("[]", "model.json");
  refused(R"({"format": "other"})", "model.json");
  refused(header(model, n + 1), "does not match the model");
  // Dimensions that would overflow the layout are refused before it is computed.
  refused(header(R"({"n_layer": 2, "n_head": 4, "n_embd": 2000000000, "seq_len": 64,
                     "vocab_size": 256, "padded_vocab_size": 256})",
                 n),
          "model: GPTConfig: channels = 2000000000 with vocabulary 256 and max_seq_len 64 make a "
          "tensor over INT_MAX elements");
  refused(header(R"({"n_layer": -1, "n_head": 4, "n_embd": 64, "seq_len": 64,
                     "vocab_size": 256, "padded_vocab_size": 256})",
                 n),
          "model.n_layer: -1 is out of range");
  refused(std::string(kMaxModelHeaderBytes + 1, ' '), "larger than");
}

TEST_F(ModelFileTest, ABufferOfTheWrongSizeIsDataLoss) {
  ASSERT_TRUE(save_model(dir_, saved_).ok());
  std::filesystem::resize_file(dir_ + "/model.bin", 100);
  absl::StatusOr<SavedModel> loaded = load_model(dir_);
  EXPECT_TRUE(absl::IsDataLoss(loaded.status())) << loaded.status();
  std::filesystem::remove(dir_ + "/model.bin");
  EXPECT_TRUE(absl::IsNotFound(load_model(dir_).status()));
}

}  // namespace
}  // namespace troupe::trainers
