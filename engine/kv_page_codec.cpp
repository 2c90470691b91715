#include "engine/kv_page_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/half.h"
#include "engine/model_config.h"

namespace troupe {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'q', '8'};
constexpr char kMagicRaw[4] = {'K', 'V', 'h', '1'};
constexpr uint16_t kVersion = 1;
constexpr size_t kHeader = 4 + 5 * 2;

void put16(std::string& s, uint16_t v) { s.append({static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}); }
uint16_t get16(const char* p) { return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8); }

void encode_rows(std::span<const uint16_t> in, int32_t head_dim, std::string& out) {
  std::vector<float> row(static_cast<size_t>(head_dim));
  for (size_t r = 0; r < in.size() / static_cast<size_t>(head_dim); ++r) {
    float amax = 0;
    for (int32_t i = 0; i < head_dim; ++i) {
      row[i] = cpu::fp16_to_fp32(in[r * head_dim + i]);
      if (std::isfinite(row[i])) amax = std::max(amax, std::fabs(row[i]));
    }
    const uint16_t scale_h = cpu::fp32_to_fp16(amax / 127.0f);
    const float scale = cpu::fp16_to_fp32(scale_h);  // quantize against the scale that is stored
    put16(out, scale_h);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int32_t i = 0; i < head_dim; ++i) {
      const float q = std::isfinite(row[i]) ? std::nearbyint(row[i] * inv) : 0.0f;
      out.push_back(static_cast<char>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f))));
    }
  }
}

const char* decode_rows(const char* p, std::span<uint16_t> out, int32_t head_dim) {
  for (size_t r = 0; r < out.size() / static_cast<size_t>(head_dim); ++r) {
    const float scale = cpu::fp16_to_fp32(get16(p));
    p += 2;
    for (int32_t i = 0; i < head_dim; ++i)
      out[r * head_dim + i] = cpu::fp32_to_fp16(scale * static_cast<float>(static_cast<int8_t>(p[i])));
    p += head_dim;
  }
  return p;
}

}  // namespace

KvPageShape KvPageShape::of(const ModelConfig& c, int32_t page_size) {
  return {static_cast<int32_t>(c.n_layer), page_size, static_cast<int32_t>(c.n_head_kv), static_cast<int32_t>(c.head_dim)};
}

int64_t KvPageShape::encoded_bytes(KvPageCodec codec) const {
  const int64_t rows = static_cast<int64_t>(n_layer) * page_size * n_head_kv * 2;
  return static_cast<int64_t>(kHeader) + rows * (codec == KvPageCodec::int8 ? 2 + head_dim : 2 * head_dim);
}

std::string encode_kv_page(const KvPageShape& shape, std::span<const uint16_t> keys, std::span<const uint16_t> values,
                           KvPageCodec codec) {
  const bool raw = codec == KvPageCodec::fp16;
  std::string out(raw ? kMagicRaw : kMagic, 4);
  out.reserve(static_cast<size_t>(shape.encoded_bytes()));
  for (int32_t v : {static_cast<int32_t>(kVersion), shape.n_layer, shape.page_size, shape.n_head_kv, shape.head_dim})
    put16(out, static_cast<uint16_t>(v));
  const size_t per_layer = static_cast<size_t>(shape.values() / std::max(1, shape.n_layer));
  for (int32_t l = 0; l < shape.n_layer; ++l)
    for (const auto& kv : {keys.subspan(l * per_layer, per_layer), values.subspan(l * per_layer, per_layer)}) {
      if (raw) out.append(reinterpret_cast<const char*>(kv.data()), kv.size_bytes());  // little-endian hosts
      else encode_rows(kv, shape.head_dim, out);
    }
  return out;
}

bool decode_kv_page(const KvPageShape& shape, std::string_view bytes, std::span<uint16_t> keys, std::span<uint16_t> values) {
  if (bytes.size() < 4) return false;
  const bool raw = std::memcmp(bytes.data(), kMagicRaw, 4) == 0;
  if (!raw && std::memcmp(bytes.data(), kMagic, 4) != 0) return false;
  if (static_cast<int64_t>(bytes.size()) != shape.encoded_bytes(raw ? KvPageCodec::fp16 : KvPageCodec::int8)) return false;
  const char* p = bytes.data() + 4;
  const int32_t fields[] = {kVersion, shape.n_layer, shape.page_size, shape.n_head_kv, shape.head_dim};
  for (int32_t f : fields) {
    if (get16(p) != f) return false;
    p += 2;
  }
  if (static_cast<int64_t>(keys.size()) != shape.values() || static_cast<int64_t>(values.size()) != shape.values()) return false;
  const size_t per_layer = static_cast<size_t>(shape.values() / std::max(1, shape.n_layer));
  for (int32_t l = 0; l < shape.n_layer; ++l)
    for (const auto& kv : {keys.subspan(l * per_layer, per_layer), values.subspan(l * per_layer, per_layer)}) {
      if (raw) {
        std::memcpy(kv.data(), p, kv.size_bytes());
        p += kv.size_bytes();
      } else {
        p = decode_rows(p, kv, shape.head_dim);
      }
    }
  return true;
}

std::string export_kv_page(const Backend& backend, int32_t page, KvPageCodec codec) {
  const KvPageShape shape = KvPageShape::of(backend.config(), backend.page_size());
  std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
  backend.read_page(page, k, v);
  return encode_kv_page(shape, k, v, codec);
}

bool import_kv_page(Backend& backend, int32_t page, std::string_view bytes) {
  const KvPageShape shape = KvPageShape::of(backend.config(), backend.page_size());
  std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
  if (!decode_kv_page(shape, bytes, k, v)) return false;
  backend.write_page(page, k, v);
  return true;
}

}  // namespace troupe
