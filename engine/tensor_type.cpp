#include "engine/tensor_type.h"

#include <array>
#include <stdexcept>

namespace troupe {
namespace {

struct Entry {
  TensorType type;
  TensorTypeTraits traits;
};

constexpr std::array<Entry, 10> kTypes{{
    {TensorType::F32, {"F32", 1, 4}},
    {TensorType::F16, {"F16", 1, 2}},
    {TensorType::Q4_0, {"Q4_0", 32, 18}},
    {TensorType::Q5_0, {"Q5_0", 32, 22}},
    {TensorType::Q8_0, {"Q8_0", 32, 34}},
    {TensorType::Q4_K, {"Q4_K", 256, 144}},
    {TensorType::Q5_K, {"Q5_K", 256, 176}},
    {TensorType::Q6_K, {"Q6_K", 256, 210}},
    {TensorType::Q8_K, {"Q8_K", 256, 292}},
    {TensorType::BF16, {"BF16", 1, 2}},
}};

}  // namespace

std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw_type) {
  for (const auto& e : kTypes)
    if (static_cast<uint32_t>(e.type) == raw_type) return e.traits;
  return std::nullopt;
}

TensorTypeTraits traits(TensorType type) {
  auto t = tensor_type_traits(static_cast<uint32_t>(type));
  if (!t) throw std::invalid_argument("unsupported tensor type");
  return *t;
}

std::string_view tensor_type_name(TensorType type) { return traits(type).name; }

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (const auto& e : kTypes)
    if (e.traits.name == name) return e.type;
  return std::nullopt;
}

}  // namespace troupe
