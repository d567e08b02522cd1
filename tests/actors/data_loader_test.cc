// DataLoader and DataLoaderActor: batches are the sampler's samples read
// from the dataset; prefetching changes no batch; seek and start_position
// resume exactly; a reshape to another dp keeps each step's samples; errors
// name what is wrong; the actor does the same through an in-process
// ActorSystem.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "actors/data/data_loader.h"
#include "actors/data/data_loader_actor.h"
#include "actors/data/token_dataset_writer.h"
#include "core/actor.h"
#include "core/codec.h"

namespace troupe::actors {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "troupe-data-XXXXXX").string();
    EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

LoaderOptions addition_options(int prefetch) {
  return {.task = "addition",
          .addition = {.digits = 2, .num_samples = 50, .seed = 3, .seq_len = 0},
          .seq_len = 16,
          .micro_batch = 3,
          .grad_accum = 2,
          .dp = 2,
          .rank = 1,
          .seed = 17,
          .shuffle = true,
          .prefetch = prefetch};
}

std::unique_ptr<DataLoader> make_loader(const LoaderOptions& options) {
  auto loader = DataLoader::create(options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? *std::move(loader) : nullptr;
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.sample_ids, b.sample_ids);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.targets, b.targets);
}

TEST(DataLoaderTest, BatchesAreTheSamplersSamples) {
  auto loader = make_loader(addition_options(0));
  ASSERT_NE(loader, nullptr);
  const LoaderInfo& info = loader->info();
  EXPECT_EQ(info.num_samples, 50);
  EXPECT_EQ(info.seq_len, 16);
  EXPECT_EQ(info.samples_per_micro_step, 6);
  EXPECT_EQ(info.samples_per_replica_step, 6);
  EXPECT_EQ(info.global_batch, 12);
  EXPECT_EQ(info.steps_per_epoch, 4);
  EXPECT_EQ(info.samples_per_epoch, 48);
  EXPECT_EQ(info.vocab_size, 256);
  EXPECT_NE(info.source.find("synthetic addition"), std::string::npos) << info.source;

  auto sampler = DistributedSampler::create(
      {.num_samples = 50, .micro_batch = 3, .grad_accum = 2, .dp = 2, .rank = 1, .seed = 17});
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> inputs(16), targets(16);
  for (int step = 0; step < 10; ++step) {  // past the first epoch (8 micro-steps)
    EXPECT_EQ(loader->position(), step * 6);
    auto batch = loader->next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->position, step * 6);
    EXPECT_EQ(batch->epoch, step < 8 ? 0 : 1);
    EXPECT_EQ(batch->sample_ids, sampler->micro_batch_indices(step * 6));
    ASSERT_EQ(batch->inputs.size(), 3u * 16);
    ASSERT_EQ(batch->targets.size(), 3u * 16);
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_TRUE(loader->dataset()
                      .read_sample(batch->sample_ids[k], 16, inputs.data(), targets.data())
                      .ok());
      EXPECT_TRUE(std::equal(inputs.begin(), inputs.end(), batch->inputs.begin() + 16 * k));
      EXPECT_TRUE(std::equal(targets.begin(), targets.end(), batch->targets.begin() + 16 * k));
    }
  }
}

TEST(DataLoaderTest, PrefetchGivesTheSameBatches) {
  auto plain = make_loader(addition_options(0));
  auto ahead = make_loader(addition_options(4));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(ahead, nullptr);
  for (int i = 0; i < 25; ++i) {
    auto a = plain->next();
    auto b = ahead->next();
    ASSERT_TRUE(a.ok() && b.ok());
    expect_same(*a, *b);
  }
  EXPECT_EQ(plain->position(), ahead->position());
}

