// The checkpoint format on its own (no actors): manifests, owners' files,
// reading any range back by names, the atomic commit and loading's fallback
// under every fault the Env can inject.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"
#include "core/io/env.h"
#include "nn/model/model.h"
#include "tests/checkpoint/fault_env.h"
#include "tests/checkpoint/partitioned_checkpoint.h"

namespace troupe::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr nn::ModelConfig kModel = nn::GPTConfig{.max_seq_len = 8,
                                                 .vocab_size = 32,
                                                 .padded_vocab_size = 32,
                                                 .num_layers = 2,
                                                 .num_heads = 2,
                                                 .channels = 8};

int64_t num_params() {
  return static_cast<int64_t>(nn::model_layout(kModel).num_params());
}

// The value of state `k` (0 param, 1 exp_avg, 2 exp_avg_sq) at element i in
// the checkpoint of step `step`: every saved value is known.
float value(int64_t step, int k, int64_t i) {
  return static_cast<float>(step) * 1000.0f + static_cast<float>(k) * 100.0f +
         static_cast<float>(i) * 0.001f;
}

using testing::partition;

const char* const kStates[] = {kParamState, kExpAvgState, kExpAvgSqState};

// Saves step `step` as a ZeRO run over dp owners would, through `env`.
absl::Status save(io::Env* env, const std::string& dir, int64_t step, int dp, int keep = 2) {
  return testing::save_partitioned(
      env, dir, step, kModel, dp, [step](int k, int64_t i) { return value(step, k, i); }, keep);
}

// Reads state k of [begin, end) from what find_checkpoint finds and checks
// every value is that of step `want`.
void expect_loads(const std::string& dir, int64_t want, int64_t begin, int64_t end) {
  absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->manifest.step, want);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> out(static_cast<size_t>(end - begin), -1.0f);
    absl::Status s = read_state(io::Env::posix(), found->step_dir, found->manifest, kStates[k],
                                kModel, {}, begin, end, out.data());
    ASSERT_TRUE(s.ok()) << s;
    for (int64_t i = begin; i < end; ++i)
      ASSERT_EQ(out[static_cast<size_t>(i - begin)], value(want, k, i)) << kStates[k] << " " << i;
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("troupe-ckpt-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string shard_path(int64_t step, int r) const {
    return step_dir(dir_, step) + "/" + shard_file_name({.d = r, .p = 0, .t = 0});
  }

  std::string dir_;
};

TEST_F(CheckpointTest, TheManifestRoundTripsAndNamesEveryTensor) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 7, 2).ok());
  absl::StatusOr<std::string> text =
      io::Env::posix()->read_file(step_dir(dir_, 7) + "/manifest.json");
  ASSERT_TRUE(text.ok());
  absl::StatusOr<Manifest> m = decode_manifest(*text, "m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(encode_manifest(*m), *text);
  EXPECT_EQ(m->tensors.size(), 2 + 12 * 2 + 2u);
  EXPECT_EQ(m->tensors[2].name, "h0.ln1w");
  EXPECT_EQ(m->shards.size(), 2u);
  EXPECT_EQ(m->config, R"({"train_batch_size":8})");
  EXPECT_EQ(m->tokenizer, "bytes");

  // The tokenizer id round-trips; a manifest from before tokenizers reads as "bytes".
  Manifest with = *m;
  with.tokenizer = "gpt2-474c530819";
  absl::StatusOr<Manifest> back = decode_manifest(encode_manifest(with), "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokenizer, "gpt2-474c530819");
  nlohmann::ordered_json old = nlohmann::ordered_json::parse(*text);
  old.erase("tokenizer");
  old.erase("manifest_xxh64");
  absl::StatusOr<Manifest> before = decode_manifest(old.dump(2), "old", /*verify_checksum=*/false);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->tokenizer, "bytes");
}

TEST_F(CheckpointTest, SameLayoutAndEveryOtherDpReadTheSameValues) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 5, 2).ok());
  // Any range of any new layout: dp 1, 3, 7, and ranges across owners.
  for (int dp : {1, 2, 3, 7}) {
    for (int r = 0; r < dp; ++r) {
      auto [b, e] = partition(num_params(), dp, r);
      expect_loads(dir_, 5, b, e);
    }
  }
}

