#include "checkpoint/manifest.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checksum.h"
#include "nn/model/config_json.h"
#include "nn/model/model.h"

namespace troupe::checkpoint {
namespace {

using nlohmann::json;

// The bounds of a model a manifest may describe (as trainers/config.h's).
constexpr int kMaxDimension = 1 << 24;
constexpr int kMaxMesh = 4096;
constexpr char kChecksumKey[] = "manifest_xxh64";

// What the checksum covers: the manifest as encoded, without its key.
uint64_t manifest_checksum(const json& without_key) {
  const std::string text = without_key.dump(1) + "\n";
  return xxh64(text.data(), text.size());
}

json encode_model(const nn::ModelConfig& m) {
  return json::parse(nn::model_config_to_text(m));
}

absl::Status data_loss(const std::string& where, const std::string& what) {
  return absl::DataLossError(absl::StrCat(where, ": ", what));
}

// A file name the manifest may give: inside the step's directory.
bool safe_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
  });
}

std::vector<std::string> states_of(const std::string& optimizer, bool momentum) {
  if (optimizer == "adamw") return {kParamState, kExpAvgState, kExpAvgSqState};
  if (momentum) return {kParamState, kMomentumState};
  return {kParamState};
}

// `slice_sizes`: the elements of each slice's buffer.
absl::Status check_shards(const Manifest& m, const std::string& where,
                          const std::vector<int64_t>& slice_sizes) {
  if (m.shards.empty()) return data_loss(where, "shards: none");
  if (m.shards.size() > kMaxShards) {
    return data_loss(where, absl::StrCat("shards: ", m.shards.size(), ", more than ", kMaxShards));
  }
  std::set<std::string> files;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(slice_sizes.size());
  const bool momentum = !m.shards[0].entries.empty() &&
                        std::any_of(m.shards[0].entries.begin(), m.shards[0].entries.end(),
                                    [](const ShardEntry& e) { return e.state == kMomentumState; });
  const std::vector<std::string> states = states_of(m.optimizer.type, momentum);
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const ShardRecord& s = m.shards[i];
    const std::string at = absl::StrCat("shards[", i, "]");
    if (!safe_file_name(s.file)) {
      return data_loss(
          where, absl::StrCat(at, ".file \"", s.file.substr(0, 64), "\" is not a plain file name"));
    }
    if (!files.insert(s.file).second) {
      return data_loss(where, absl::StrCat(at, ".file ", s.file, " is named twice"));
    }
    const Owner& o = s.owner;
    if (o.d < 0 || o.d >= m.layout.dp || o.p < 0 || o.p >= m.layout.pp || o.t < 0 ||
        o.t >= m.layout.tp) {
      return data_loss(where, absl::StrCat(at, ".owner ", to_string(o), " lies outside the mesh"));
    }
    const int64_t n = slice_sizes[static_cast<size_t>(o.t)];
    if (s.begin < 0 || s.begin > s.end || s.end > n) {
      return data_loss(where, absl::StrCat(at, ": range [", s.begin, ", ", s.end,
                                           ") does not lie in the buffer's ", n, " elements"));
    }
    ranges[static_cast<size_t>(o.t)].emplace_back(s.begin, s.end);
    if (s.entries.size() != states.size()) {
      return data_loss(where, absl::StrCat(at, ": ", s.entries.size(), " entries; a ",
                                           m.optimizer.type, " checkpoint has ", states.size()));
    }
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (size_t k = 0; k < s.entries.size(); ++k) {
      const ShardEntry& e = s.entries[k];
      if (e.state != states[k]) {
        return data_loss(where,
                         absl::StrCat(at, ".entries[", k, "].state \"", e.state.substr(0, 32),
                                      "\", expected \"", states[k], "\""));
      }
      const uint64_t want = static_cast<uint64_t>(s.end - s.begin) * sizeof(float);
      if (e.length != want || e.offset > (uint64_t{1} << 62)) {
        return data_loss(
            where, absl::StrCat(at, ".entries[", k, "]: ", e.length, " bytes at offset ", e.offset,
                                " for a range of ", s.end - s.begin, " elements"));
      }
      spans.emplace_back(e.offset, e.offset + e.length);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t k = 1; k < spans.size(); ++k) {
      if (spans[k].first < spans[k - 1].second) {
        return data_loss(where, absl::StrCat(at, ": its entries overlap in ", s.file));
      }
    }
  }
  // Each buffer's owners tile it: every element saved exactly once.
  for (size_t t = 0; t < slice_sizes.size(); ++t) {
    const int64_t size = slice_sizes[t];
    std::vector<std::pair<int64_t, int64_t>>& r = ranges[t];
    std::sort(r.begin(), r.end());
    int64_t covered = 0;
    for (const auto& [b, e] : r) {
      if (b == e) continue;
      if (b != covered) {
        return data_loss(where, absl::StrCat("shards: the buffer of slice ", t, " has ",
                                             b < covered ? "overlapping ranges" : "a gap",
                                             " at element ", std::min(b, covered)));
      }
      covered = e;
    }
    if (covered != size) {
      return data_loss(where, absl::StrCat("shards: the buffer of slice ", t,
                                           " is saved up to element ", covered, " of ", size));
    }
  }
  return absl::OkStatus();
}

