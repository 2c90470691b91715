#include "engine/attention_precision.h"

#include <stdexcept>
#include <string>

namespace troupe {

AttentionPrecision attention_precision_from_name(std::string_view name) {
  if (name == "fp32") return AttentionPrecision::fp32;
  if (name == "bf16") return AttentionPrecision::bf16;
  throw std::invalid_argument("unknown attention precision '" + std::string(name) + "' (fp32, bf16)");
}

const char* attention_precision_name(AttentionPrecision precision) {
  return precision == AttentionPrecision::bf16 ? "bf16" : "fp32";
}

}  // namespace troupe