TEST_F(CheckpointTest, ACheckpointOfAnotherModelOrARangeOutsideTheSliceIsRefused) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 5, 1).ok());
  absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir_);
  ASSERT_TRUE(found.ok());
  nn::ModelConfig other = kModel;
  other.gpt2()->channels = 16;
  std::vector<float> out(static_cast<size_t>(num_params()));
  absl::Status s = read_state(io::Env::posix(), found->step_dir, found->manifest, kParamState,
                              other, {}, 0, 8, out.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("another model"), std::string::npos) << s;
  s = read_state(io::Env::posix(), found->step_dir, found->manifest, kParamState, kModel,
                 {.rank = 0, .size = 2}, 0, num_params(), out.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("not within the slice"), std::string::npos) << s;
}

// A model of 4 heads and 4 blocks: 1, 2 and 4 slices, 1, 2 and 4 stages.
constexpr nn::ModelConfig kSliced = nn::GPTConfig{.max_seq_len = 8,
                                                  .vocab_size = 32,
                                                  .padded_vocab_size = 32,
                                                  .num_layers = 4,
                                                  .num_heads = 4,
                                                  .channels = 16};

// What slice `slice` holds of state k of the whole model whose element i
// is value(step, k, i).
std::vector<float> slice_values(int64_t step, int k, const nn::TensorSlice& slice) {
  const nn::ModelLayout whole = nn::model_layout(kSliced);
  const nn::ModelLayout layout = nn::model_layout(kSliced, slice);
  std::vector<float> all(whole.num_params());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = value(step, k, static_cast<int64_t>(i));
  std::vector<float> out(layout.num_params());
  nn::copy_to_slice(whole, layout, all.data(), out.data());
  return out;
}

// Saved at any mesh dp x pp x tp, any slice of any tp reads back exactly
// what tensor parallelism puts in it, in any ranges: Megatron's resharding
// of pipeline and tensor-parallel checkpoints, by the global tensors.
TEST_F(CheckpointTest, EveryMeshReadsBackIntoEverySlicing) {
  struct Mesh {
    int dp, pp, tp;
  };
  int64_t step = 1;
  for (const Mesh& saved : {Mesh{2, 2, 2}, Mesh{1, 1, 4}, Mesh{3, 4, 1}, Mesh{1, 2, 2}}) {
    const std::string dir = dir_ + "/" + std::to_string(step);
    ASSERT_TRUE(testing::save_sliced(io::Env::posix(), dir, step, kSliced, saved.dp, saved.pp,
                                     saved.tp,
                                     [step](int k, int64_t i) { return value(step, k, i); })
                    .ok());
    absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->manifest.tensors.size(), static_cast<size_t>(saved.tp) * (4 + 12 * 4));
    EXPECT_EQ(found->manifest.tensors.back().p, saved.pp - 1);
    for (int tp : {1, 2, 4}) {
      for (int t = 0; t < tp; ++t) {
        const nn::TensorSlice slice{.rank = t, .size = tp};
        const auto n = static_cast<int64_t>(nn::model_layout(kSliced, slice).num_params());
        for (int k = 0; k < 3; ++k) {
          const std::vector<float> want = slice_values(step, k, slice);
          for (int parts : {1, 3}) {
            for (int r = 0; r < parts; ++r) {
              auto [b, e] = partition(n, parts, r);
              std::vector<float> out(static_cast<size_t>(e - b), -1.0f);
              absl::Status s = read_state(io::Env::posix(), found->step_dir, found->manifest,
                                          kStates[k], kSliced, slice, b, e, out.data());
              ASSERT_TRUE(s.ok()) << s;
              ASSERT_TRUE(std::equal(out.begin(), out.end(), want.begin() + b))
                  << "saved at " << saved.dp << "x" << saved.pp << "x" << saved.tp
                  << ", read slice " << t << " of " << tp << ", " << kStates[k] << " [" << b << ", "
                  << e << ")";
            }
          }
        }
      }
    }
    ++step;
  }
}

TEST_F(CheckpointTest, KeepsTheNewestAndPointsLatestAtTheLast) {
  for (int64_t step : {10, 20, 30, 40})
    ASSERT_TRUE(save(io::Env::posix(), dir_, step, 2, /*keep=*/2).ok());
  absl::StatusOr<std::vector<int64_t>> steps = list_checkpoints(io::Env::posix(), dir_);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{30, 40}));
  absl::StatusOr<std::string> latest = io::Env::posix()->read_file(dir_ + "/latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, latest_pointer(40));
}

