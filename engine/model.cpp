#include "engine/model.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/alibi.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/isa.h"
#include "engine/kv_key_layers.h"
#include "engine/cpu/kv_kernels.h"
#include "engine/cpu/quants.h"
#include "engine/kv_cache.h"
#include "engine/kv_eviction.h"

namespace troupe {
namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

void add_bias(float* rows, const std::vector<float>& bias, int64_t n_rows) {
  if (bias.empty()) return;
  const int64_t w = static_cast<int64_t>(bias.size());
  for (int64_t r = 0; r < n_rows; ++r) cpu::add(rows + r * w, bias.data(), w);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, int n_threads, const ModelOverrides& overrides) {
  return std::make_unique<Model>(GgufFile::open(path), n_threads, overrides);
}

Model::Model(GgufFile file, int n_threads, const ModelOverrides& overrides)
    : file_(std::move(file)),
      config_(read_model_config(file_, overrides)),
      weights_(bind_weights(file_, config_)),
      pool_(n_threads),
      rope_(config_.head_dim, rope_frequencies(config_.head_dim, config_.rope_freq_base, config_.rope_scaling),
            rope_magnitude(config_.rope_scaling), config_.rope_order),
      rope_local_(config_.head_dim, rope_frequencies(config_.head_dim, config_.rope_local_freq_base, RopeScaling{}), 1.0f,
                  config_.rope_order),
      alibi_slopes_(config_.alibi() ? alibi_slopes(config_.n_head, config_.max_alibi_bias) : std::vector<float>{}) {
  use_lane_layouts();
  expert_tokens_.assign(static_cast<size_t>(config_.n_layer * config_.n_expert), 0);
}

// On AVX-512 and AVX2 the quantized matrices (Q4_K, Q6_K, Q8_0, Q5_0, Q4_0)
// are read in the lane layout: on AVX-512 up to twice as fast for a few
// tokens, on AVX2 prefill 1.4-2x the GGUF-layout kernels' (repack.h,
// matmul_lanes_avx2.cpp). The copy replaces the mapped pages in
// memory: they are released, and come back from the file only if a lower
// instruction set is forced later. The embedding table stays as it is (one
// row read per token); tied to the output, the output gets its own copy.
// TROUPE_LANE_LAYOUT=off keeps the GGUF layout (same results: A/B benchmarks).
void Model::use_lane_layouts() {
  if (cpu::active_isa() < cpu::Isa::avx2) return;
  if (const char* e = std::getenv("TROUPE_LANE_LAYOUT"); e && std::string_view(e) == "off") return;
  const auto repack = [this](cpu::WeightMatrix& w) {
    if (w.data == nullptr) return;  // a matrix the architecture lacks (bloom's gate)
    auto buffer = cpu::repack_lanes(w, pool_);
    if (!buffer) return;
    w.lanes = buffer.get();
    lane_buffers_.push_back(std::move(buffer));
    file_.release(w.data, static_cast<size_t>(row_bytes(w.type, w.cols) * w.rows));
  };
  for (LayerWeights& l : weights_.layers) {
    for (cpu::WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.sh_gate, &l.sh_up, &l.sh_down})
      repack(*w);
    for (auto* experts : {&l.exp_gate, &l.exp_up, &l.exp_down})
      for (cpu::WeightMatrix& w : *experts) repack(w);
  }
  repack(weights_.output);
}

std::vector<float> Model::key_offsets() const {
  const auto& c = config_;
  std::vector<float> m(static_cast<size_t>(c.n_layer * c.kv_dim()), 0.0f);
  const std::vector<float> omega = rope_frequencies(c.head_dim, c.rope_freq_base, c.rope_scaling);
  const int64_t half = c.head_dim / 2;
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    const std::vector<float>& bias = weights_.layers[layer].bk;
    if (bias.empty()) continue;
    for (int64_t h = 0; h < c.n_head_kv; ++h)
      for (int64_t i = 0; i < half; ++i) {
        // Under ALiBi nothing turns: the whole bias is shared by every key.
        if (!c.alibi() && static_cast<double>(omega[i]) * static_cast<double>(c.n_ctx_train) > kKeyOffsetTurn) continue;
        for (int64_t d : {c.rope_order == RopeOrder::halves ? i : 2 * i, c.rope_order == RopeOrder::halves ? i + half : 2 * i + 1})
          m[static_cast<size_t>(layer * c.kv_dim() + h * c.head_dim + d)] = bias[static_cast<size_t>(h * c.head_dim + d)];
      }
  }
  return m;
}