// The tensors are the model's over layout.tp slices, each owned by a stage
// in [0, pp), the stages in buffer order. A record without a split (written
// before there was one, with tp = 1) takes the model's.
absl::Status check_tensors(Manifest& m, const std::string& where) {
  const nn::ModelConfig& g = m.model;
  // The count first: tensor_records of a model claiming 2^24 layers would be huge.
  const size_t per_slice = nn::count_tensors(g);
  if (m.tensors.size() != per_slice * static_cast<size_t>(m.layout.tp)) {
    return data_loss(
        where, absl::StrCat("tensors: ", m.tensors.size(), " records; the model has ", per_slice,
                            " tensors in each of ", m.layout.tp, " slices"));
  }
  const std::vector<TensorRecord> want = tensor_records(g, m.layout.tp);
  for (size_t i = 0; i < want.size(); ++i) {
    TensorRecord& r = m.tensors[i];
    if (r.split.empty() && m.layout.tp == 1) r.split = want[i].split;
    const int p_before = i % per_slice == 0 ? 0 : m.tensors[i - 1].p;
    if (r.p < p_before || r.p >= m.layout.pp) {
      return data_loss(where, absl::StrCat("tensors[", i, "] (", r.name.substr(0, 32), "): stage ",
                                           r.p, " out of order or outside the mesh"));
    }
    TensorRecord expected = want[i];
    expected.p = r.p;
    if (r != expected) {
      return data_loss(where, absl::StrCat("tensors[", i, "] (", r.name.substr(0, 32),
                                           "): not the model's (name, shape, split or offset "
                                           "differs)"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_manifest(Manifest& m, const std::string& where) {
  const nn::ModelConfig& g = m.model;
  // The codec validated the config; its sizes must also be ones a manifest can describe.
  for (auto [key, value] : {std::pair{"layers", g.num_layers()},
                            {"heads", g.num_heads()},
                            {"hidden size", g.hidden_size()},
                            {"sequence length", g.max_seq_len()},
                            {"padded vocabulary", g.padded_vocab()}}) {
    if (value < 1 || value > kMaxDimension) {
      return data_loss(
          where, absl::StrCat("model: ", key, " ", value, " is outside [1, ", kMaxDimension, "]"));
    }
  }
  const MeshLayout& l = m.layout;
  for (auto [key, value] : {std::pair{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}}) {
    if (value < 1 || value > kMaxMesh) {
      return data_loss(where,
                       absl::StrCat("layout.", key, " ", value, " is outside [1, ", kMaxMesh, "]"));
    }
  }
  if (l.zero_stage < 0 || l.zero_stage > 3) {
    return data_loss(where, absl::StrCat("layout.zero_stage ", l.zero_stage, " is not 0-3"));
  }
  if (l.virtual_stages < 1 || l.pp % l.virtual_stages != 0) {
    return data_loss(where, absl::StrCat("layout.virtual_stages ", l.virtual_stages,
                                         " does not divide layout.pp ", l.pp));
  }
  if (l.pp > g.num_layers()) {
    return data_loss(where, absl::StrCat("layout.pp ", l.pp, " for ", g.num_layers(), " layers"));
  }
  if (absl::Status s = nn::validate_slice(g, {.rank = 0, .size = l.tp}); !s.ok()) {
    return data_loss(where, absl::StrCat("layout.tp ", l.tp, ": ", s.message()));
  }
  if (m.step < 0 || m.applied_steps < 0 || m.applied_steps > m.step) {
    return data_loss(where,
                     absl::StrCat("step ", m.step, " with ", m.applied_steps, " applied_steps"));
  }
  if (m.optimizer.type != "adamw" && m.optimizer.type != "sgd") {
    return data_loss(where, absl::StrCat("optimizer.type \"", m.optimizer.type.substr(0, 32),
                                         "\" is not adamw or sgd"));
  }
  if (m.optimizer.updates != m.applied_steps) {
    return data_loss(where, absl::StrCat("optimizer.updates ", m.optimizer.updates,
                                         " differs from applied_steps ", m.applied_steps));
  }
  if (m.data.position < 0 || m.data.epoch < 0 || m.data.samples_per_epoch < 1) {
    return data_loss(where,
                     absl::StrCat("data: position ", m.data.position, ", epoch ", m.data.epoch,
                                  ", samples_per_epoch ", m.data.samples_per_epoch));
  }
  if (m.loss_scaler && !(std::isfinite(m.loss_scaler->scale) && m.loss_scaler->scale > 0 &&
                         m.loss_scaler->iteration >= 0 && m.loss_scaler->hysteresis_left >= 0)) {
    return data_loss(where, "loss_scaler: a scale <= 0 or a negative iteration");
  }
  if (absl::Status s = check_tensors(m, where); !s.ok()) return s;
  std::vector<int64_t> slice_sizes;
  for (int t = 0; t < l.tp; ++t) {
    slice_sizes.push_back(
        static_cast<int64_t>(nn::model_layout(g, {.rank = t, .size = l.tp}).num_params()));
  }
  return check_shards(m, where, slice_sizes);
}

}  // namespace

std::string to_string(const Owner& o) {
  return absl::StrCat("d", o.d, ".p", o.p, ".t", o.t);
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

std::string split_name(nn::TensorSplit split) {
  switch (split) {
    case nn::TensorSplit::kReplicated:
      return "replicated";
    case nn::TensorSplit::kRows:
      return "rows";
    case nn::TensorSplit::kQkvRows:
      return "qkv_rows";
    case nn::TensorSplit::kColumns:
      return "columns";
  }
  return "";
}

std::vector<TensorRecord> tensor_records(const nn::ModelConfig& model, int tp,
                                         const std::vector<nn::ParamRange>& stages) {
  std::vector<TensorRecord> out;
  const nn::ModelLayout whole = nn::model_layout(model);
  for (int t = 0; t < tp; ++t) {
    const nn::ModelLayout layout = nn::model_layout(model, {.rank = t, .size = tp});
    int p = 0;
    for (size_t i = 0; i < layout.tensors().size(); ++i) {
      const nn::ParamTensor& s = layout.tensors()[i];
      while (static_cast<size_t>(p) + 1 < stages.size() &&
             s.offset >= stages[static_cast<size_t>(p)].end) {
        ++p;
      }
      TensorRecord r{.name = s.name,
                     .shape = {},
                     .dtype = "float32",
                     .split = split_name(s.split),
                     .p = p,
                     .t = t,
                     .offset = static_cast<int64_t>(s.offset),
                     .size = static_cast<int64_t>(s.size)};
      for (int d : whole.tensors()[i].shape)
        r.shape.push_back(d);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::string encode_manifest(const Manifest& m) {
  json tensors = json::array();
  for (const TensorRecord& t : m.tensors) {
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", t.dtype},
                       {"split", t.split},
                       {"p", t.p},
                       {"t", t.t},
                       {"offset", t.offset},
                       {"size", t.size}});
  }
  json shards = json::array();
  for (const ShardRecord& s : m.shards) {
    json entries = json::array();
    for (const ShardEntry& e : s.entries) {
      entries.push_back({{"state", e.state},
                         {"offset", e.offset},
                         {"length", e.length},
                         {"xxh64", hex64(e.xxh64)}});
    }
    shards.push_back({{"file", s.file},
                      {"owner", {{"d", s.owner.d}, {"p", s.owner.p}, {"t", s.owner.t}}},
                      {"begin", s.begin},
                      {"end", s.end},
                      {"entries", std::move(entries)}});
  }
  json j = {{"format", kManifestFormat},
            {"version", kManifestVersion},
            {"step", m.step},
            {"applied_steps", m.applied_steps},
            {"created_ms", m.created_ms},
            {"model", encode_model(m.model)},
            {"layout",
             {{"dp", m.layout.dp},
              {"pp", m.layout.pp},
              {"tp", m.layout.tp},
              {"zero_stage", m.layout.zero_stage},
              {"virtual_stages", m.layout.virtual_stages}}},
            {"optimizer", {{"type", m.optimizer.type}, {"updates", m.optimizer.updates}}},
            {"data",
             {{"position", m.data.position},
              {"epoch", m.data.epoch},
              {"samples_per_epoch", m.data.samples_per_epoch}}},
            {"rng", {{"seed", m.rng.seed}, {"task_seed", m.rng.task_seed}}},
            {"loss_scaler", nullptr},
            {"config_hash", hex64(m.config_hash)},
            {"config", m.config.empty() ? json(nullptr) : json::parse(m.config, nullptr, false)},
            {"tokenizer", m.tokenizer},
            {"tensors", std::move(tensors)},
            {"shards", std::move(shards)}};
  if (m.loss_scaler) {
    j["loss_scaler"] = {{"scale", m.loss_scaler->scale},
                        {"iteration", m.loss_scaler->iteration},
                        {"last_overflow_iteration", m.loss_scaler->last_overflow_iteration},
                        {"hysteresis_left", m.loss_scaler->hysteresis_left}};
  }
  j[kChecksumKey] = hex64(manifest_checksum(j));
  return j.dump(1) + "\n";
}

absl::StatusOr<Manifest> decode_manifest(const std::string& text, const std::string& where,
                                         bool verify_checksum) {
  if (text.size() > kMaxManifestBytes) {
    return data_loss(where, absl::StrCat("larger than ", kMaxManifestBytes, " bytes"));
  }
  Manifest m;
  try {
    json j = json::parse(text);
    if (!j.is_object() || j.value("format", "") != kManifestFormat) {
      return data_loss(where, "not a troupe checkpoint manifest (corrupt?)");
    }
    auto parse_hex = [](const json& v) -> std::optional<uint64_t> {
      const std::string h = v.get<std::string>();
      uint64_t out = 0;
      if (h.size() != 16 || !absl::SimpleHexAtoi(h, &out)) return std::nullopt;
      return out;
    };
    if (verify_checksum) {
      std::optional<uint64_t> sum = parse_hex(j.at(kChecksumKey));
      j.erase(kChecksumKey);
      if (!sum || *sum != manifest_checksum(j)) {
        return data_loss(where, "checksum mismatch (the manifest was changed or is corrupt)");
      }
    }
    if (j.at("version") != kManifestVersion) {
      return data_loss(where, absl::StrCat("manifest version ", j.at("version").dump(),
                                           "; this troupe reads version ", kManifestVersion));
    }
    m.step = j.at("step").get<int64_t>();
    m.applied_steps = j.at("applied_steps").get<int64_t>();
    m.created_ms = j.at("created_ms").get<int64_t>();
    absl::StatusOr<nn::ModelConfig> model = nn::model_config_from_json(j.at("model"), "model");
    if (!model.ok()) return data_loss(where, std::string(model.status().message()));
    m.model = *std::move(model);
    const json& layout = j.at("layout");
    m.layout = {.dp = layout.at("dp").get<int>(),
                .pp = layout.at("pp").get<int>(),
                .tp = layout.at("tp").get<int>(),
                .zero_stage = layout.at("zero_stage").get<int>(),
                .virtual_stages = layout.value("virtual_stages", 1)};
    m.optimizer = {.type = j.at("optimizer").at("type").get<std::string>(),
                   .updates = j.at("optimizer").at("updates").get<int64_t>()};
    const json& data = j.at("data");
    m.data = {.position = data.at("position").get<int64_t>(),
              .epoch = data.at("epoch").get<int64_t>(),
              .samples_per_epoch = data.at("samples_per_epoch").get<int64_t>()};
    m.rng = {.seed = j.at("rng").at("seed").get<uint64_t>(),
             .task_seed = j.at("rng").at("task_seed").get<uint64_t>()};
    if (const json& ls = j.at("loss_scaler"); !ls.is_null()) {
      m.loss_scaler = nn::LossScalerState{
          .scale = ls.at("scale").get<double>(),
          .iteration = ls.at("iteration").get<int64_t>(),
          .last_overflow_iteration = ls.at("last_overflow_iteration").get<int64_t>(),
          .hysteresis_left = ls.at("hysteresis_left").get<int>()};
    }
    std::optional<uint64_t> hash = parse_hex(j.at("config_hash"));
    if (!hash) return data_loss(where, "config_hash is not 16 hex digits");
    m.config_hash = *hash;
    if (const json& c = j.at("config"); !c.is_null()) m.config = c.dump();
    if (j.contains("tokenizer")) {
      const json& t = j.at("tokenizer");
      if (!t.is_string() || t.get<std::string>().empty() || t.get<std::string>().size() > 256) {
        return data_loss(where, "tokenizer: not a tokenizer id");
      }
      m.tokenizer = t.get<std::string>();
    }
    const json& tensors = j.at("tensors");
    if (!tensors.is_array() || tensors.size() > kMaxTensors) {
      return data_loss(where, "tensors: not an array of at most 2^20");
    }
    for (const json& t : tensors) {
      m.tensors.push_back({.name = t.at("name").get<std::string>(),
                           .shape = t.at("shape").get<std::vector<int64_t>>(),
                           .dtype = t.at("dtype").get<std::string>(),
                           .split = t.value("split", std::string()),
                           .p = t.at("p").get<int>(),
                           .t = t.at("t").get<int>(),
                           .offset = t.at("offset").get<int64_t>(),
                           .size = t.at("size").get<int64_t>()});
    }
    const json& shards = j.at("shards");
    if (!shards.is_array() || shards.size() > kMaxShards) {
      return data_loss(where, absl::StrCat("shards: not an array of at most ", kMaxShards));
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      const json& s = shards[i];
      ShardRecord r{.file = s.at("file").get<std::string>(),
                    .owner = {.d = s.at("owner").at("d").get<int>(),
                              .p = s.at("owner").at("p").get<int>(),
                              .t = s.at("owner").at("t").get<int>()},
                    .begin = s.at("begin").get<int64_t>(),
                    .end = s.at("end").get<int64_t>(),
                    .entries = {}};
      const json& entries = s.at("entries");
      if (!entries.is_array() || entries.size() > 16) {
        return data_loss(where,
                         absl::StrCat("shards[", i, "].entries: not an array of at most 16"));
      }
      for (const json& e : entries) {
        std::optional<uint64_t> sum = parse_hex(e.at("xxh64"));
        if (!sum)
          return data_loss(where, absl::StrCat("shards[", i, "]: an xxh64 is not 16 hex digits"));
        r.entries.push_back({.state = e.at("state").get<std::string>(),
                             .offset = e.at("offset").get<uint64_t>(),
                             .length = e.at("length").get<uint64_t>(),
                             .xxh64 = *sum});
      }
      m.shards.push_back(std::move(r));
    }
  } catch (const json::exception& e) {
    return data_loss(where, absl::StrCat("corrupt manifest: ", e.what()));
  }
  if (absl::Status s = check_manifest(m, where); !s.ok()) return s;
  return m;
}

}  // namespace troupe::checkpoint