TEST_F(CheckpointTest, TruncationAtManyOffsetsFallsBackToThePreviousCheckpoint) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 120, 2).ok());
  const std::string victim = shard_path(120, 1);
  const std::string copy = dir_ + "/copy.bin";
  fs::copy_file(victim, copy);
  const auto size = static_cast<int64_t>(fs::file_size(victim));
  for (int64_t at : {int64_t{0}, int64_t{1}, size / 3, size / 2, size - 4, size - 1}) {
    fs::resize_file(victim, static_cast<uintmax_t>(at));
    absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir_);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->manifest.step, 100) << "truncated at " << at;
    ASSERT_EQ(found->skipped.size(), 1u);
    EXPECT_NE(found->skipped[0].find("step-00000120: shard-d1.p0.t0.bin has"), std::string::npos)
        << found->skipped[0];
    expect_loads(dir_, 100, 0, num_params());
    fs::remove(victim);
    fs::copy_file(copy, victim);
  }
  expect_loads(dir_, 120, 0, num_params());
}

TEST_F(CheckpointTest, AFlippedByteInAnyFileIsDetected) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 120, 2).ok());
  std::mt19937 rng(7);
  for (const std::string& name :
       {std::string("shard-d0.p0.t0.bin"), std::string("shard-d1.p0.t0.bin"),
        std::string("manifest.json")}) {
    const std::string path = step_dir(dir_, 120) + "/" + name;
    const std::string original = *io::Env::posix()->read_file(path);
    for (int trial = 0; trial < 8; ++trial) {
      std::string bad = original;
      const size_t at = std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng);
      bad[at] = static_cast<char>(bad[at] ^ 0xFF);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
      absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir_);
      ASSERT_TRUE(found.ok());
      if (found->manifest.step == 120) {
        // Sizes are right: the owners' reads find it by checksum.
        ASSERT_NE(name, "manifest.json") << "byte " << at << " of the manifest went unnoticed";
        absl::Status any;
        for (const char* state : kStates) {
          std::vector<float> out(static_cast<size_t>(num_params()));
          any.Update(read_state(io::Env::posix(), found->step_dir, found->manifest, state, kModel,
                                {}, 0, num_params(), out.data()));
        }
        ASSERT_TRUE(absl::IsDataLoss(any)) << name << " byte " << at;
        EXPECT_NE(any.message().find("step-00000120: " + name + " checksum mismatch"),
                  std::string::npos)
            << any;
        EXPECT_TRUE(
            absl::IsDataLoss(verify_checksums(io::Env::posix(), found->step_dir, found->manifest)));
        // The caller then asks for the one before.
        absl::StatusOr<FoundCheckpoint> previous = find_checkpoint(io::Env::posix(), dir_, {}, 120);
        ASSERT_TRUE(previous.ok());
        EXPECT_EQ(previous->manifest.step, 100);
      } else {
        EXPECT_EQ(found->manifest.step, 100);
        ASSERT_FALSE(found->skipped.empty());
        EXPECT_NE(found->skipped[0].find("step-00000120: manifest.json"), std::string::npos)
            << found->skipped[0];
      }
      std::ofstream(path, std::ios::binary | std::ios::trunc) << original;
    }
  }
  expect_loads(dir_, 120, 0, num_params());
}

TEST_F(CheckpointTest, AMissingFileIsNamedAndThePreviousLoads) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 3).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 120, 3).ok());
  fs::remove(shard_path(120, 2));
  absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir_);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->manifest.step, 100);
  ASSERT_EQ(found->skipped.size(), 1u);
  EXPECT_EQ(found->skipped[0], "step-00000120: shard-d2.p0.t0.bin is missing");
  fs::remove(step_dir(dir_, 120) + "/manifest.json");
  found = find_checkpoint(io::Env::posix(), dir_);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->manifest.step, 100);
  // Nothing loadable at all: NotFound with every reason.
  fs::remove(shard_path(100, 0));
  found = find_checkpoint(io::Env::posix(), dir_);
  EXPECT_TRUE(absl::IsNotFound(found.status()));
  EXPECT_NE(found.status().message().find("step-00000100: shard-d0.p0.t0.bin is missing"),
            std::string::npos)
      << found.status();
}

