// Codecs for the nn types that travel in actor calls: the model's config and
// options, element types, parameter ranges. nn knows nothing of core, so
// they live here, in the first layer that sees both (docs/design.md,
// "Layers"). Each decodes strictly: a DType outside the enum or a range whose
// end lies before its begin is a malformed value.
#pragma once

#include <cstdint>
#include <string>

#include "core/codec.h"
#include "nn/dtype.h"
#include "nn/model/config_json.h"
#include "nn/model/model.h"
#include "nn/optim/param_range.h"

namespace troupe {

// The config's JSON text (nn/model/config_json.h: the one codec of a model config).
template <>
struct Codec<nn::ModelConfig> {
  static constexpr size_t min_bytes() { return sizeof(uint32_t); }
  static std::string name() { return "ModelConfig"; }
  static void encode(Writer& w, const nn::ModelConfig& c) {
    Codec<std::string>::encode(w, nn::model_config_to_text(c));
  }
  static bool decode(Reader& r, nn::ModelConfig& c) {
    std::string text;
    if (!r.read(text)) return false;
    absl::StatusOr<nn::ModelConfig> config = nn::model_config_from_text(text);
    if (!config.ok()) return r.fail(std::string(config.status().message()));
    c = *std::move(config);
    return true;
  }
};

template <>
struct Codec<nn::ModelOptions> {
  static constexpr size_t min_bytes() { return 2; }
  static std::string name() { return "ModelOptions"; }
  static void encode(Writer& w, const nn::ModelOptions& o) {
    w.write(o.recompute_activations);
    w.write(static_cast<uint8_t>(o.matmul));
  }
  static bool decode(Reader& r, nn::ModelOptions& o) {
    uint8_t matmul = 0;
    if (!r.read(o.recompute_activations) || !r.read(matmul)) return false;
    if (matmul > static_cast<uint8_t>(nn::DType::kBFloat16)) {
      return r.fail("ModelOptions: matmul is not a dtype");
    }
    o.matmul = static_cast<nn::DType>(matmul);
    return true;
  }
};

template <>
struct Codec<nn::DType> {
  static constexpr size_t min_bytes() { return 1; }
  static std::string name() { return "DType"; }
  static void encode(Writer& w, nn::DType t) { w.write(static_cast<uint8_t>(t)); }
  static bool decode(Reader& r, nn::DType& t) {
    uint8_t v = 0;
    if (!r.read(v)) return false;
    if (v > static_cast<uint8_t>(nn::DType::kBFloat16)) {
      return r.fail("DType " + std::to_string(v) +
                    " is not float32 (0), float16 (1) or bfloat16 (2)");
    }
    t = static_cast<nn::DType>(v);
    return true;
  }
};

// Two u64: begin, end.
template <>
struct Codec<nn::ParamRange> {
  static constexpr size_t min_bytes() { return 2 * sizeof(uint64_t); }
  static std::string name() { return "ParamRange"; }
  static void encode(Writer& w, const nn::ParamRange& p) {
    encode_values(w, static_cast<uint64_t>(p.begin), static_cast<uint64_t>(p.end));
  }
  static bool decode(Reader& r, nn::ParamRange& p) {
    uint64_t begin = 0, end = 0;
    if (!r.read(begin) || !r.read(end)) return false;
    if (end < begin) {
      return r.fail("ParamRange [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") ends before it begins");
    }
    p = {static_cast<size_t>(begin), static_cast<size_t>(end)};
    return true;
  }
};

}  // namespace troupe