// Each row writes its K and V into its own slot, the rows split across
// threads (attention_block): two rows of a step on one slot would race, and
// one of their KV would be lost whichever won. A scheduler never builds such
// a step (sequences share only full pages, which nobody writes); one that
// did gets this error rather than a race.
void Model::check_distinct_slots(const Batch& batch, int32_t page_size) {
  slot_scratch_.clear();
  for (const Row& r : rows_) {
    const int32_t page = batch.sequences[r.seq].block_table[r.pos / page_size];
    slot_scratch_.push_back(static_cast<int64_t>(page) * page_size + r.pos % page_size);
  }
  std::sort(slot_scratch_.begin(), slot_scratch_.end());
  const auto twice = std::adjacent_find(slot_scratch_.begin(), slot_scratch_.end());
  if (twice != slot_scratch_.end())
    throw std::invalid_argument("two rows of the step write KV page " + std::to_string(*twice / page_size) +
                                ", slot " + std::to_string(*twice % page_size));
}

void Model::prepare(const Batch& batch, const KvCache& cache) {
  rows_.clear();
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const BatchSequence& seq = batch.sequences[s];
    const int64_t end = seq.start_pos + static_cast<int64_t>(seq.tokens.size());
    if (seq.start_pos < 0 || seq.rope_offset < 0) throw std::invalid_argument("negative start position");
    if (seq.queries && seq.queries->q_dim() != config_.q_dim())
      throw std::invalid_argument("query window of another model's shape");
    if (end > static_cast<int64_t>(seq.block_table.size()) * cache.page_size())
      throw std::invalid_argument("block table of sequence " + std::to_string(s) + " does not cover position " +
                                  std::to_string(end - 1));
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      const int32_t tok = seq.tokens[i];
      if (tok < 0 || tok >= config_.n_vocab) throw std::out_of_range("token id " + std::to_string(tok) + " out of range");
      const auto pos = static_cast<int32_t>(seq.start_pos + i);
      rows_.push_back({tok, pos, static_cast<int32_t>(s), pos + seq.rope_offset});
    }
  }
  check_distinct_slots(batch, cache.page_size());
  const size_t n = rows_.size();
  const auto& c = config_;
  grow(x_, n * c.n_embd);
  grow(xn_, n * c.n_embd);
  grow(tmp_, n * c.n_embd);
  grow(q_, n * c.q_dim());
  grow(attn_, n * c.q_dim());
  grow(k_, n * c.kv_dim());
  grow(v_, n * c.kv_dim());
  grow(gate_, n * std::max(c.n_ff, c.n_ff_shared));
  grow(up_, n * std::max(c.n_ff, c.n_ff_shared));
  rope_filled_[0] = rope_filled_[1] = false;
  plan_attention(batch);
}

// The step's cosines and sines, row by row, for one of the two RoPEs (global,
// local): computed in the first layer that uses them, shared by the rest
// (a row's position is the same in every layer).
void Model::fill_rope_angles(int kind) {
  if (rope_filled_[kind]) return;
  const cpu::Rope& rope = kind == 1 ? rope_local_ : rope_;
  const int64_t half = rope.half_dim(), n = static_cast<int64_t>(rows_.size());
  grow(rope_cos_[kind], static_cast<size_t>(n * half));
  grow(rope_sin_[kind], static_cast<size_t>(n * half));
  for (int64_t r = 0; r < n; ++r) rope.angles(rows_[r].rope_pos, &rope_cos_[kind][r * half], &rope_sin_[kind][r * half]);
  rope_filled_[kind] = true;
}