TEST_F(CheckpointTest, NoSpaceMidWriteFailsTheSaveAndLeavesThePreviousLatest) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  const int64_t bytes_per_owner = 3 * 4 * partition(num_params(), 2, 0).second;
  for (int64_t room : {int64_t{0}, int64_t{100}, bytes_per_owner + 1000}) {
    testing::FaultEnv env;
    env.enospc_after(room);
    absl::Status s = save(&env, dir_, 120, 2);
    ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
    EXPECT_NE(s.message().find("No space left on device"), std::string::npos);
    EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/latest"), latest_pointer(100));
    expect_loads(dir_, 100, 0, num_params());
    // No temporary file stays behind.
    for (const auto& e : fs::directory_iterator(step_dir(dir_, 120)))
      EXPECT_EQ(e.path().extension(), ".bin") << e.path();
  }
}

TEST_F(CheckpointTest, AFailedFsyncFailsTheSave) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  for (int k = 0; k < 4; ++k) {  // each owner's file, the manifest, latest
    testing::FaultEnv env;
    env.fail_sync(k);
    absl::Status s = save(&env, dir_, 120, 2);
    ASSERT_FALSE(s.ok()) << "sync " << k;
    EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s;
    expect_loads(dir_, 100, 0, num_params());
  }
}

TEST_F(CheckpointTest, ACrashAtAnyOperationLeavesALoadableCheckpoint) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  // The operations of the save from this state, counted by doing it once.
  auto reset = [&] {
    fs::remove_all(step_dir(dir_, 120));
    ASSERT_TRUE(io::write_file_atomically(io::Env::posix(), dir_ + "/latest",
                                          latest_pointer(100).data(), latest_pointer(100).size())
                    .ok());
  };
  testing::FaultEnv counting;
  ASSERT_TRUE(save(&counting, dir_, 120, 2).ok());
  reset();
  const int64_t ops = counting.ops();
  ASSERT_GT(ops, 20);
  bool saw_new = false;
  for (int64_t k = 0; k <= ops; ++k) {
    testing::FaultEnv env;
    env.crash_at(k);
    absl::Status s = save(&env, dir_, 120, 2);
    EXPECT_EQ(s.ok(), k == ops) << "crash at " << k << ": " << s;
    env.crash();  // what was not synced is lost
    absl::StatusOr<FoundCheckpoint> found = find_checkpoint(io::Env::posix(), dir_);
    ASSERT_TRUE(found.ok()) << "crash at " << k << ": " << found.status();
    // Before the new manifest is durable the old checkpoint loads; after, the new one.
    saw_new = saw_new || found->manifest.step == 120;
    expect_loads(dir_, found->manifest.step, 0, num_params());
    if (found->manifest.step == 100) {
      EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/latest"), latest_pointer(100));
    }
    // Start the next attempt from the state before it.
    reset();
  }
  EXPECT_TRUE(saw_new);
}

