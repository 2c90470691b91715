#include "engine/kv_page_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/half.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"

namespace troupe {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'q', '8'};
constexpr char kMagicRaw[4] = {'K', 'V', 'h', '1'};
constexpr char kMagicK8V4[4] = {'K', 'V', '8', '4'};
constexpr char kMagicQuantized[4] = {'K', 'V', 'r', '1'};
constexpr uint16_t kVersion = 1;
// In the version field: the page's local layers' rows were released (zeros
// here); it cannot serve a sliding-window query near it (engine/kv_cache.h).
constexpr uint16_t kNoLocalRows = 0x100;
constexpr size_t kHeader = 4 + 5 * 2;
constexpr size_t kRawHeader = kHeader + 4;  // + the KV type, its count of f16-key layers

void put16(std::string& s, uint16_t v) { s.append({static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}); }
uint16_t get16(const char* p) { return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8); }

// Groups of `group` values, each an FP16 scale then the codes: `bits` 8
// (one byte each) or 4 (two per byte, low nibble first, stored as q + 8).
void encode_groups(std::span<const uint16_t> in, int32_t group, int bits, std::string& out) {
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  std::vector<float> v(static_cast<size_t>(group));
  for (size_t g = 0; g < in.size() / static_cast<size_t>(group); ++g) {
    float amax = 0;
    for (int32_t i = 0; i < group; ++i) {
      v[i] = cpu::fp16_to_fp32(in[g * group + i]);
      if (std::isfinite(v[i])) amax = std::max(amax, std::fabs(v[i]));
    }
    const uint16_t scale_h = cpu::fp32_to_fp16(amax / qmax);
    const float scale = cpu::fp16_to_fp32(scale_h);  // quantize against the scale that is stored
    put16(out, scale_h);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    auto code = [&](int32_t i) {
      const float q = std::isfinite(v[i]) ? std::nearbyint(v[i] * inv) : 0.0f;
      return static_cast<int>(std::clamp(q, -qmax, qmax));
    };
    if (bits == 8) {
      for (int32_t i = 0; i < group; ++i) out.push_back(static_cast<char>(static_cast<int8_t>(code(i))));
    } else {
      for (int32_t i = 0; i < group; i += 2) out.push_back(static_cast<char>((code(i) + 8) | (code(i + 1) + 8) << 4));
    }
  }
}

const char* decode_groups(const char* p, std::span<uint16_t> out, int32_t group, int bits) {
  for (size_t g = 0; g < out.size() / static_cast<size_t>(group); ++g) {
    const float scale = cpu::fp16_to_fp32(get16(p));
    p += 2;
    uint16_t* o = out.data() + g * group;
    if (bits == 8) {
      for (int32_t i = 0; i < group; ++i) o[i] = cpu::fp32_to_fp16(scale * static_cast<float>(static_cast<int8_t>(p[i])));
      p += group;
    } else {
      for (int32_t i = 0; i < group; i += 2) {
        const auto byte = static_cast<uint8_t>(p[i / 2]);
        o[i] = cpu::fp32_to_fp16(scale * static_cast<float>((byte & 0xf) - 8));
        o[i + 1] = cpu::fp32_to_fp16(scale * static_cast<float>((byte >> 4) - 8));
      }
      p += group / 2;
    }
  }
  return p;
}

constexpr int32_t kV4Group = 32;

}  // namespace

KvPageShape KvPageShape::of(const ModelConfig& c, int32_t page_size, KvType kv_type) {
  return {static_cast<int32_t>(c.n_layer), page_size, static_cast<int32_t>(c.n_head_kv), static_cast<int32_t>(c.head_dim),
          kv_type, kv_type == KvType::f16 ? 0 : static_cast<int32_t>(c.wide_key_layers.size())};
}

KvPageCodec swap_codec(KvType type) { return type == KvType::f16 ? KvPageCodec::fp16 : KvPageCodec::raw; }