TEST(DataLoaderTest, SeekAndStartPositionResumeExactly) {
  for (int prefetch : {0, 1, 3}) {
    SCOPED_TRACE(prefetch);
    auto loader = make_loader(addition_options(prefetch));
    ASSERT_NE(loader, nullptr);
    std::vector<Batch> first;
    for (int i = 0; i < 6; ++i)
      first.push_back(*loader->next());
    const int64_t saved = first[2].position;  // position() after 2 batches

    ASSERT_TRUE(loader->seek(saved).ok());  // backwards, with batches queued
    EXPECT_EQ(loader->position(), saved);
    for (int i = 2; i < 6; ++i)
      expect_same(*loader->next(), first[static_cast<size_t>(i)]);

    ASSERT_TRUE(loader->seek(first[5].position).ok());
    expect_same(*loader->next(), first[5]);

    LoaderOptions resumed = addition_options(prefetch);
    resumed.start_position = saved;
    auto fresh = make_loader(resumed);
    ASSERT_NE(fresh, nullptr);
    expect_same(*fresh->next(), first[2]);

    EXPECT_EQ(loader->seek(-6).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(DataLoaderTest, ReplicasSplitEachMicroStep) {
  std::set<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = addition_options(2);
    o.rank = rank;
    auto loader = make_loader(o);
    ASSERT_NE(loader, nullptr);
    for (int i = 0; i < 8; ++i) {  // one epoch
      absl::StatusOr<Batch> batch = loader->next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (int64_t id : batch->sample_ids) {
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice";
      }
    }
  }
  EXPECT_EQ(seen.size(), 48u);  // 50 - 50 mod 12
}

// Elasticity: dp 2 -> 3 -> 1 at step boundaries, the global batch (12) kept.
// Each step trains on the same samples as at dp 2 throughout, and the epoch
// sees every sample once.
TEST(DataLoaderTest, AReshapeKeepsEachStepsSamples) {
  // The samples of each step (4 steps: one epoch of 48) at a fixed dp 2.
  std::vector<std::multiset<int64_t>> fixed(4);
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = addition_options(2);
    o.rank = rank;
    auto loader = make_loader(o);
    ASSERT_NE(loader, nullptr);
    for (int step = 0; step < 4; ++step) {
      for (int k = 0; k < 2; ++k) {  // 3 x 2 x 2: two micro-steps of 3 a step
        absl::StatusOr<Batch> batch = loader->next();
        ASSERT_TRUE(batch.ok()) << batch.status();
        fixed[step].insert(batch->sample_ids.begin(), batch->sample_ids.end());
      }
    }
  }
  // The same epoch, resized after each step: dp 2 (3 x 2), 3 (2 x 2), 1 (6 x 2), 2 (6 x 1).
  struct Shape {
    int dp, micro, accumulation;
  };
  const Shape shapes[4] = {{2, 3, 2}, {3, 2, 2}, {1, 6, 2}, {2, 6, 1}};
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions o = addition_options(rank == 1 ? 0 : 2);  // with and without prefetch
    o.rank = rank % 2;
    loaders.push_back(make_loader(o));
    ASSERT_NE(loaders.back(), nullptr);
  }
  std::set<int64_t> epoch;
  for (int step = 0; step < 4; ++step) {
    const Shape& shape = shapes[step];
    std::multiset<int64_t> seen;
    for (int rank = 0; rank < shape.dp; ++rank) {
      DataLoader& loader = *loaders[rank];
      ASSERT_TRUE(loader.reshape(shape.dp, rank, shape.micro, shape.accumulation, 12 * step).ok());
      EXPECT_EQ(loader.info().global_batch, 12);
      EXPECT_EQ(loader.info().samples_per_replica_step, shape.micro * shape.accumulation);
      for (int k = 0; k < shape.accumulation; ++k) {
        absl::StatusOr<Batch> batch = loader.next();
        ASSERT_TRUE(batch.ok()) << batch.status();
        EXPECT_EQ(batch->sample_ids.size(), static_cast<size_t>(shape.micro));
        seen.insert(batch->sample_ids.begin(), batch->sample_ids.end());
      }
      EXPECT_EQ(loader.position(), 12 * (step + 1));
    }
    EXPECT_EQ(seen, fixed[step]) << "step " << step + 1 << " at dp " << shape.dp;
    epoch.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(epoch.size(), 48u);  // every sample of the epoch, once
}

TEST(DataLoaderTest, AReshapeThatChangesTheGlobalBatchIsRefused) {
  auto loader = make_loader(addition_options(2));
  ASSERT_NE(loader, nullptr);
  absl::Status s = loader->reshape(3, 0, 3, 2, 0);  // 18, not 12
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the global batch would change from 12 to 18"), std::string::npos)
      << s;
  EXPECT_EQ(loader->reshape(3, 3, 2, 2, 0).code(), absl::StatusCode::kInvalidArgument);  // rank
  EXPECT_EQ(loader->reshape(2, 0, 3, 2, -1).code(), absl::StatusCode::kInvalidArgument);
  // Nothing changed: still rank 1 of 2 from position 0.
  absl::StatusOr<Batch> batch = loader->next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->position, 0);
  EXPECT_EQ(loader->info().samples_per_micro_step, 6);
}