TEST_F(CheckpointTest, DecodingRefusesWhatDoesNotFit) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 5, 2).ok());
  const std::string text = *io::Env::posix()->read_file(step_dir(dir_, 5) + "/manifest.json");
  absl::StatusOr<Manifest> good = decode_manifest(text, "m");
  ASSERT_TRUE(good.ok());
  auto refused = [&](Manifest m, const std::string& want) {
    absl::StatusOr<Manifest> back = decode_manifest(encode_manifest(m), "m.json");
    ASSERT_TRUE(absl::IsDataLoss(back.status())) << want;
    EXPECT_NE(back.status().message().find(want), std::string::npos) << back.status();
  };
  Manifest m = *good;
  m.shards[1].file = "../escape.bin";
  refused(m, "is not a plain file name");
  m = *good;
  m.shards[1].begin += 1;  // and its entries one element shorter: a hole before it
  for (ShardEntry& e : m.shards[1].entries)
    e.length -= 4;
  refused(m, "a gap at element");
  m = *good;
  m.shards[0].end += 1;
  refused(m, "entries[0]");
  m = *good;
  m.shards[0].entries[1].offset = 0;
  refused(m, "its entries overlap");
  m = *good;
  m.shards[1].owner.d = 2;
  refused(m, "lies outside the mesh");
  m = *good;
  m.tensors[3].shape = {1};
  refused(m, "tensors[3] (h0.ln1b): not the model's");
  m = *good;
  m.tensors[3].split = "columns";
  refused(m, "tensors[3] (h0.ln1b): not the model's");
  m = *good;
  m.tensors[5].p = 1;
  refused(m, "tensors[5] (h0.qkvb): stage 1 out of order or outside the mesh");
  m = *good;
  m.layout.tp = 2;
  refused(m, "tensors: 28 records; the model has 28 tensors in each of 2 slices");
  m = *good;
  m.layout.tp = 4;
  refused(m, "layout.tp 4: GPT: num_heads = 2 does not split");
  m = *good;
  m.layout.virtual_stages = 3;
  refused(m, "layout.virtual_stages 3 does not divide layout.pp 1");
  m = *good;
  m.model.gpt2()->num_heads = 3;
  refused(m, "");
  m = *good;
  m.optimizer.type = "lion";
  refused(m, "optimizer.type");
  EXPECT_TRUE(absl::IsDataLoss(decode_manifest("{", "m").status()));
  EXPECT_TRUE(absl::IsDataLoss(decode_manifest("[1, 2]", "m").status()));
  std::string edited = text;
  edited.replace(edited.find("\"step\": 5"), 9, "\"step\": 6");
  absl::StatusOr<Manifest> changed = decode_manifest(edited, "m");
  ASSERT_TRUE(absl::IsDataLoss(changed.status()));
  EXPECT_NE(changed.status().message().find("checksum mismatch"), std::string::npos);
  // A manifest of before tensors had "split" (tp = 1) and the layout
  // "virtual_stages" (1) reads as if it had them.
  std::string old = text;
  for (const char* key : {"\"split\": ", "\"virtual_stages\": "}) {
    for (size_t at = old.find(key); at != std::string::npos; at = old.find(key))
      old.erase(at, old.find('\n', at) + 1 - at);
  }
  absl::StatusOr<Manifest> before = decode_manifest(old, "m", /*verify_checksum=*/false);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->tensors, good->tensors);
  EXPECT_EQ(before->layout, good->layout);
}

// What a probe of the running system found (also `ctest -L reliability`): a
// corrupt `latest` that a save of its step could not replace, and failed
// saves whose directories piled up.
class CheckpointReliabilityTest : public CheckpointTest {
 protected:
  // Every file under the checkpoint directory, and its bytes.
  std::map<std::string, std::string> contents() const {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.is_regular_file()) files[e.path().string()] = *io::Env::posix()->read_file(e.path());
    }
    return files;
  }
  // The step directories there, in order.
  std::vector<std::string> step_dirs() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (parse_step_dir_name(e.path().filename().string()))
        names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(CheckpointReliabilityTest, ACorruptLatestIsReplacedByASaveOfTheSameStep) {
  // Each way a checkpoint fails verification: a shard's byte flipped (found
  // only by its checksum), a shard cut short, the manifest's byte flipped.
  for (const std::string corruption : {"flipped shard byte", "truncated shard", "bad manifest"}) {
    SCOPED_TRACE(corruption);
    fs::remove_all(dir_);
    ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
    ASSERT_TRUE(save(io::Env::posix(), dir_, 120, 2).ok());
    const std::string victim = corruption == "bad manifest"
                                   ? step_dir(dir_, 120) + "/" + kManifestFile
                                   : shard_path(120, 1);
    std::string bytes = *io::Env::posix()->read_file(victim);
    if (corruption == "truncated shard") {
      bytes.resize(bytes.size() / 2);
    } else {
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5A);
    }
    std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes;
    ASSERT_TRUE(absl::IsDataLoss(verify_checkpoint(io::Env::posix(), dir_, 120)));
    ASSERT_EQ(*io::Env::posix()->read_file(dir_ + "/latest"), latest_pointer(120));
    // A resume falls back to step 100, runs step 120 again and saves it: the
    // save replaces the corrupt one rather than being refused.
    absl::Status saved = save(io::Env::posix(), dir_, 120, 2);
    ASSERT_TRUE(saved.ok()) << saved;
    EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/latest"), latest_pointer(120));
    EXPECT_TRUE(verify_checkpoint(io::Env::posix(), dir_, 120).ok());
    expect_loads(dir_, 120, 0, num_params());
    EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-00000100", "step-00000120"}));
  }
}