// Tiles of up to kTileRows consecutive rows of one sequence, per KV head.
// The split does not change any row's result (cpu/attention.h); the order,
// costliest first, only balances the threads.
//
// With one query head per KV head a lone row (a decode step) takes its KV
// heads together, up to kTileHeads a tile: the kernel then reads each page's
// runs of all of them in address order. Only when the step has such rows
// enough to keep every thread busy (four each); otherwise each head is a tile.
void Model::plan_attention(const Batch& batch) {
  units_.clear();
  const auto& c = config_;
  size_t lone_rows = 0;
  for (const BatchSequence& seq : batch.sequences) lone_rows += seq.tokens.size() == 1;
  const bool together = cpu::lane_order_scores({c.n_head, c.n_head_kv, c.head_dim}) &&
                        lone_rows >= 4 * static_cast<size_t>(pool_.size());
  int32_t row = 0;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const BatchSequence& seq = batch.sequences[s];
    const auto len = static_cast<int32_t>(seq.tokens.size());
    for (int32_t t = 0; t < len; t += cpu::kTileRows) {
      const int32_t rows = std::min(cpu::kTileRows, len - t);
      const int64_t cost = static_cast<int64_t>(rows) * (seq.start_pos + t + rows);
      const auto step = static_cast<int32_t>(together && len == 1 ? cpu::kTileHeads : 1);
      for (int32_t h = 0; h < c.n_head_kv; h += step) {
        const int32_t heads = std::min<int32_t>(step, static_cast<int32_t>(c.n_head_kv) - h);
        units_.push_back({row + t, rows, static_cast<int32_t>(s), h, cost * heads, heads});
      }
    }
    row += len;
  }
  std::stable_sort(units_.begin(), units_.end(), [](const AttentionUnit& a, const AttentionUnit& b) { return a.cost > b.cost; });
  if (static_cast<int>(attention_scratch_.size()) < pool_.size()) attention_scratch_.resize(static_cast<size_t>(pool_.size()));
}

void Model::forward(const Batch& batch, KvCache& cache, Logits& out) {
  prepare(batch, cache);
  const int64_t n = static_cast<int64_t>(rows_.size());
  if (n == 0) {  // nothing to run (a worker's hello, an empty step)
    out.n_vocab = config_.n_vocab;
    out.values.clear();
    return;
  }
  const int64_t e = config_.n_embd;
  for (int64_t r = 0; r < n; ++r) {
    const auto& emb = weights_.token_embd;
    const auto* row = static_cast<const uint8_t*>(emb.data) + rows_[r].token * row_bytes(emb.type, e);
    cpu::dequantize_row(emb.type, row, x_.data() + r * e, e);
    if (config_.embedding_scale != 1.0f)
      for (int64_t i = 0; i < e; ++i) x_[r * e + i] *= config_.embedding_scale;
    if (!weights_.embd_norm.empty())
      cpu::layernorm(&x_[r * e], weights_.embd_norm.data(), weights_.embd_norm_b.data(), e, config_.rms_eps, &x_[r * e]);
  }
  for (int64_t layer = 0; layer < config_.n_layer; ++layer) {
    const LayerWeights& l = weights_.layers[layer];
    attention_block(l, layer, batch, cache);
    ffn_block(l, layer);
  }
  output_logits(batch, out);
}

