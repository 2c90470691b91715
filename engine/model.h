#pragma once
// A transformer ready to run: the mapped GGUF file, its config and weights,
// the thread pool, and the buffers of one forward pass (allocated for the
// largest batch seen so far, then reused: nothing is allocated per token).
#include <memory>
#include <string>
#include <vector>

#include "engine/batch.h"
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
  static std::unique_ptr<Model> load(const std::string& path, int n_threads);
  Model(GgufFile file, int n_threads);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  cpu::ThreadPool& pool() { return pool_; }

  // Runs every sequence of the batch one step: writes the K/V of its new tokens
  // into the cache at their positions and fills `out` with the logits of the
  // wanted positions. The block tables must already cover the new positions.
  void forward(const Batch& batch, KvCache& cache, Logits& out);

 private:
  struct Row {  // one token of the batch
    int32_t token;
    int32_t pos;
    int32_t seq;
  };
  void prepare(const Batch& batch, const KvCache& cache);
  void attention_block(const LayerWeights& l, int64_t layer, const Batch& batch, KvCache& cache);
  void ffn_block(const LayerWeights& l);
  void output_logits(const Batch& batch, Logits& out);
  void use_lane_layouts();

  GgufFile file_;
  ModelConfig config_;
  ModelWeights weights_;
  cpu::ThreadPool pool_;
  // Lane-layout copies of the weights the AVX-512 kernels read (repack.h).
  std::vector<std::unique_ptr<uint8_t, cpu::LaneBuffer>> lane_buffers_;
  cpu::MatmulScratch scratch_;
  cpu::Rope rope_;

  // Buffers of one forward pass, [rows][width].
  std::vector<Row> rows_;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, tmp_, gate_, up_;
  std::vector<float> scores_;  // [threads][cpu::attention_scratch(max context)]
  int64_t max_ctx_ = 0;
};

}  // namespace troupe