TEST_F(CheckpointReliabilityTest, AGoodLatestIsNotWrittenAgain) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 120, 2).ok());
  const std::map<std::string, std::string> before = contents();
  absl::Status again = begin_checkpoint(io::Env::posix(), dir_, 120);
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_EQ(again.message(),
            "step-00000120 is already saved and is latest; it is not written again");
  again = save(io::Env::posix(), dir_, 120, 3);  // another layout: still the same step
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
  EXPECT_EQ(contents(), before);
  EXPECT_TRUE(verify_checkpoint(io::Env::posix(), dir_, 120).ok());
}

TEST_F(CheckpointReliabilityTest, FailedSavesLeaveNoStepDirectoriesBehind) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 100, 2).ok());
  const int64_t bytes_per_owner = 3 * 4 * partition(num_params(), 2, 0).second;
  // Five saves fail on a full disk (nothing fits; a header fits; one owner's
  // file fits and the other's does not) or on an fsync of a shard file or of
  // the manifest; each is abandoned, as the Checkpointer does.
  int64_t step = 110;
  for (int k = 0; k < 5; ++k, step += 10) {
    testing::FaultEnv env;
    if (k < 3) {
      env.enospc_after(k == 0 ? 0 : k == 1 ? 100 : bytes_per_owner + 1000);
    } else {
      env.fail_sync(k == 3 ? 1 : 2);  // the second owner's file; the manifest
    }
    absl::Status s = save(&env, dir_, step, 2);
    ASSERT_FALSE(s.ok()) << "save " << k;
    ASSERT_TRUE(fs::exists(step_dir(dir_, step)));  // what the failed save left
    ASSERT_TRUE(abandon_checkpoint(io::Env::posix(), dir_, step).ok());
    EXPECT_FALSE(fs::exists(step_dir(dir_, step))) << "save " << k;
  }
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-00000100"}));
  EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/latest"), latest_pointer(100));
  expect_loads(dir_, 100, 0, num_params());
  // Abandoning a complete checkpoint (its manifest written, `latest` not:
  // the last fsync failed) or the one `latest` names leaves it.
  {
    testing::FaultEnv env;
    env.fail_sync(3);
    ASSERT_FALSE(save(&env, dir_, step, 2).ok());
    ASSERT_TRUE(abandon_checkpoint(io::Env::posix(), dir_, step).ok());
    EXPECT_TRUE(verify_checkpoint(io::Env::posix(), dir_, step).ok());
    ASSERT_TRUE(abandon_checkpoint(io::Env::posix(), dir_, 100).ok());
    expect_loads(dir_, 100, 0, num_params());
  }
  // The next save that succeeds keeps 2 (keep), and nothing else.
  ASSERT_TRUE(save(io::Env::posix(), dir_, step + 10, 2).ok());
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{step_dir_name(step), step_dir_name(step + 10)}));
}

TEST_F(CheckpointReliabilityTest, PruningRemovesStepDirectoriesWithoutALoadableCheckpoint) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 10, 2, /*keep=*/0).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 20, 2, /*keep=*/0).ok());
  // An empty directory (a save that died at once), a manifest that is not
  // one, and a checkpoint missing a file (another's copy: its manifest is of
  // step 20), all older than the next save; and a directory newer than it: a
  // save in progress.
  fs::create_directories(step_dir(dir_, 5));
  fs::create_directories(step_dir(dir_, 15));
  std::ofstream(step_dir(dir_, 15) + "/" + kManifestFile) << "{\"format\": \"troupe-chec";
  fs::copy(step_dir(dir_, 20), step_dir(dir_, 17));
  fs::remove(step_dir(dir_, 17) + "/shard-d0.p0.t0.bin");
  fs::create_directories(step_dir(dir_, 40));
  std::ofstream(step_dir(dir_, 40) + "/shard-d0.p0.t0.bin.tmp") << "being written";
  ASSERT_TRUE(save(io::Env::posix(), dir_, 30, 2, /*keep=*/2).ok());
  // The broken ones take no place among the `keep`: 20 and 30 stay.
  EXPECT_EQ(step_dirs(),
            (std::vector<std::string>{"step-00000020", "step-00000030", "step-00000040"}));
  EXPECT_TRUE(fs::exists(step_dir(dir_, 40) + "/shard-d0.p0.t0.bin.tmp"));
  // Pruning below a newest that does not load keeps `keep` older ones: the
  // only good checkpoint is never removed.
  ASSERT_TRUE(prune_checkpoints(io::Env::posix(), dir_, 40, 1).ok());
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-00000030", "step-00000040"}));
  expect_loads(dir_, 30, 0, num_params());
}