int64_t KvPageShape::encoded_bytes(KvPageCodec codec) const {
  const int64_t rows = static_cast<int64_t>(n_layer) * page_size * n_head_kv;  // of K, and as many of V
  const int64_t int8_row = 2 + head_dim;
  switch (codec) {
    case KvPageCodec::raw: {
      const int64_t layer_rows = rows / std::max(1, n_layer);
      return static_cast<int64_t>(kRawHeader) +
             rows * (kv_row_bytes(key_format(kv_type), head_dim) + kv_row_bytes(value_format(kv_type), head_dim)) +
             layer_rows * wide_key_layers * (kv_row_bytes(KvRowFormat::f16, head_dim) - kv_row_bytes(key_format(kv_type), head_dim));
    }
    case KvPageCodec::fp16: return static_cast<int64_t>(kHeader) + rows * 2 * (2 * head_dim);
    case KvPageCodec::k8v4: return static_cast<int64_t>(kHeader) + rows * (int8_row + head_dim / kV4Group * (2 + kV4Group / 2));
    default: return static_cast<int64_t>(kHeader) + rows * 2 * int8_row;
  }
}

bool KvPageShape::supports(KvPageCodec codec) const {
  if (codec == KvPageCodec::raw) return kv_type_fits(kv_type, head_dim);
  return kv_type == KvType::f16 && (codec != KvPageCodec::k8v4 || head_dim % kV4Group == 0);
}

std::string encode_kv_page(const KvPageShape& shape, std::span<const uint16_t> keys, std::span<const uint16_t> values,
                           KvPageCodec codec) {
  if (codec == KvPageCodec::raw) throw std::invalid_argument("raw KV pages come from the cache itself (export_kv_page)");
  if (!shape.supports(codec)) throw std::invalid_argument("KV page codec k8v4 needs a head dim that is a multiple of 32");
  std::string out(codec == KvPageCodec::fp16 ? kMagicRaw : codec == KvPageCodec::k8v4 ? kMagicK8V4 : kMagic, 4);
  out.reserve(static_cast<size_t>(shape.encoded_bytes(codec)));
  for (int32_t v : {static_cast<int32_t>(kVersion), shape.n_layer, shape.page_size, shape.n_head_kv, shape.head_dim})
    put16(out, static_cast<uint16_t>(v));
  const size_t per_layer = static_cast<size_t>(shape.values() / std::max(1, shape.n_layer));
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    const auto k = keys.subspan(l * per_layer, per_layer), v = values.subspan(l * per_layer, per_layer);
    if (codec == KvPageCodec::fp16) {
      out.append(reinterpret_cast<const char*>(k.data()), k.size_bytes());  // little-endian hosts
      out.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
      continue;
    }
    encode_groups(k, shape.head_dim, 8, out);
    if (codec == KvPageCodec::k8v4) encode_groups(v, kV4Group, 4, out);
    else encode_groups(v, shape.head_dim, 8, out);
  }
  return out;
}

bool decode_kv_page(const KvPageShape& shape, std::string_view bytes, std::span<uint16_t> keys, std::span<uint16_t> values) {
  if (bytes.size() < 4) return false;
  KvPageCodec codec;
  if (std::memcmp(bytes.data(), kMagic, 4) == 0) codec = KvPageCodec::int8;
  else if (std::memcmp(bytes.data(), kMagicRaw, 4) == 0) codec = KvPageCodec::fp16;
  else if (std::memcmp(bytes.data(), kMagicK8V4, 4) == 0) codec = KvPageCodec::k8v4;
  else return false;
  if (!shape.supports(codec) || static_cast<int64_t>(bytes.size()) != shape.encoded_bytes(codec)) return false;
  const char* p = bytes.data() + 4;
  const int32_t fields[] = {kVersion, shape.n_layer, shape.page_size, shape.n_head_kv, shape.head_dim};
  for (int32_t f : fields) {
    if ((f == kVersion ? get16(p) & ~kNoLocalRows : get16(p)) != f) return false;
    p += 2;
  }
  if (static_cast<int64_t>(keys.size()) != shape.values() || static_cast<int64_t>(values.size()) != shape.values()) return false;
  const size_t per_layer = static_cast<size_t>(shape.values() / std::max(1, shape.n_layer));
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    const auto k = keys.subspan(l * per_layer, per_layer), v = values.subspan(l * per_layer, per_layer);
    if (codec == KvPageCodec::fp16) {
      std::memcpy(k.data(), p, k.size_bytes());
      std::memcpy(v.data(), p + k.size_bytes(), v.size_bytes());
      p += k.size_bytes() + v.size_bytes();
      continue;
    }
    p = decode_groups(p, k, shape.head_dim, 8);
    p = codec == KvPageCodec::k8v4 ? decode_groups(p, v, kV4Group, 4) : decode_groups(p, v, shape.head_dim, 8);
  }
  return true;
}

