#include "engine/cpu_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cpu/isa.h"
#include "engine/kv_eviction.h"

namespace troupe {

CpuBackend::CpuBackend(std::unique_ptr<Model> model, int32_t kv_pages, int32_t page_size, KvType kv_type,
                       int32_t local_pages)
    : model_(std::move(model)), cache_(model_->config(), kv_pages, page_size, kv_type, local_pages) {
  if (kv_type != KvType::f16) cache_.set_key_offsets(model_->key_offsets());
}

std::string CpuBackend::describe() const {
  std::string wide;
  for (int64_t l = 0; l < model_->config().n_layer; ++l)
    if (cache_.type() != KvType::f16 && cache_.key_format(l) == KvRowFormat::f16)
      wide += (wide.empty() ? " (f16 keys in layer " : ", ") + std::to_string(l);
  if (!wide.empty()) wide += ")";
  const double per_token = static_cast<double>(cache_.page_bytes()) / cache_.page_size();
  char bytes[48];
  std::snprintf(bytes, sizeof bytes, ", %.0f bytes a token", per_token);
  std::string local;
  if (cache_.pool().local_capacity() > 0) {  // what the local store saves, against every layer in every page
    char mib[96];
    std::snprintf(mib, sizeof mib, "; %.1f MiB of KV, %.1f with every layer in every page",
                  static_cast<double>(cache_.bytes()) / (1 << 20),
                  static_cast<double>(cache_.page_bytes()) * cache_.pool().capacity() / (1 << 20));
    local = " (local layers: " + std::to_string(cache_.pool().local_capacity()) + " pages" + mib + ")";
  }
  // bf16 is fast only with AVX512_BF16; elsewhere say so, where the user looks.
  std::string attention;
  if (model_->attention_precision() == AttentionPrecision::bf16)
    attention = cpu::detect_avx512_bf16() && cpu::active_isa() == cpu::Isa::avx512
                    ? ", attention bf16"
                    : ", attention bf16 (portable kernel: no AVX512_BF16 in use, no faster than fp32)";
  return "cpu, " + std::to_string(model_->pool().size()) + " threads, KV " + kv_type_name(cache_.type()) + wide + " " +
         std::to_string(cache_.pool().capacity()) + " pages x " + std::to_string(cache_.page_size()) + " tokens" + local +
         bytes + attention;
}

namespace {

void check_page(const KvCache& cache, int32_t page, size_t keys, size_t values, int64_t n_layer) {
  const size_t n = static_cast<size_t>(n_layer * cache.page_size() * cache.slot_values());
  if (page < 0 || page >= cache.pool().capacity() || keys != n || values != n)
    throw std::out_of_range("KV page " + std::to_string(page) + " transfer out of range");
}

}  // namespace

void CpuBackend::read_page(int32_t page, std::span<uint16_t> keys, std::span<uint16_t> values) const {
  if (cache_.type() != KvType::f16) throw std::logic_error("read_page: a quantized KV cache moves its pages as bytes");
  const int64_t n_layer = model_->config().n_layer;
  check_page(cache_, page, keys.size(), values.size(), n_layer);
  const auto d = static_cast<size_t>(cache_.head_dim());
  uint16_t *k = keys.data(), *v = values.data();
  for (int64_t l = 0; l < n_layer; ++l)
    for (int32_t slot = 0; slot < cache_.page_size(); ++slot)
      for (int64_t h = 0; h < cache_.n_head_kv(); ++h, k += d, v += d) {
        std::memcpy(k, cache_.key_row(l, page, slot, h), d * sizeof(uint16_t));
        std::memcpy(v, cache_.value_row(l, page, slot, h), d * sizeof(uint16_t));
      }
}

void CpuBackend::write_page(int32_t page, std::span<const uint16_t> keys, std::span<const uint16_t> values) {
  if (cache_.type() != KvType::f16) throw std::logic_error("write_page: a quantized KV cache moves its pages as bytes");
  const int64_t n_layer = model_->config().n_layer;
  check_page(cache_, page, keys.size(), values.size(), n_layer);
  const auto d = static_cast<size_t>(cache_.head_dim());
  const size_t layer_values = static_cast<size_t>(cache_.page_size() * cache_.slot_values());
  for (int64_t l = 0; l < n_layer; ++l) {
    if (!cache_.holds(l, page)) continue;  // local rows behind every window: never read again
    const uint16_t *k = keys.data() + l * layer_values, *v = values.data() + l * layer_values;
    for (int32_t slot = 0; slot < cache_.page_size(); ++slot)
      for (int64_t h = 0; h < cache_.n_head_kv(); ++h, k += d, v += d) {
        std::memcpy(cache_.key_row(l, page, slot, h), k, d * sizeof(uint16_t));
        std::memcpy(cache_.value_row(l, page, slot, h), v, d * sizeof(uint16_t));
      }
  }
}

std::string CpuBackend::read_page_bytes(int32_t page) const {
  std::string out(static_cast<size_t>(cache_.page_bytes()), '\0');
  cache_.read_page(page, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

void CpuBackend::write_page_bytes(int32_t page, std::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) != cache_.page_bytes())
    throw std::invalid_argument("KV page of " + std::to_string(bytes.size()) + " bytes; this cache's pages have " +
                                std::to_string(cache_.page_bytes()));
  cache_.write_page(page, reinterpret_cast<const uint8_t*>(bytes.data()));
}

namespace {

// Refused before any slot of the shift moves.
void check_shift(const KvCache& cache, const KvShift& s) {
  const int32_t ps = cache.page_size();
  const auto covers = [&](std::span<const int32_t> table, int32_t start) {
    return start >= 0 && static_cast<int64_t>(start) + s.count <= static_cast<int64_t>(table.size()) * ps;
  };
  if (!covers(s.src_table, s.src_start) || !covers(s.dst_table, s.dst_start))
    throw std::out_of_range("KV shift outside its block tables");
  for (int32_t p : s.src_table)
    if (p < 0 || p >= cache.pool().capacity()) throw std::out_of_range("KV shift page " + std::to_string(p) + " out of range");
  for (int32_t p : s.dst_table)
    if (p < 0 || p >= cache.pool().capacity()) throw std::out_of_range("KV shift page " + std::to_string(p) + " out of range");
}

// A slot's keys of one layer, every KV head, decoded into `k` as the keys
// themselves: a rotated row turned back to RoPE's basis, its offset added back.
void read_keys(const KvCache& cache, const ModelConfig& c, int64_t l, int32_t page, int32_t slot, float* k) {
  const KvRowFormat kf = cache.key_format(l);
  const float* m = cache.key_offset(l);
  for (int64_t h = 0; h < c.n_head_kv; ++h) {
    float* row = k + h * c.head_dim;
    decode_kv_row(kf, cache.key_row(l, page, slot, h), c.head_dim, row);
    if (kv_rotated(kf)) {
      kv_rotate(row, c.head_dim);
      for (int64_t i = 0; i < c.head_dim; ++i) row[i] += m[h * c.head_dim + i];
    }
  }
}

// The keys in `k` stored into a slot, as KvCache::store writes them.
void write_keys(KvCache& cache, const ModelConfig& c, int64_t l, int32_t page, int32_t slot, float* k) {
  const KvRowFormat kf = cache.key_format(l);
  if (kf == KvRowFormat::f16) {
    for (int64_t h = 0; h < c.n_head_kv; ++h) encode_kv_row(kf, k + h * c.head_dim, c.head_dim, cache.key_row(l, page, slot, h));
    return;
  }
  const float* m = cache.key_offset(l);
  for (int64_t h = 0; h < c.n_head_kv; ++h) {
    float* row = k + h * c.head_dim;
    for (int64_t i = 0; i < c.head_dim; ++i) row[i] -= m[h * c.head_dim + i];
    kv_rotate(row, c.head_dim);
    encode_kv_row(kf, row, c.head_dim, cache.key_row(l, page, slot, h));
  }
}

}  // namespace

// Each moved key is decoded, turned by the shift's distance and encoded
// again (exact for f16 but for the rounding back to half; a requantization
// for q8_0 keys); values move as they are.
void CpuBackend::shift_kv(std::span<const KvShift> shifts) {
  const int32_t ps = cache_.page_size();
  std::vector<float> k(static_cast<size_t>(model_->config().kv_dim()));
  for (const KvShift& s : shifts) {
    if (s.count <= 0) continue;
    check_shift(cache_, s);
    const bool backwards = s.src_table.data() == s.dst_table.data() && s.dst_start > s.src_start;  // read before written
    for (int32_t n = 0; n < s.count; ++n) {
      const int32_t i = backwards ? s.count - 1 - n : n;
      const int32_t sp = s.src_start + i, dp = s.dst_start + i;
      move_slot(s.src_table[sp / ps], sp % ps, s.dst_table[dp / ps], dp % ps, s.delta, k.data());
    }
  }
}

// One slot's keys and values, every layer the destination page holds.
void CpuBackend::move_slot(int32_t src_page, int32_t src_slot, int32_t dst_page, int32_t dst_slot, int32_t delta,
                           float* k) {
  const ModelConfig& c = model_->config();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    if (!cache_.holds(l, dst_page)) continue;  // behind the new window: never read
    read_keys(cache_, c, l, src_page, src_slot, k);
    if (!c.alibi()) model_->rope(l).shift(k, c.n_head_kv, delta);  // ALiBi: a move is the whole shift
    write_keys(cache_, c, l, dst_page, dst_slot, k);
    for (int64_t h = 0; h < c.n_head_kv; ++h)
      std::memmove(cache_.value_row(l, dst_page, dst_slot, h), cache_.value_row(l, src_page, src_slot, h),
                   static_cast<size_t>(cache_.value_row_bytes()));
  }
}

void CpuBackend::evict_kv(const KvEviction& eviction) { troupe::evict_kv(cache_, model_->config(), model_->pool(), eviction); }

}  // namespace troupe