TEST(DataLoaderTest, ReadsADatasetFile) {
  TempDir dir;
  std::vector<int32_t> tokens(1001);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i % 251);
  ASSERT_TRUE(write_token_dataset(dir.path("d"), tokens, 256, "bytes").ok());
  auto loader = make_loader(
      {.path = dir.path("d"), .seq_len = 10, .micro_batch = 4, .shuffle = false, .prefetch = 2});
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->info().num_samples, 100);
  EXPECT_EQ(loader->info().source, dir.path("d.bin"));
  loader->next().IgnoreError();
  auto batch = loader->next();  // samples 4..7 in order
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->sample_ids, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(batch->inputs[0], 40);
  EXPECT_EQ(batch->targets[0], 41);
  EXPECT_EQ(batch->targets.back(), 80);
}

TEST(DataLoaderTest, CorruptTokenIsAStickyErrorUntilSeek) {
  TempDir dir;
  std::vector<int32_t> tokens(101, 5);
  tokens[55] = 250;  // sample 5 of seq_len 10
  ASSERT_TRUE(write_token_dataset(dir.path("c"), tokens, 256, "bytes").ok());
  std::ofstream(dir.path("c.json"), std::ios::trunc)
      << R"({"format": "troupe-tokens", "version": 1, "dtype": "uint16", "vocab_size": 100,)"
      << R"( "num_tokens": 101, "tokenizer": "bytes"})";
  for (int prefetch : {0, 3}) {
    SCOPED_TRACE(prefetch);
    auto loader = make_loader({.path = dir.path("c"),
                               .seq_len = 10,
                               .micro_batch = 1,
                               .shuffle = false,
                               .prefetch = prefetch});
    ASSERT_NE(loader, nullptr);
    for (int i = 0; i < 5; ++i)
      ASSERT_TRUE(loader->next().ok());
    for (int i = 0; i < 2; ++i) {
      auto bad = loader->next();
      ASSERT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(bad.status().message().find("token 55 is 250"), std::string::npos) << bad.status();
      EXPECT_EQ(loader->position(), 5);
    }
    ASSERT_TRUE(loader->seek(6).ok());
    auto good = loader->next();
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_EQ(good->sample_ids, (std::vector<int64_t>{6}));
  }
}

TEST(DataLoaderTest, BadOptionsAndMissingDataFailCreate) {
  TempDir dir;
  auto missing = DataLoader::create({.path = dir.path("none"), .seq_len = 8});
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.path("none.json")), std::string::npos);

  ASSERT_TRUE(write_token_dataset(dir.path("small"), std::vector<int32_t>(65, 1), 256, "b").ok());
  auto too_long = DataLoader::create({.path = dir.path("small"), .seq_len = 64, .micro_batch = 2});
  ASSERT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("65 tokens make 1 samples of seq_len 64, fewer "
                                             "than one global batch"),
            std::string::npos)
      << too_long.status();

  auto message = [](LoaderOptions o) {
    return std::string(DataLoader::create(o).status().message());
  };
  EXPECT_NE(message({}).find("set path"), std::string::npos);
  EXPECT_NE(message({.path = "x", .task = "addition"}).find("both"), std::string::npos);
  EXPECT_NE(message({.task = "multiply"}).find("unknown task \"multiply\""), std::string::npos);
  LoaderOptions o = addition_options(0);
  o.rank = 2;
  EXPECT_NE(message(o).find("rank 2"), std::string::npos);
  o = addition_options(0);
  o.addition.seq_len = 8;
  EXPECT_NE(message(o).find("addition.seq_len 8"), std::string::npos);
  o = addition_options(0);
  o.prefetch = -1;
  EXPECT_NE(message(o).find("prefetch is -1"), std::string::npos);
  o = addition_options(0);
  o.seq_len = 0;
  EXPECT_NE(message(o).find("seq_len is 0"), std::string::npos);
}

