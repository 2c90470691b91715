#pragma once
// A KV page as it leaves the device for a colder tier (RocksDB): INT8 with
// one scale per (token, KV head) row, i.e. per block of head_dim values.
//
//   header   "KVq8" | u16 version | u16 n_layer | u16 page_size | u16 n_head_kv | u16 head_dim
//   body     for each layer: K rows, then V rows; a row is one token's one KV
//            head: f16 scale, then head_dim int8 (value ≈ scale * q, |q| <= 127)
//
// At head_dim 64 that is 66 bytes for 128 of FP16: 0.52 of FP16 KV before
// RocksDB's block compression. The round trip error of a value is at most
// half a step, max|row| / 254; decode() restores FP16.
//
// Swapping a preempted sequence out and back must not change its output, so
// swaps use the lossless variant: header "KVh1", then the FP16 values as they
// are (layer: K then V). decode() reads either.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/kv_type.h"

namespace troupe {

class Backend;
struct ModelConfig;

// int8: K and V as above. k8v4: K as above, V in 4 bits with an FP16 scale
// per 32 values (0.40 of FP16 at head dim 64: under half, for a wider error
// on V only; values are averaged by attention, keys pick what is attended).
// fp16: lossless, for swapping.
// raw: the page as a quantized KV cache holds it (engine/kv_type.h), header
// "KVr1" with the KV type after the shape fields: lossless, already small,
// so spilling and swapping such a cache's pages is a copy.
enum class KvPageCodec : uint8_t { int8 = 0, fp16 = 1, k8v4 = 2, raw = 3 };

struct KvPageShape {
  int32_t n_layer = 0, page_size = 0, n_head_kv = 0, head_dim = 0;
  KvType kv_type = KvType::f16;  // of the cache the page comes from (raw pages only)
  int32_t wide_key_layers = 0;   // of them with f16 keys in a quantized cache (ModelConfig)
  static KvPageShape of(const ModelConfig& config, int32_t page_size, KvType kv_type = KvType::f16);
  // FP16 values of K (or V) in one page, all layers: [layer][slot][head][dim].
  int64_t values() const { return static_cast<int64_t>(n_layer) * page_size * n_head_kv * head_dim; }
  int64_t encoded_bytes(KvPageCodec codec = KvPageCodec::int8) const;
  bool supports(KvPageCodec codec) const;  // k8v4 needs head_dim % 32 == 0
};

std::string encode_kv_page(const KvPageShape& shape, std::span<const uint16_t> keys, std::span<const uint16_t> values,
                           KvPageCodec codec = KvPageCodec::int8);
// False (outputs untouched) when `bytes` is not a page of this shape.
bool decode_kv_page(const KvPageShape& shape, std::string_view bytes, std::span<uint16_t> keys, std::span<uint16_t> values);

// The codec a cache of this KV type spills with by default, and swaps with.
KvPageCodec swap_codec(KvType type);

// Through a backend that can transfer pages (Backend::can_transfer_pages).
// raw works for any KV type; int8, k8v4 and fp16 need an f16 cache.
// A page whose local layers' rows were released (a sliding-window model's
// page behind every window) is exported with them as zeros and flagged so.
std::string export_kv_page(Backend& backend, int32_t page, KvPageCodec codec = KvPageCodec::int8);
// False for a page exported without its local layers' rows: it may be
// restored only where no window reaches it (PagePool::allocate(false)).
bool kv_page_has_local_rows(std::string_view bytes);
bool import_kv_page(Backend& backend, int32_t page, std::string_view bytes);

}  // namespace troupe
