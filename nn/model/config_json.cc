#include "nn/model/config_json.h"

#include <climits>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::nn {
namespace {

using Json = nlohmann::ordered_json;

std::string describe_value(const Json& v) {
  if (v.is_string()) return absl::StrCat("string \"", v.get<std::string>(), "\"");
  if (v.is_boolean()) return v.get<bool>() ? "boolean true" : "boolean false";
  if (v.is_number()) return absl::StrCat("number ", v.dump());
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

// Reads the keys of one object, each error naming "where.key".
class Reader {
 public:
  Reader(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  absl::Status error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ".", key, ": ", what));
  }
  const Json* find(const char* key) {
    known_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  absl::Status read(const char* key, int* out, int64_t min) {
    const Json* v = find(key);
    if (v == nullptr) return absl::OkStatus();
    double d = 0;
    if (v->is_number_integer()) {
      d = static_cast<double>(v->get<int64_t>());
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      d = v->get<double>();
    } else {
      return error(key, absl::StrCat("expected an integer, found ", describe_value(*v)));
    }
    if (d < static_cast<double>(min) || d > INT_MAX) {
      return error(
          key, absl::StrCat(v->dump(), " is out of range; must be in [", min, ", ", INT_MAX, "]"));
    }
    *out = static_cast<int>(d);
    return absl::OkStatus();
  }
  absl::Status read(const char* key, double* out) {
    const Json* v = find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) {
      return error(key, absl::StrCat("expected a number, found ", describe_value(*v)));
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }
  absl::Status read(const char* key, bool* out) {
    const Json* v = find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) {
      return error(key, absl::StrCat("expected a boolean, found ", describe_value(*v)));
    }
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  void ignore(const char* key) { known_.insert(key); }
  absl::Status check_unknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (known_.count(it.key()) == 0) {
        std::vector<std::string> keys(known_.begin(), known_.end());
        return error(it.key(),
                     absl::StrCat("unknown key; the keys are ", absl::StrJoin(keys, ", ")));
      }
    }
    return absl::OkStatus();
  }

 private:
  const Json& j_;
  std::string where_;
  std::set<std::string> known_;
};

#define TROUPE_RETURN_IF_ERROR(expr)                                  \
  do {                                                                \
    if (absl::Status status_ = (expr); !status_.ok()) return status_; \
  } while (false)

absl::Status read_gpt2(Reader& r, GPTConfig* m) {
  TROUPE_RETURN_IF_ERROR(r.read("n_layer", &m->num_layers, 1));
  TROUPE_RETURN_IF_ERROR(r.read("n_head", &m->num_heads, 1));
  TROUPE_RETURN_IF_ERROR(r.read("n_embd", &m->channels, 1));
  TROUPE_RETURN_IF_ERROR(r.read("seq_len", &m->max_seq_len, 1));
  TROUPE_RETURN_IF_ERROR(r.read("vocab_size", &m->vocab_size, 1));
  return r.read("padded_vocab_size", &m->padded_vocab_size, 0);
}

absl::Status read_llama(Reader& r, LlamaConfig* m) {
  TROUPE_RETURN_IF_ERROR(r.read("vocab_size", &m->vocab_size, 1));
  TROUPE_RETURN_IF_ERROR(r.read("hidden_size", &m->hidden_size, 1));
  TROUPE_RETURN_IF_ERROR(r.read("intermediate_size", &m->intermediate_size, 1));
  TROUPE_RETURN_IF_ERROR(r.read("num_hidden_layers", &m->num_hidden_layers, 1));
  TROUPE_RETURN_IF_ERROR(r.read("num_attention_heads", &m->num_attention_heads, 1));
  TROUPE_RETURN_IF_ERROR(r.read("num_key_value_heads", &m->num_key_value_heads, 0));
  TROUPE_RETURN_IF_ERROR(r.read("max_position_embeddings", &m->max_position_embeddings, 1));
  TROUPE_RETURN_IF_ERROR(r.read("rms_norm_eps", &m->rms_norm_eps));
  TROUPE_RETURN_IF_ERROR(r.read("rope_theta", &m->rope_theta));
  TROUPE_RETURN_IF_ERROR(r.read("tie_word_embeddings", &m->tie_word_embeddings));
  return r.read("padded_vocab_size", &m->padded_vocab_size, 0);
}

}  // namespace

Json model_config_to_json(const ModelConfig& config) {
  Json j;
  j["type"] = architecture_name(config.architecture());
  if (const GPTConfig* g = config.gpt2()) {
    j["n_layer"] = g->num_layers;
    j["n_head"] = g->num_heads;
    j["n_embd"] = g->channels;
    j["seq_len"] = g->max_seq_len;
    j["vocab_size"] = g->vocab_size;
    j["padded_vocab_size"] = g->padded_vocab();
    return j;
  }
  const LlamaConfig& l = *config.llama();
  j["vocab_size"] = l.vocab_size;
  j["hidden_size"] = l.hidden_size;
  j["intermediate_size"] = l.intermediate_size;
  j["num_hidden_layers"] = l.num_hidden_layers;
  j["num_attention_heads"] = l.num_attention_heads;
  j["num_key_value_heads"] = l.kv_heads();
  j["max_position_embeddings"] = l.max_position_embeddings;
  j["rms_norm_eps"] = l.rms_norm_eps;
  j["rope_theta"] = l.rope_theta;
  j["tie_word_embeddings"] = l.tie_word_embeddings;
  j["padded_vocab_size"] = l.padded_vocab();
  return j;
}

absl::StatusOr<ModelConfig> model_config_from_json(const Json& j, const std::string& where,
                                                   const ModelConfig& base,
                                                   std::initializer_list<const char*> ignored) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected an object, found ", describe_value(j)));
  }
  Reader r(j, where);
  for (const char* key : ignored)
    r.ignore(key);
  Architecture arch = Architecture::kGpt2;
  if (const Json* type = r.find("type")) {
    const std::string name = type->is_string() ? type->get<std::string>() : "";
    if (name == "gpt2") {
      arch = Architecture::kGpt2;
    } else if (name == "llama") {
      arch = Architecture::kLlama;
    } else {
      return r.error("type", absl::StrCat(describe_value(*type),
                                          " is not an architecture; use \"gpt2\" or \"llama\""));
    }
  }
  ModelConfig config = base;
  if (config.architecture() != arch) {
    config = arch == Architecture::kGpt2 ? ModelConfig(GPTConfig{}) : ModelConfig(LlamaConfig{});
  }
  if (GPTConfig* g = config.gpt2()) {
    TROUPE_RETURN_IF_ERROR(read_gpt2(r, g));
  } else {
    TROUPE_RETURN_IF_ERROR(read_llama(r, config.llama()));
  }
  TROUPE_RETURN_IF_ERROR(r.check_unknown());
  if (absl::Status s = config.validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  return config;
}

absl::StatusOr<ModelConfig> model_config_from_json(const nlohmann::json& j,
                                                   const std::string& where) {
  return model_config_from_json(Json::parse(j.dump()), where);
}

std::string model_config_to_text(const ModelConfig& config) {
  return model_config_to_json(config).dump();
}

absl::StatusOr<ModelConfig> model_config_from_text(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("model config: not JSON: " + text);
  return model_config_from_json(j);
}

}  // namespace troupe::nn
