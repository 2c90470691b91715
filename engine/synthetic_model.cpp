#include "engine/synthetic_model.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "engine/cpu/quants.h"
#include "engine/gguf_writer.h"
#include "engine/synthetic_vocabulary.h"

namespace troupe {
namespace {

class TensorMaker {
 public:
  TensorMaker(GgufWriter& w, uint64_t seed) : writer_(w), rng_(seed) {}

  // Uniform in [center - spread, center + spread], then stored in `type`.
  void add(const std::string& name, std::vector<int64_t> dims, TensorType type, float center, float spread) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> values(n);
    std::uniform_real_distribution<float> dist(center - spread, center + spread);
    for (auto& v : values) v = dist(rng_);
    const int64_t rows = n / dims[0];
    const int64_t rb = row_bytes(type, dims[0]);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r) cpu::quantize_row(type, &values[r * dims[0]], &bytes[r * rb], dims[0]);
    writer_.add_tensor(name, std::move(dims), type, std::move(bytes));
  }

 private:
  GgufWriter& writer_;
  std::mt19937_64 rng_;
};

// bloom: LayerNorm (weight and bias) on the embeddings and in every block,
// a fused QKV matrix, and a bias on every projection (the output norm's
// weight is written by the caller; its bias here). mpt: the same blocks
// without any bias and without the embedding norm (MPT-7B's no_bias).
void add_alibi_tensors(const SyntheticModelSpec& spec, TensorMaker& t) {
  const int64_t e = spec.n_embd, hd = e / spec.n_head, q = spec.n_head * hd, kv = spec.n_head_kv * hd;
  const float we = 1.0f / std::sqrt(static_cast<float>(e)), wf = 1.0f / std::sqrt(static_cast<float>(spec.n_ff));
  const bool bloom = spec.architecture == "bloom";
  const auto bias = [&](const std::string& name, int64_t n) {
    if (bloom) t.add(name, {n}, TensorType::F32, 0.0f, 0.1f);
  };
  bias("output_norm.bias", e);
  if (bloom) {
    t.add("token_embd_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
    t.add("token_embd_norm.bias", {e}, TensorType::F32, 0.0f, 0.1f);
  }
  for (int64_t i = 0; i < spec.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    t.add(p + "attn_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
    bias(p + "attn_norm.bias", e);
    t.add(p + "attn_qkv.weight", {e, q + 2 * kv}, spec.weight_type, 0.0f, we * 1.7f);
    bias(p + "attn_qkv.bias", q + 2 * kv);
    t.add(p + "attn_output.weight", {q, e}, spec.weight_type, 0.0f, we);
    bias(p + "attn_output.bias", e);
    t.add(p + "ffn_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
    bias(p + "ffn_norm.bias", e);
    t.add(p + "ffn_up.weight", {e, spec.n_ff}, spec.weight_type, 0.0f, we * 1.7f);
    bias(p + "ffn_up.bias", spec.n_ff);
    t.add(p + "ffn_down.weight", {spec.n_ff, e}, spec.weight_type, 0.0f, wf);
    bias(p + "ffn_down.bias", e);
  }
}

// A mixture-of-experts feed-forward, as llama.cpp names it: the router
// (F32, as quantizers leave it), the experts' gate, up and down matrices as
// 3-D tensors, and qwen2moe's shared expert with its gate vector.
void add_expert_tensors(const SyntheticModelSpec& spec, const std::string& p, TensorMaker& t) {
  const int64_t e = spec.n_embd, ff = spec.expert_ff(), n = spec.n_expert;
  const float we = 1.0f / std::sqrt(static_cast<float>(e)), wf = 1.0f / std::sqrt(static_cast<float>(ff));
  t.add(p + "ffn_gate_inp.weight", {e, n}, TensorType::F32, 0.0f, we * 3.0f);
  t.add(p + "ffn_gate_exps.weight", {e, ff, n}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "ffn_up_exps.weight", {e, ff, n}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "ffn_down_exps.weight", {ff, e, n}, spec.weight_type, 0.0f, wf);
  if (spec.shared_ff() == 0) return;
  const int64_t sf = spec.shared_ff();
  t.add(p + "ffn_gate_inp_shexp.weight", {e}, TensorType::F32, 0.0f, we);
  t.add(p + "ffn_gate_shexp.weight", {e, sf}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "ffn_up_shexp.weight", {e, sf}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "ffn_down_shexp.weight", {sf, e}, spec.weight_type, 0.0f, 1.0f / std::sqrt(static_cast<float>(sf)));
}

void check_blocks(const char* what, int64_t cols, TensorType type) {
  if (cols % traits(type).block_elems != 0)
    throw std::invalid_argument(std::string(what) + " = " + std::to_string(cols) + " is not a multiple of the " +
                                std::string(tensor_type_name(type)) + " block size");
}

// The hyperparameters every architecture's file carries, and the norms'
// epsilon it names.
void write_dimensions(const SyntheticModelSpec& spec, GgufWriter& w) {
  const std::string a = spec.architecture + ".";
  w.set_string("general.architecture", spec.architecture);
  w.set_string("general.name", "troupe synthetic " + spec.architecture);
  w.set_u32(a + "context_length", static_cast<uint32_t>(spec.context_length));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(spec.n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(spec.n_layer));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(spec.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(spec.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(spec.n_head_kv));
  if (spec.architecture == "mpt") {
    w.set_f32(a + "attention.max_alibi_bias", 8.0f);
    if (spec.clamp_kqv > 0) w.set_f32(a + "attention.clamp_kqv", static_cast<float>(spec.clamp_kqv));
  }
  if (spec.architecture == "bloom" || spec.architecture == "mpt")
    w.set_f32(a + "attention.layer_norm_epsilon", 1e-5f);
  else
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
}

// RoPE's base and scaling, and gemma3's window and head widths.
void write_rope_and_window(const SyntheticModelSpec& spec, GgufWriter& w) {
  const std::string a = spec.architecture + ".";
  // gemma3's global layers turn slower than its local ones (10,000, implicit).
  w.set_f32(a + "rope.freq_base", spec.architecture == "gemma3" ? 1000000.0f : 10000.0f);
  if (spec.architecture == "gemma3") {
    w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(spec.sliding_window));
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(spec.n_embd / spec.n_head));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(spec.n_embd / spec.n_head));
  }
  if (!spec.rope_scaling.empty()) {
    w.set_string(a + "rope.scaling.type", spec.rope_scaling);
    w.set_f32(a + "rope.scaling.factor", static_cast<float>(spec.rope_factor));
    if (spec.rope_orig_ctx > 0)
      w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(spec.rope_orig_ctx));
  }
}