namespace {

std::string raw_header(const KvPageShape& shape) {
  std::string out(kMagicQuantized, 4);
  for (int32_t v : {static_cast<int32_t>(kVersion), shape.n_layer, shape.page_size, shape.n_head_kv, shape.head_dim,
                    static_cast<int32_t>(shape.kv_type), shape.wide_key_layers})
    put16(out, static_cast<uint16_t>(v));
  return out;
}

}  // namespace

bool kv_page_has_local_rows(std::string_view bytes) {
  if (bytes.size() < kHeader) return true;
  bool page = false;  // only a page of a known codec carries the flag
  for (const char* magic : {kMagic, kMagicRaw, kMagicK8V4, kMagicQuantized}) page |= std::memcmp(bytes.data(), magic, 4) == 0;
  return !page || (get16(bytes.data() + 4) & kNoLocalRows) == 0;
}

std::string export_kv_page(Backend& backend, int32_t page, KvPageCodec codec) {
  const KvPageShape shape = KvPageShape::of(backend.config(), backend.page_size(), backend.kv_type());
  std::string out;
  if (codec == KvPageCodec::raw) {
    out = raw_header(shape) + backend.read_page_bytes(page);
  } else {
    if (backend.kv_type() != KvType::f16)
      throw std::invalid_argument(std::string("a ") + kv_type_name(backend.kv_type()) + " KV cache moves its pages raw");
    std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
    backend.read_page(page, k, v);
    out = encode_kv_page(shape, k, v, codec);
  }
  const PagePool& pool = backend.pages();
  if (pool.local_capacity() > 0 && !pool.has_local(page)) {
    const uint16_t version = kVersion | kNoLocalRows;
    out[4] = static_cast<char>(version & 0xff);
    out[5] = static_cast<char>(version >> 8);
  }
  return out;
}

bool import_kv_page(Backend& backend, int32_t page, std::string_view bytes) {
  const KvPageShape shape = KvPageShape::of(backend.config(), backend.page_size(), backend.kv_type());
  // A page without its local rows may only land where they are never kept:
  // written anywhere else, a window would read zeros as keys and values.
  const PagePool& pool = backend.pages();
  const bool keeps_local = !backend.config().local_layers.empty() &&
                           (pool.local_capacity() == 0 || pool.has_local(page));
  if (!kv_page_has_local_rows(bytes) && keeps_local) return false;
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kMagicQuantized, 4) == 0) {
    const std::string header = raw_header(shape);  // compared but for the version's flags
    if (static_cast<int64_t>(bytes.size()) != shape.encoded_bytes(KvPageCodec::raw) ||
        bytes.substr(0, 4) != header.substr(0, 4) || (get16(bytes.data() + 4) & ~kNoLocalRows) != kVersion ||
        bytes.substr(6, header.size() - 6) != header.substr(6))
      return false;  // another shape or KV type
    backend.write_page_bytes(page, bytes.substr(header.size()));
    return true;
  }
  if (backend.kv_type() != KvType::f16) return false;
  std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
  if (!decode_kv_page(shape, bytes, k, v)) return false;
  backend.write_page(page, k, v);
  return true;
}

}  // namespace troupe