TEST(DataLoaderTest, SharedDatasetOverload) {
  auto data = make_addition_dataset({.digits = 2, .num_samples = 50, .seed = 3, .seq_len = 16});
  ASSERT_TRUE(data.ok());
  auto shared = DataLoader::create(addition_options(0), *data);
  ASSERT_TRUE(shared.ok()) << shared.status();
  auto own = make_loader(addition_options(0));
  expect_same(*(*shared)->next(), *own->next());
}

TEST(DataLoaderActorTest, ServesTheSameBatchesAsTheLoader) {
  ActorSystem system({.threads = 2});
  auto actor = system.spawn<DataLoaderActor>({.name = "loader-1"}, addition_options(2));
  ASSERT_TRUE(actor.ok()) << actor.status();
  auto direct = make_loader(addition_options(0));

  auto info = actor->call(&DataLoaderActor::info).get(kWait);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->steps_per_epoch, 4);
  EXPECT_EQ(info->global_batch, 12);
  std::vector<Batch> got;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Batch> batch = actor->call(&DataLoaderActor::next).get(kWait);
    ASSERT_TRUE(batch.ok()) << batch.status();
    expect_same(*batch, *direct->next());
    got.push_back(*batch);
  }
  EXPECT_EQ(*actor->call(&DataLoaderActor::position).get(kWait), 30);
  absl::Status sought = actor->call(&DataLoaderActor::seek, int64_t{12}).get(kWait);
  ASSERT_TRUE(sought.ok()) << sought;
  EXPECT_EQ(*actor->call(&DataLoaderActor::position).get(kWait), 12);
  expect_same(*actor->call(&DataLoaderActor::next).get(kWait), got[2]);
  EXPECT_EQ(actor->call(&DataLoaderActor::seek, int64_t{-1}).get(kWait).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataLoaderActorTest, SpawnFailsWithTheLoadersError) {
  TempDir dir;
  ActorSystem system({.threads = 2});
  auto actor = system.spawn<DataLoaderActor>({}, LoaderOptions{.path = dir.path("gone")});
  ASSERT_FALSE(actor.ok());
  auto direct = DataLoader::create(LoaderOptions{.path = dir.path("gone")});
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(actor.status().code(), direct.status().code());
  const std::string message(actor.status().message());
  EXPECT_NE(message.find("cannot spawn DataLoaderActor: "), std::string::npos) << message;
  EXPECT_NE(message.find(dir.path("gone.json")), std::string::npos) << message;
  EXPECT_EQ(system.num_actors(), 0u);
}

TEST(DataLoaderActorTest, OptionsAndBatchesCrossProcesses) {
  // Another process spawns the actor with encoded LoaderOptions.
  EXPECT_NE(find_constructor(actor_type_of<DataLoaderActor>(),
                             detail::constructor_signature<LoaderOptions>()),
            nullptr);
  LoaderOptions options = addition_options(1);
  options.start_position = 36;
  Writer w;
  encode_values(w, options);
  Reader r(w.bytes());
  LoaderOptions decoded;
  ASSERT_TRUE(decode_values(r, decoded).ok());
  EXPECT_EQ(decoded.task, "addition");
  EXPECT_EQ(decoded.addition.seed, 3u);
  EXPECT_EQ(decoded.start_position, 36);
  EXPECT_EQ(decoded.rank, 1);

  auto loader = make_loader(options);
  Batch batch = *loader->next();
  Writer bw;
  encode_values(bw, batch);
  Reader br(bw.bytes());
  Batch back;
  ASSERT_TRUE(decode_values(br, back).ok());
  expect_same(back, batch);
}

}  // namespace
}  // namespace troupe::actors