TEST_F(CheckpointReliabilityTest, PruningKeepsTheBestCheckpoint) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 10, 2, /*keep=*/0).ok());
  EXPECT_FALSE(best_checkpoint(io::Env::posix(), dir_).has_value());
  ASSERT_TRUE(mark_best_checkpoint(io::Env::posix(), dir_, 10).ok());
  EXPECT_EQ(best_checkpoint(io::Env::posix(), dir_), 10);
  ASSERT_TRUE(save(io::Env::posix(), dir_, 20, 2, /*keep=*/1).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 30, 2, /*keep=*/1).ok());
  // keep 1 leaves the newest, and the best besides.
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-00000010", "step-00000030"}));
  EXPECT_TRUE(verify_checkpoint(io::Env::posix(), dir_, 10).ok());
  // A new best lets the old one go at the next prune.
  ASSERT_TRUE(mark_best_checkpoint(io::Env::posix(), dir_, 30).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 40, 2, /*keep=*/1).ok());
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-00000030", "step-00000040"}));
}

// An env whose manifests cannot be read now (EIO, as a stale NFS handle or
// a flaky disk gives): not the checkpoints' fault.
class UnreadableManifests : public io::EnvWrapper {
 public:
  UnreadableManifests() : io::EnvWrapper(io::Env::posix()) {}
  absl::StatusOr<std::unique_ptr<io::RandomAccessFile>> new_random_access_file(
      const std::string& path) override {
    if (path.ends_with(kManifestFile)) return absl::InternalError(path + ": Input/output error");
    return target()->new_random_access_file(path);
  }
  absl::StatusOr<std::string> read_file(const std::string& path, size_t max_bytes) override {
    if (path.ends_with(kManifestFile)) return absl::InternalError(path + ": Input/output error");
    return target()->read_file(path, max_bytes);
  }
};

// A checkpoint whose manifest cannot be read for a passing reason is left
// where it is: pruning, abandoning and a save of the latest step all stop
// short of removing it (before, the read error counted as corruption, and
// each of them removed good checkpoints, the latest among them).
TEST_F(CheckpointReliabilityTest, ACheckpointThatCannotBeReadNowIsNeverRemoved) {
  ASSERT_TRUE(save(io::Env::posix(), dir_, 10, 2, /*keep=*/0).ok());
  ASSERT_TRUE(save(io::Env::posix(), dir_, 20, 2, /*keep=*/0).ok());
  const std::map<std::string, std::string> before = contents();
  UnreadableManifests env;
  // (keep 5: only a checkpoint taken for broken would go.)
  prune_checkpoints(&env, dir_, 30, 5).IgnoreError();
  EXPECT_TRUE(contents() == before) << "pruning removed or changed files";
  abandon_checkpoint(&env, dir_, 10).IgnoreError();
  EXPECT_TRUE(contents() == before) << "abandoning removed or changed files";
  absl::Status again = begin_checkpoint(&env, dir_, 20);
  EXPECT_FALSE(again.ok());
  EXPECT_FALSE(absl::IsDataLoss(again)) << again;
  EXPECT_TRUE(contents() == before) << "a save of the latest step removed or changed files";
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-00000010", "step-00000020"}));
  expect_loads(dir_, 20, 0, num_params());
}

TEST_F(CheckpointTest, StepDirectoryNames) {
  EXPECT_EQ(step_dir_name(120), "step-00000120");
  EXPECT_EQ(parse_step_dir_name("step-00000120"), 120);
  EXPECT_EQ(parse_step_dir_name("step-123456789"), 123456789);
  EXPECT_EQ(parse_step_dir_name("step-0000012"), std::nullopt);
  EXPECT_EQ(parse_step_dir_name("step-00000120.tmp"), std::nullopt);
  EXPECT_EQ(parse_step_dir_name("latest"), std::nullopt);
}

}  // namespace
}  // namespace troupe::checkpoint
