#pragma once
// What runs forward passes: the CPU engine with its KV cache in host memory,
// or the CUDA backend with weights and KV pages in device memory. Callers (the
// generator, the bench, later the verifier and draft actors) see one
// interface: reserve pages from pages(), fill a Batch, call forward().
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/attention_precision.h"
#include "engine/batch.h"
#include "engine/kv_shift.h"
#include "engine/kv_type.h"
#include "engine/model_config.h"

namespace troupe {

class GgufFile;
class PagePool;
struct KvEviction;
struct ModelConfig;

enum class Device { cpu, cuda };
Device device_from_name(const std::string& name);  // "cpu" | "cuda"; throws std::invalid_argument

// How weights are held in device memory (CUDA). `automatic` keeps the file's
// format where the device has it (Q8_0 -> int8, Q4_0/Q4_K -> int4) and uses
// bf16 for everything else; the others convert every matrix at load.
enum class DeviceWeights { automatic, bf16, int8, int4 };
DeviceWeights device_weights_from_name(const std::string& name);  // auto | bf16 | int8 | int4

struct BackendOptions {
  Device device = Device::cpu;
  int threads = 1;              // CPU worker threads (also used for weight conversion)
  int32_t kv_pages = 0;         // 0: CPU sizes from context_tokens, CUDA from free memory
  int64_t context_tokens = 4096;
  int32_t page_size = 16;
  DeviceWeights weights = DeviceWeights::automatic;
  double memory_fraction = 0.9;  // CUDA: share of free device memory after weights given to KV pages
  int64_t max_batch_tokens = 8192;  // CUDA: largest Batch::token_count() one forward accepts
  KvType kv_type = KvType::f16;     // how the KV cache holds keys and values (engine/kv_type.h)
  AttentionPrecision attention_precision = AttentionPrecision::fp32;  // CPU only (engine/attention_precision.h)
  ModelOverrides overrides;         // over the file's metadata (RoPE scaling)
  // Sliding-window models (CPU): how many sequences' windows the local
  // layers' store holds at once, each with steps of up to `window_chunk`
  // tokens (engine/kv_cache.h local_pages_for). 0: every layer keeps every
  // page. The caller must then give back local slots behind the window
  // (KvSequence::drop_local_behind, or the planner's settling).
  int32_t window_sequences = 0;
  int32_t window_chunk = 256;
};

// Per-row choice of the next token on the device (CUDA) or host: greedy when
// temperature == 0, else softmax(logits / temperature) cut to the top_k
// tokens (0 = all) and the smallest top-p nucleus, drawn with a generator
// seeded by (seed, step).
struct TokenChoice {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  uint64_t step = 0;
  // Constrained decoding: bit t of allowed[t / 64] says token t may be
  // chosen (engine/grammar/matcher.h TokenMask); null: every token. A
  // refused token is as if its logit were -infinity.
  const uint64_t* allowed = nullptr;
};

struct PageCopy {
  int32_t src;
  int32_t dst;
};

// A context shift: the K/V of `count` positions move from src_start (read
// through src_table) to dst_start (through dst_table), and the keys turn by
// `delta` positions of RoPE (their new position less their old one).
// Overlapping moves within one table are done in the order that reads each
// slot before it is written.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const GgufFile& file() const = 0;
  virtual PagePool& pages() = 0;
  virtual int32_t page_size() const = 0;
  virtual std::string describe() const = 0;  // device, weight format, KV size, for logs

  // Runs every sequence of the batch one step (see Model::forward); logits of
  // the wanted rows come back to host memory.
  virtual void forward(const Batch& batch, Logits& out) = 0;

  // Copies K/V pages (every layer) before a step writes into a page that a
  // forked sequence shares (copy-on-write). Backends without it throw.
  virtual void copy_pages(std::span<const PageCopy> copies);
  virtual bool can_copy_pages() const { return false; }

  // A page's K and V, every layer, as IEEE half [layer][slot][kv head][dim]
  // (engine/kv_page_codec.h): how pages leave for and return from colder
  // tiers. Backends without it throw.
  virtual bool can_transfer_pages() const { return false; }
  virtual void read_page(int32_t page, std::span<uint16_t> keys, std::span<uint16_t> values) const;
  virtual void write_page(int32_t page, std::span<const uint16_t> keys, std::span<const uint16_t> values);
  // The same in the cache's own format, whatever its KV type (KvCache::read_page):
  // how quantized pages move, untouched. The defaults go through read_page (f16).
  virtual KvType kv_type() const { return KvType::f16; }
  virtual std::string read_page_bytes(int32_t page) const;
  virtual void write_page_bytes(int32_t page, std::string_view bytes);

  // Context shifts (KvShift), before the forward of a step. Backends without it throw.
  virtual bool can_shift_kv() const { return false; }
  virtual void shift_kv(std::span<const KvShift> shifts);

  // KV eviction (engine/kv_eviction.h): a sequence's slots cut to a budget,
  // each KV head keeping the positions its latest queries chose, before the
  // forward of a step. Backends without it throw.
  virtual bool can_evict_kv() const { return false; }
  virtual void evict_kv(const KvEviction& eviction);

  // Tokens each expert of a mixture of experts has run so far, summed over
  // the layers (empty for a dense model): the expert load of `troupe stats`.
  virtual std::vector<uint64_t> expert_tokens() const { return {}; }

  // forward, then one token per wanted row chosen as `choices[row]` says;
  // on CUDA only the ids cross to the host.
  virtual void forward_choose(const Batch& batch, std::span<const TokenChoice> choices, std::vector<int32_t>& tokens);
};

// Throws GgufError for an unreadable model, std::runtime_error when the
// device is missing or the build has no CUDA backend.
std::unique_ptr<Backend> open_backend(const std::string& model_path, const BackendOptions& options);

// Whether this build has the CUDA backend and a usable device; `why` says
// what is missing when not.
bool cuda_available(std::string* why);

// Host implementation of TokenChoice over one logits row (the CPU backend's
// forward_choose and the CUDA tests' reference).
int32_t choose_token(std::span<const float> logits, const TokenChoice& choice);

}  // namespace troupe