void Model::attention_block(const LayerWeights& l, int64_t layer, const Batch& batch, KvCache& cache) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size());
  for (int64_t r = 0; r < n; ++r) norm(&x_[r * c.n_embd], l.attn_norm, l.attn_norm_b, &xn_[r * c.n_embd]);
  const cpu::WeightMatrix qkv[] = {l.wq, l.wk, l.wv};
  float* const outs[] = {q_.data(), k_.data(), v_.data()};
  cpu::matmul_many(qkv, xn_.data(), static_cast<int>(n), outs, pool_, scratch_);
  add_bias(q_.data(), l.bq, n);
  add_bias(k_.data(), l.bk, n);
  add_bias(v_.data(), l.bv, n);
  if (c.clamp_kqv > 0.0f) {  // mpt: as llama.cpp, after the bias
    for (auto [buf, w] : {std::pair{q_.data(), c.q_dim()}, {k_.data(), c.kv_dim()}, {v_.data(), c.kv_dim()}})
      for (int64_t i = 0; i < n * w; ++i) buf[i] = std::clamp(buf[i], -c.clamp_kqv, c.clamp_kqv);
  }
  head_norms(l);

  const int32_t ps = cache.page_size();
  // Nothing may write a page whose local slot was given back (a local
  // layer's page outside every window): checked here, before the rows are
  // split across threads, which must not throw.
  for (int64_t r = 0; r < n; ++r) {
    const int32_t page = batch.sequences[rows_[r].seq].block_table[rows_[r].pos / ps];
    if (!cache.holds(layer, page))
      throw std::logic_error("KV page " + std::to_string(page) + " has no local slot for layer " + std::to_string(layer));
  }
  const int rope_kind = c.is_local(layer) ? 1 : 0;
  if (!c.alibi()) fill_rope_angles(rope_kind);
  const auto place_row = [&](int64_t r) {
    const Row& row = rows_[r];
    if (!c.alibi()) {  // ALiBi models have no position embedding: the kernel biases scores instead
      const cpu::Rope& rope = this->rope(layer);
      const float* cos_t = &rope_cos_[rope_kind][r * rope.half_dim()];
      const float* sin_t = &rope_sin_[rope_kind][r * rope.half_dim()];
      rope.rotate(&q_[r * c.q_dim()], c.n_head, cos_t, sin_t);
      rope.rotate(&k_[r * c.kv_dim()], c.n_head_kv, cos_t, sin_t);
    }
    if (c.query_scale != 1.0f)
      for (int64_t i = 0; i < c.q_dim(); ++i) q_[r * c.q_dim() + i] *= c.query_scale;
    const BatchSequence& seq = batch.sequences[row.seq];
    // The step's last rows of a sequence that keeps a query window: each
    // row its own ring slot, as no two of them are a window apart.
    if (seq.queries && row.pos >= seq.start_pos + static_cast<int32_t>(seq.tokens.size()) - seq.queries->window())
      seq.queries->store(layer, row.rope_pos, &q_[r * c.q_dim()]);
    const int32_t page = seq.block_table[row.pos / ps], slot = row.pos % ps;
    if (cache.type() == KvType::f16) {
      const auto half_row = [](uint8_t* row) { return reinterpret_cast<uint16_t*>(row); };
      for (int64_t h = 0; h < c.n_head_kv; ++h) {  // a page keeps each head's rows together (engine/kv_cache.h)
        const int64_t at = r * c.kv_dim() + h * c.head_dim;
        cpu::to_f16(&k_[at], half_row(cache.key_row(layer, page, slot, h)), c.head_dim);
        cpu::to_f16(&v_[at], half_row(cache.value_row(layer, page, slot, h)), c.head_dim);
      }
    } else {
      cache.store(layer, page, slot, &k_[r * c.kv_dim()], &v_[r * c.kv_dim()]);
    }
  };
  // Each row writes only its own query, key and KV slot.
  if (n >= 4 && pool_.size() > 1) {
    pool_.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) place_row(r);
    });
  } else {
    for (int64_t r = 0; r < n; ++r) place_row(r);
  }

  run_attention(layer, batch, cache);
  cpu::matmul(l.wo, attn_.data(), static_cast<int>(n), tmp_.data(), pool_, scratch_);
  add_bias(tmp_.data(), l.bo, n);
  post_norm(l.post_attn_norm, n);
  cpu::add(x_.data(), tmp_.data(), n * c.n_embd);
}

void Model::set_attention_precision(AttentionPrecision precision) {
  if (precision == AttentionPrecision::bf16 && config_.head_dim % 2 != 0)
    throw std::invalid_argument("bf16 attention sums dimension pairs; this model's head_dim is " +
                                std::to_string(config_.head_dim));
  attention_precision_ = precision;
}

