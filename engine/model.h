#pragma once
// A transformer ready to run: the mapped GGUF file, its config and weights,
// the thread pool, and the buffers of one forward pass (allocated for the
// largest batch seen so far, then reused: nothing is allocated per token).
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/batch.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/repack.h"
#include "engine/cpu/thread_pool.h"
#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace troupe {

class KvCache;

class Model {
 public:
  // Throws GgufError for an unreadable or inconsistent file.
  static std::unique_ptr<Model> load(const std::string& path, int n_threads, const ModelOverrides& overrides = {});
  Model(GgufFile file, int n_threads, const ModelOverrides& overrides = {});

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  cpu::ThreadPool& pool() { return pool_; }
  // The rotation of a layer's queries and keys: local (sliding-window)
  // layers have their own base (ModelConfig::rope_local_freq_base).
  const cpu::Rope& rope(int64_t layer) const { return config_.is_local(layer) ? rope_local_ : rope_; }
  // What every key of a layer shares, for a quantized cache to store keys
  // less (KvCache::set_key_offsets): the key bias over the dimension pairs
  // that RoPE turns by at most kKeyOffsetTurn radians over the trained
  // context (engine/kv_key_layers.h), where the bias stays nearly where it
  // was. n_layer x kv_dim.
  std::vector<float> key_offsets() const;

  // Tokens routed to each expert so far, n_layer x n_expert (empty for a
  // dense model): the expert load `troupe stats` shows.
  const std::vector<uint64_t>& expert_tokens() const { return expert_tokens_; }
  std::vector<uint64_t> expert_totals() const;  // the same, summed over the layers: n_expert

  // Runs every sequence of the batch one step: writes the K/V of its new tokens
  // into the cache at their positions and fills `out` with the logits of the
  // wanted positions. The block tables must already cover the new positions.
  void forward(const Batch& batch, KvCache& cache, Logits& out);

  // The arithmetic of attention (engine/attention_precision.h); bf16 needs
  // an even head_dim (std::invalid_argument otherwise).
  void set_attention_precision(AttentionPrecision precision);
  AttentionPrecision attention_precision() const { return attention_precision_; }

 private:
  struct Row {  // one token of the batch
    int32_t token;
    int32_t pos;  // its KV slot, as the sequence numbers them
    int32_t seq;
    int32_t rope_pos;  // its position for RoPE: pos, less any evicted (BatchSequence::rope_offset)
  };
  void prepare(const Batch& batch, const KvCache& cache);
  void check_distinct_slots(const Batch& batch, int32_t page_size);
  void plan_attention(const Batch& batch);
  void fill_rope_angles(int kind);
  struct GluSpan {
    float* gate;
    const float* up;
    int64_t n;
  };
  void glu_split(void (*act)(float*, const float*, int64_t), std::initializer_list<GluSpan> spans);
  void attention_block(const LayerWeights& l, int64_t layer, const Batch& batch, KvCache& cache);
  void run_attention(int64_t layer, const Batch& batch, KvCache& cache);
  void ffn_block(const LayerWeights& l, int64_t layer);
  void moe_ffn(const LayerWeights& l, int64_t layer);  // model_moe.cpp
  void decode_experts(const LayerWeights& l, int64_t layer);
  void batch_experts(const LayerWeights& l, int64_t layer);
  void combine_experts(const LayerWeights& l);
  void head_norms(const LayerWeights& l);
  void post_norm(const std::vector<float>& weight, int64_t n);
  void norm(const float* x, const std::vector<float>& weight, const std::vector<float>& bias, float* out) const;
  void output_logits(const Batch& batch, Logits& out);
  void use_lane_layouts();

  GgufFile file_;
  ModelConfig config_;
  ModelWeights weights_;
  cpu::ThreadPool pool_;
  // Lane-layout copies of the weights the AVX-512 kernels read (repack.h).
  std::vector<std::unique_ptr<uint8_t, cpu::LaneBuffer>> lane_buffers_;
  cpu::MatmulScratch scratch_;
  cpu::Rope rope_, rope_local_;
  // Per step: each row's RoPE cosines and sines, [global, local] (fill_rope_angles).
  std::vector<float> rope_cos_[2], rope_sin_[2];
  bool rope_filled_[2] = {false, false};
  std::vector<float> alibi_slopes_;  // n_head, for an ALiBi model
  AttentionPrecision attention_precision_ = AttentionPrecision::fp32;

  // Buffers of one forward pass, [rows][width].
  std::vector<Row> rows_;
  std::vector<int64_t> slot_scratch_;  // check_distinct_slots
  std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;
  // Attention work of the step: (tile of one sequence's rows, KV head), the
  // costliest first; one scratch per thread.
  struct AttentionUnit {
    int32_t first_row;  // in rows_
    int32_t rows;
    int32_t seq;
    int32_t kv_head;
    int64_t cost;  // rows x context (x heads)
    int32_t heads = 1;  // KV heads from kv_head (cpu::AttentionTile::heads)
  };
  std::vector<AttentionUnit> units_;
  std::vector<cpu::AttentionScratch> attention_scratch_;
  // A step split by chunks (run_attention): work items, and each one's state.
  struct ChunkItem {
    int32_t unit;   // in units_
    int32_t chunk;  // -1: the whole tile
  };
  std::vector<ChunkItem> chunk_items_;
  std::vector<size_t> item_groups_;  // run_attention: where each tile's run of items starts
  std::vector<cpu::AttentionPartial> chunk_partials_;
  // Mixture of experts: router logits, each token's experts and weights, and
  // the rows one expert runs (gathered in, gate, up, down), each token's
  // expert outputs by rank, the shared expert's output.
  std::vector<float> moe_logits_, moe_weights_, moe_in_, moe_gate_, moe_up_, moe_down_, moe_out_, moe_shared_;
  std::vector<int32_t> moe_experts_, moe_rows_, moe_groups_;
  std::vector<cpu::MatmulJob> moe_jobs_;
  std::vector<uint64_t> expert_tokens_;
};

}  // namespace troupe