void write_experts(const SyntheticModelSpec& spec, GgufWriter& w) {
  if (spec.n_expert <= 0) return;
  const std::string a = spec.architecture + ".";
  w.set_u32(a + "expert_count", static_cast<uint32_t>(spec.n_expert));
  w.set_u32(a + "expert_used_count", static_cast<uint32_t>(spec.n_expert_used));
  w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(spec.expert_ff()));
  if (spec.shared_ff() > 0) w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(spec.shared_ff()));
}

void write_vocabulary(const TrainedVocabulary& vocab, GgufWriter& w) {
  w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", vocab.token_types);
  w.set_string_array("tokenizer.ggml.merges", vocab.merges);
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.im_end_id));
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.eos_id));
  w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(vocab.eos_id));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
}

// One block of the rotary architectures: attention (qwen2's biases, gemma3's
// extra norms), then a dense or mixture-of-experts feed-forward.
void add_block_tensors(const SyntheticModelSpec& spec, int64_t i, TensorMaker& t) {
  const int64_t e = spec.n_embd, hd = e / spec.n_head, q = spec.n_head * hd, kv = spec.n_head_kv * hd;
  const float we = 1.0f / std::sqrt(static_cast<float>(e)), wf = 1.0f / std::sqrt(static_cast<float>(spec.n_ff));
  const std::string p = "blk." + std::to_string(i) + ".";
  t.add(p + "attn_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
  t.add(p + "attn_q.weight", {e, q}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "attn_k.weight", {e, kv}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "attn_v.weight", {e, kv}, spec.weight_type, 0.0f, we * 1.7f);
  if (spec.architecture.starts_with("qwen2")) {
    t.add(p + "attn_q.bias", {q}, TensorType::F32, 0.0f, 0.1f);
    t.add(p + "attn_k.bias", {kv}, TensorType::F32, 0.0f, 0.1f);
    t.add(p + "attn_v.bias", {kv}, TensorType::F32, 0.0f, 0.1f);
  }
  t.add(p + "attn_output.weight", {q, e}, spec.weight_type, 0.0f, we);
  if (spec.architecture == "gemma3") {
    t.add(p + "attn_q_norm.weight", {hd}, TensorType::F32, 1.0f, 0.1f);
    t.add(p + "attn_k_norm.weight", {hd}, TensorType::F32, 1.0f, 0.1f);
    t.add(p + "post_attention_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
    t.add(p + "post_ffw_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
  }
  t.add(p + "ffn_norm.weight", {e}, TensorType::F32, 1.0f, 0.1f);
  if (spec.n_expert > 0) {
    add_expert_tensors(spec, p, t);
    return;
  }
  t.add(p + "ffn_gate.weight", {e, spec.n_ff}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "ffn_up.weight", {e, spec.n_ff}, spec.weight_type, 0.0f, we * 1.7f);
  t.add(p + "ffn_down.weight", {spec.n_ff, e}, spec.weight_type, 0.0f, wf);
}

}  // namespace

// A flat list of independent checks, in the order they are told (exempt
// from the complexity limit: one condition per refusal).
void SyntheticModelSpec::validate() const {
  if (architecture != "qwen2" && architecture != "qwen2moe" && architecture != "llama" && architecture != "gemma3" &&
      architecture != "bloom" && architecture != "mpt")
    throw std::invalid_argument("architecture must be qwen2, qwen2moe, llama, gemma3, bloom or mpt");
  if ((architecture == "qwen2moe") != (n_expert > 0) && !(architecture == "llama" && n_expert > 0))
    throw std::invalid_argument(architecture == "qwen2moe" ? "qwen2moe needs --experts" : "only qwen2moe and llama take experts");
  if (n_expert > 0 && (n_expert_used < 1 || n_expert_used > n_expert))
    throw std::invalid_argument("experts used must be 1 to the number of experts");
  if (n_expert > 0) check_blocks("expert feed-forward width", expert_ff(), weight_type);
  if (shared_ff() > 0) check_blocks("shared expert feed-forward width", shared_ff(), weight_type);
  if (architecture == "gemma3" && sliding_window <= 0) throw std::invalid_argument("the sliding window must be positive");
  if (n_embd <= 0 || n_layer <= 0 || n_head <= 0 || n_head_kv <= 0 || n_ff <= 0)
    throw std::invalid_argument("dimensions must be positive");
  if (n_embd % n_head != 0) throw std::invalid_argument("n_embd must be divisible by n_head");
  if (n_head % n_head_kv != 0) throw std::invalid_argument("n_head must be a multiple of n_head_kv");
  if ((n_embd / n_head) % 2 != 0) throw std::invalid_argument("head dimension must be even");
  if (weight_type == TensorType::Q8_K) throw std::invalid_argument("Q8_K is an activation format");
  check_blocks("n_embd", n_embd, weight_type);
  check_blocks("n_ff", n_ff, weight_type);
  check_blocks("n_embd", n_embd, embedding_type);
  if (!rope_scaling.empty() && rope_scaling != "linear" && rope_scaling != "yarn")
    throw std::invalid_argument("rope scaling must be linear or yarn (GGUF has no other)");
  if (!rope_scaling.empty() && !(rope_factor > 0 && std::isfinite(rope_factor)))
    throw std::invalid_argument("rope factor must be a finite number above 0");
}

void build_synthetic_model(const SyntheticModelSpec& spec, GgufWriter& w) {
  spec.validate();
  const TrainedVocabulary vocab = train_synthetic_vocabulary(spec.n_merges, spec.n_vocab);
  const int64_t n_vocab = static_cast<int64_t>(vocab.tokens.size());
  write_dimensions(spec, w);
  write_rope_and_window(spec, w);
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", spec.architecture.starts_with("qwen2") ? "qwen2" : "llama-bpe");
  write_experts(spec, w);
  write_vocabulary(vocab, w);

  const int64_t e = spec.n_embd;
  // Weight scales keep activations O(1) through the layers, so logits differ
  // between tokens and greedy decoding is not decided by noise.
  const float we = 1.0f / std::sqrt(static_cast<float>(e));
  TensorMaker t(w, spec.seed);
  t.add("token_embd.weight", {e, n_vocab}, spec.embedding_type, 0.0f, 1.0f);
  t.add("output_norm.weight", {e}, TensorType::F32, spec.output_scale, 0.1f * spec.output_scale);
  // qwen2moe files always carry an output matrix: llama.cpp's loader requires one.
  if (!spec.tied_output || spec.architecture == "qwen2moe")
    t.add("output.weight", {e, n_vocab}, spec.embedding_type, 0.0f, we * 1.7f);
  if (spec.architecture == "bloom" || spec.architecture == "mpt") {
    add_alibi_tensors(spec, t);
    return;
  }
  for (int64_t i = 0; i < spec.n_layer; ++i) add_block_tensors(spec, i, t);
}

void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path) {
  GgufWriter w;
  build_synthetic_model(spec, w);
  w.write(path);
}

}  // namespace troupe