// Units go to whichever thread is free: a tile's result does not depend on
// the thread, and prefill tiles cost far more than decode ones. A step with
// fewer tiles than threads (a decode step of one or two sequences, the more
// so with one KV head) splits each tile into its chunks, one work item each,
// and merges them after: the same bits as one thread reading them all
// (cpu/attention.h), the context read by every thread.
void Model::run_attention(int64_t layer, const Batch& batch, KvCache& cache) {
  const auto& c = config_;
  const cpu::AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.alibi() ? alibi_slopes_.data() : nullptr,
                                  attention_precision_};
  const auto window = static_cast<int32_t>(c.is_local(layer) ? c.sliding_window : 0);
  const auto tile_of = [&](const AttentionUnit& unit) {
    return cpu::AttentionTile{&q_[unit.first_row * c.q_dim()], &attn_[unit.first_row * c.q_dim()], c.q_dim(),
                              unit.rows, rows_[static_cast<size_t>(unit.first_row)].pos + 1, unit.kv_head, window,
                              unit.heads};
  };
  const bool split = pool_.size() > 1 && units_.size() < static_cast<size_t>(pool_.size());
  chunk_items_.clear();
  for (size_t u = 0; u < units_.size(); ++u) {
    const cpu::ChunkRange r = split ? cpu::tile_chunks(tile_of(units_[u])) : cpu::ChunkRange{-1, 0};
    for (int32_t k = r.first; k < r.last; ++k) chunk_items_.push_back({static_cast<int32_t>(u), k});
  }
  if (chunk_partials_.size() < chunk_items_.size()) chunk_partials_.resize(chunk_items_.size());
  // When there are tiles enough to keep every thread busy, a row range's
  // tiles (its KV heads, unless plan_attention put them in one tile) go to
  // one thread together, which asks for each next tile's first block while
  // it computes this one (cpu::prefetch_tile_kv; the kernel asks for the
  // rest as it goes). With few tiles, each goes on its own, so that no
  // thread idles.
  item_groups_.clear();
  for (size_t i = 0; i < chunk_items_.size(); ++i) {
    const AttentionUnit& u = units_[static_cast<size_t>(chunk_items_[i].unit)];
    const AttentionUnit* before = i > 0 ? &units_[static_cast<size_t>(chunk_items_[i - 1].unit)] : nullptr;
    if (split || !before || before->seq != u.seq || before->first_row != u.first_row) item_groups_.push_back(i);
  }
  if (item_groups_.size() < 4 * static_cast<size_t>(pool_.size())) {
    item_groups_.resize(chunk_items_.size());
    std::iota(item_groups_.begin(), item_groups_.end(), size_t{0});
  }
  item_groups_.push_back(chunk_items_.size());
  std::atomic<size_t> next{0};
  pool_.run([&](int t) {
    cpu::AttentionScratch& scratch = attention_scratch_[static_cast<size_t>(t)];
    for (size_t g; (g = next.fetch_add(1, std::memory_order_relaxed)) + 1 < item_groups_.size();)
      for (size_t i = item_groups_[g]; i < item_groups_[g + 1]; ++i) {
        const ChunkItem item = chunk_items_[i];
        const AttentionUnit& unit = units_[static_cast<size_t>(item.unit)];
        const auto table = batch.sequences[static_cast<size_t>(unit.seq)].block_table;
        // The group's next two tiles' first blocks are on their way while
        // this one computes (each asked for once: the second at the group's start).
        for (size_t j = i == item_groups_[g] ? i + 1 : i + 2; j <= i + 2 && j < item_groups_[g + 1]; ++j)
          cpu::prefetch_tile_kv(cache, layer, table, tile_of(units_[static_cast<size_t>(chunk_items_[j].unit)]));
        if (item.chunk < 0)
          cpu::attend_tile(cache, layer, table, shape, tile_of(unit), scratch);
        else
          cpu::attend_chunk(cache, layer, table, shape, tile_of(unit), item.chunk, scratch, chunk_partials_[i]);
      }
  });
  if (!split) return;
  for (size_t i = 0; i < chunk_items_.size();) {  // each split tile's chunks, in order
    size_t j = i;
    while (j < chunk_items_.size() && chunk_items_[j].unit == chunk_items_[i].unit) ++j;
    cpu::finish_tile(cache, shape, tile_of(units_[static_cast<size_t>(chunk_items_[i].unit)]),
                     std::span(chunk_partials_).subspan(i, j - i));
    i = j;
  }
}

// gemma3's QK-norm: each query and key head RMS-normalized before RoPE.
void Model::head_norms(const LayerWeights& l) {
  if (l.q_norm.empty()) return;
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size());
  for (int64_t h = 0; h < n * c.n_head; ++h) cpu::rmsnorm(&q_[h * c.head_dim], l.q_norm.data(), c.head_dim, c.rms_eps, &q_[h * c.head_dim]);
  for (int64_t h = 0; h < n * c.n_head_kv; ++h)
    cpu::rmsnorm(&k_[h * c.head_dim], l.k_norm.data(), c.head_dim, c.rms_eps, &k_[h * c.head_dim]);
}

// gemma3 normalizes a block's output (in tmp_) before it joins the residual.
void Model::post_norm(const std::vector<float>& weight, int64_t n) {
  if (weight.empty()) return;
  const int64_t e = config_.n_embd;
  for (int64_t r = 0; r < n; ++r) cpu::rmsnorm(&tmp_[r * e], weight.data(), e, config_.rms_eps, &tmp_[r * e]);
}

// act(gate) * up (silu or gelu, in place) over several element-wise spans,
// in one parallel region when they are long enough to pay for it: element-
// wise, so any split gives the same values; serial, the other threads idled
// through it (~5 % of a 16-token step, libm expf per value).
void Model::glu_split(void (*act)(float*, const float*, int64_t), std::initializer_list<GluSpan> spans) {
  int64_t total = 0;
  for (const GluSpan& s : spans) total += s.n;
  if (pool_.size() == 1 || total < 16384) {
    for (const GluSpan& s : spans) act(s.gate, s.up, s.n);
    return;
  }
  pool_.parallel_for(total, [&](int64_t b, int64_t end) {
    int64_t at = 0;  // the spans laid end to end
    for (const GluSpan& s : spans) {
      const int64_t lo = std::max(b, at), hi = std::min(end, at + s.n);
      if (lo < hi) act(s.gate + (lo - at), s.up + (lo - at), hi - lo);
      at += s.n;
    }
  });
}

void Model::ffn_block(const LayerWeights& l, int64_t layer) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size());
  for (int64_t r = 0; r < n; ++r) norm(&x_[r * c.n_embd], l.ffn_norm, l.ffn_norm_b, &xn_[r * c.n_embd]);
  if (c.moe()) return moe_ffn(l, layer);
  const int64_t elems = n * c.n_ff;
  float* hidden = gate_.data();
  if (c.gated_ffn) {
    const cpu::WeightMatrix gate_up[] = {l.w_gate, l.w_up};
    float* const outs[] = {gate_.data(), up_.data()};
    cpu::matmul_many(gate_up, xn_.data(), static_cast<int>(n), outs, pool_, scratch_);
    glu_split(c.ffn_activation == FfnActivation::gelu_tanh ? cpu::gelu_mul : cpu::silu_mul,
              {{gate_.data(), up_.data(), elems}});
  } else {  // bloom: gelu(up + b_up)
    hidden = up_.data();
    cpu::matmul(l.w_up, xn_.data(), static_cast<int>(n), up_.data(), pool_, scratch_);
    add_bias(up_.data(), l.b_up, n);
    if (pool_.size() > 1 && elems >= 16384)  // as glu_split
      pool_.parallel_for(elems, [this](int64_t b, int64_t e) { cpu::gelu(up_.data() + b, e - b); });
    else
      cpu::gelu(up_.data(), elems);
  }
  cpu::matmul(l.w_down, hidden, static_cast<int>(n), tmp_.data(), pool_, scratch_);
  add_bias(tmp_.data(), l.b_down, n);
  post_norm(l.post_ffn_norm, n);
  cpu::add(x_.data(), tmp_.data(), n * c.n_embd);
}

// RMSNorm, or LayerNorm with its bias where the architecture has one (bloom).
void Model::norm(const float* x, const std::vector<float>& weight, const std::vector<float>& bias, float* out) const {
  if (config_.layer_norm)
    cpu::layernorm(x, weight.data(), bias.empty() ? nullptr : bias.data(), config_.n_embd, config_.rms_eps, out);
  else
    cpu::rmsnorm(x, weight.data(), config_.n_embd, config_.rms_eps, out);
}

void Model::output_logits(const Batch& batch, Logits& out) {
  const int64_t e = config_.n_embd;
  // Gather the wanted rows, normalized, to the front of xn_.
  int64_t wanted = 0, r = 0;
  for (const auto& seq : batch.sequences) {
    const int64_t len = static_cast<int64_t>(seq.tokens.size());
    for (int64_t i = 0; i < len; ++i, ++r) {
      const bool want = seq.logits == LogitsWanted::all || (seq.logits == LogitsWanted::last && i == len - 1);
      if (want) norm(&x_[r * e], weights_.output_norm, weights_.output_norm_b, &xn_[wanted++ * e]);
    }
  }
  out.n_vocab = config_.n_vocab;
  out.values.resize(static_cast<size_t>(wanted * config_.n_vocab));
  if (wanted > 0) cpu::matmul(weights_.output, xn_.data(), static_cast<int>(wanted), out.values.data(), pool_, scratch_);
}

}  // namespace troupe
