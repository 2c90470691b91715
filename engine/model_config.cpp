#include "engine/model_config.h"

#include <cmath>
#include <stdexcept>

#include "engine/gguf_file.h"
#include "engine/kv_key_layers.h"

namespace troupe {
namespace {

int64_t required(const GgufFile& f, const std::string& key) {
  auto v = f.get_uint(key);
  if (!v) throw GgufError(f.name() + ": missing metadata key '" + key + "'");
  if (*v == 0 || *v > (1ull << 31)) throw GgufError(f.name() + ": '" + key + "' = " + std::to_string(*v) + " is out of range");
  return static_cast<int64_t>(*v);
}

// rope.scaling.*: none, linear or yarn (llama.cpp's keys), checked.
RopeScaling read_rope_scaling(const GgufFile& f, const std::string& p, int64_t n_ctx_train) {
  RopeScaling s;
  const auto type = f.get_string(p + "rope.scaling.type");
  if (!type || *type == "none") return s;
  if (*type != "linear" && *type != "yarn")
    throw GgufError(f.name() + ": rope.scaling.type '" + *type + "' is not supported (none, linear, yarn)");
  s.type = *type == "linear" ? RopeScalingType::linear : RopeScalingType::yarn;
  s.factor = f.get_float(p + "rope.scaling.factor").value_or(1.0);
  s.orig_ctx = static_cast<int64_t>(f.get_uint(p + "rope.scaling.original_context_length").value_or(static_cast<uint64_t>(n_ctx_train)));
  s.attn_factor = f.get_float(p + "rope.scaling.attn_factor").value_or(1.0);
  s.beta_fast = f.get_float(p + "rope.scaling.yarn_beta_fast").value_or(32.0);
  s.beta_slow = f.get_float(p + "rope.scaling.yarn_beta_slow").value_or(1.0);
  return s;
}

// What llama.cpp's gemma3 graph takes from the file or assumes (docs/MODELS.md,
// "Gemma 3"): embeddings scaled by sqrt(n_embd), GELU, every sixth layer global
// (5, 11, ...) and the others local with a 10,000 RoPE base and no scaling.
// The 27B scales queries by 1/sqrt(n_embd / n_head) rather than 1/sqrt(head_dim).
void read_gemma3(const GgufFile& f, ModelConfig& c) {
  c.ffn_activation = FfnActivation::gelu_tanh;
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  if (c.n_layer == 62) c.query_scale = std::sqrt(static_cast<float>(c.head_dim) / static_cast<float>(c.n_embd / c.n_head));
  c.sliding_window = required(f, "gemma3.attention.sliding_window");
  constexpr int64_t kPattern = 6;
  c.local_layers.assign(static_cast<size_t>(c.n_layer), 1);
  for (int64_t l = kPattern - 1; l < c.n_layer; l += kPattern) c.local_layers[static_cast<size_t>(l)] = 0;
  if (const auto v = f.get_uint("gemma3.attention.value_length"); v && static_cast<int64_t>(*v) != c.head_dim)
    throw GgufError(f.name() + ": gemma3.attention.value_length " + std::to_string(*v) + " differs from key_length " +
                    std::to_string(c.head_dim) + " (troupe runs equal K and V heads)");
}

// bloom and mpt, as llama.cpp reads them: LayerNorm, a fused QKV, GELU
// without a gate, ALiBi. bloom's maximum bias is 8 (BLOOM's; its GGUF has no
// key for it); mpt's is in the file, as is its optional QKV clamp. What
// troupe does not run is refused by name.
void read_alibi_family(const GgufFile& f, ModelConfig& c) {
  c.layer_norm = true;
  c.gated_ffn = false;
  c.fused_qkv = true;
  c.ffn_activation = FfnActivation::gelu_tanh;
  c.max_alibi_bias = 8.0f;
  if (c.architecture == "mpt") {
    const double bias = f.get_float("mpt.attention.max_alibi_bias").value_or(0.0);
    const double clamp = f.get_float("mpt.attention.clamp_kqv").value_or(0.0);
    if (!std::isfinite(bias) || bias <= 0 || bias > 64)
      throw GgufError(f.name() + ": mpt.attention.max_alibi_bias = " + std::to_string(bias) +
                      " is missing or out of range (0, 64]: troupe runs MPT with ALiBi");
    if (!std::isfinite(clamp) || clamp < 0)
      throw GgufError(f.name() + ": mpt.attention.clamp_kqv = " + std::to_string(clamp) + " must be 0 or more");
    c.max_alibi_bias = static_cast<float>(bias);
    c.clamp_kqv = static_cast<float>(clamp);
    for (const char* name : {"position_embd.weight", "blk.0.attn_q_norm.weight", "blk.0.ffn_act.scales"})
      if (f.find_tensor(name))
        throw GgufError(f.name() + ": tensor '" + name +
                        "' (learned positions, QK LayerNorm or activation scales) is an MPT variant troupe does not run");
  }
}

// The router's options, as llama.cpp's qwen2moe and llama (Mixtral) graphs
// use them: softmax gating; llama renormalizes the chosen weights, qwen2moe
// does not. A file's expert_gating_func (1 softmax, 2 sigmoid),
// expert_weights_norm and expert_weights_scale are honoured when present.
void read_experts(const GgufFile& f, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  const auto count = f.get_uint(p + "expert_count");
  if (c.architecture == "qwen2moe" && (!count || *count == 0))
    throw GgufError(f.name() + ": qwen2moe needs " + p + "expert_count > 0");
  if (!count || *count == 0) {
    if (f.find_tensor("blk.0.ffn_gate_inp.weight"))
      throw GgufError(f.name() + ": expert tensors but " + p + "expert_count is missing or 0");
    return;
  }
  if (c.architecture != "qwen2moe" && c.architecture != "llama")
    throw GgufError(f.name() + ": experts in a " + c.architecture + " model are not supported (qwen2moe, llama)");
  c.n_expert = static_cast<int64_t>(*count);
  const auto used = f.get_uint(p + "expert_used_count");
  if (c.n_expert > 1024) throw GgufError(f.name() + ": " + p + "expert_count " + std::to_string(c.n_expert) + " is over 1024");
  if (!used || *used == 0 || static_cast<int64_t>(*used) > c.n_expert)
    throw GgufError(f.name() + ": " + p + "expert_used_count " + (used ? std::to_string(*used) : std::string("(missing)")) +
                    " must be 1 to expert_count " + std::to_string(c.n_expert));
  c.n_expert_used = static_cast<int64_t>(*used);
  c.n_ff_expert = static_cast<int64_t>(f.get_uint(p + "expert_feed_forward_length").value_or(0));
  if (c.n_ff_expert == 0) c.n_ff_expert = c.architecture == "llama" ? c.n_ff : c.n_ff / c.n_expert_used;
  if (c.architecture == "qwen2moe")
    c.n_ff_shared = static_cast<int64_t>(f.get_uint(p + "expert_shared_feed_forward_length").value_or(static_cast<uint64_t>(c.n_ff)));
  const auto gating = f.get_uint(p + "expert_gating_func").value_or(1);
  if (gating != 1 && gating != 2)
    throw GgufError(f.name() + ": " + p + "expert_gating_func = " + std::to_string(gating) +
                    " is not a gating function troupe runs (1 softmax, 2 sigmoid)");
  c.gating = gating == 2 ? ModelConfig::Gating::sigmoid : ModelConfig::Gating::softmax;
  const GgufValue* norm = f.find(p + "expert_weights_norm");
  c.expert_weights_norm = norm && norm->as_bool() ? *norm->as_bool() : c.architecture == "llama";
  const double scale = f.get_float(p + "expert_weights_scale").value_or(0.0);
  if (!std::isfinite(scale) || scale < 0) throw GgufError(f.name() + ": " + p + "expert_weights_scale must be 0 or more");
  c.expert_weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
}

std::string read_architecture(const GgufFile& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch) throw GgufError(f.name() + ": missing metadata key 'general.architecture'");
  if (*arch != "qwen2" && *arch != "qwen2moe" && *arch != "llama" && *arch != "gemma3" && *arch != "bloom" &&
      *arch != "mpt")
    throw GgufError(f.name() + ": architecture '" + *arch + "' is not supported (qwen2, qwen2moe, llama, gemma3, bloom, mpt)");
  return *arch;
}

bool alibi_family(const ModelConfig& c) { return c.architecture == "bloom" || c.architecture == "mpt"; }

// The widths, depth and head counts, the training context, and the norms' epsilon.
void read_dimensions(const GgufFile& f, const std::string& p, ModelConfig& c) {
  c.n_embd = required(f, p + "embedding_length");
  c.n_layer = required(f, p + "block_count");
  c.n_head = required(f, p + "attention.head_count");
  c.n_head_kv = f.get_uint(p + "attention.head_count_kv").value_or(c.n_head);
  c.n_ff = required(f, p + "feed_forward_length");
  c.n_ctx_train = static_cast<int64_t>(f.get_uint(p + "context_length").value_or(4096));
  if (c.n_ctx_train <= 0 || c.n_ctx_train > (int64_t{1} << 31))
    throw GgufError(f.name() + ": '" + p + "context_length' is out of range (1 to 2^31)");
  const std::string eps_key = alibi_family(c) ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon";
  const double eps = f.get_float(p + eps_key).value_or(alibi_family(c) ? 1e-5 : 1e-6);
  if (!std::isfinite(eps) || eps <= 0 || eps > 1)
    throw GgufError(f.name() + ": " + eps_key + " = " + std::to_string(eps) + " is out of range (0, 1]");
  c.rms_eps = static_cast<float>(eps);
}

// RoPE's base, its scaling (the file's, or the overrides'), and the order
// of the pairs it turns.
void read_rope(const GgufFile& f, const std::string& p, const ModelOverrides& overrides, ModelConfig& c) {
  const double base = f.get_float(p + "rope.freq_base").value_or(10000.0);
  if (!std::isfinite(base) || base <= 1)
    throw GgufError(f.name() + ": rope.freq_base = " + std::to_string(base) + " must be a finite number above 1");
  c.rope_freq_base = static_cast<float>(base);
  c.rope_scaling = overrides.rope ? overrides.rope_scaling : read_rope_scaling(f, p, c.n_ctx_train);
  if (c.rope_scaling.type == RopeScalingType::yarn && c.rope_scaling.orig_ctx <= 0) c.rope_scaling.orig_ctx = c.n_ctx_train;
  try {
    validate(c.rope_scaling);
  } catch (const std::invalid_argument& e) {
    throw GgufError(f.name() + ": " + e.what());
  }
  if (c.rope_scaling.type == RopeScalingType::linear) c.rope_freq_scale = static_cast<float>(1.0 / c.rope_scaling.factor);
  c.rope_order = c.architecture == "llama" ? RopeOrder::adjacent : RopeOrder::halves;  // gemma3, qwen2moe: NEOX, halves
}

void read_heads(const GgufFile& f, const std::string& p, ModelConfig& c) {
  if (c.n_embd % c.n_head != 0)
    throw GgufError(f.name() + ": embedding_length " + std::to_string(c.n_embd) + " is not divisible by head_count");
  c.head_dim = f.get_uint(p + "attention.key_length").value_or(c.n_embd / c.n_head);
  if (c.n_head_kv == 0 || c.n_head % c.n_head_kv != 0)
    throw GgufError(f.name() + ": head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                    std::to_string(c.n_head_kv));
  if (c.head_dim <= 0 || c.head_dim > 1024 || c.head_dim % 2 != 0)
    throw GgufError(f.name() + ": head dimension " + std::to_string(c.head_dim) + " must be even, 2 to 1024");
}

// The vocabulary's size: the embedding's rows, which the tokenizer's tokens must match.
void read_vocabulary_size(const GgufFile& f, ModelConfig& c) {
  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) throw GgufError(f.name() + ": missing or malformed tensor 'token_embd.weight'");
  if (embd->dims[0] != c.n_embd)
    throw GgufError(f.name() + ": token_embd.weight has width " + std::to_string(embd->dims[0]) +
                    ", expected embedding_length " + std::to_string(c.n_embd));
  c.n_vocab = embd->dims[1];
  // Every token the tokenizer can produce needs an embedding row and a logit,
  // and every logit a token: a mismatch would fail engine steps mid-stream.
  if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->as_array() &&
                                                                  static_cast<int64_t>(tokens->as_array()->items.size()) != c.n_vocab)
    throw GgufError(f.name() + ": the vocabulary has " + std::to_string(tokens->as_array()->items.size()) +
                    " tokens but token_embd.weight has " + std::to_string(c.n_vocab) + " rows");
}

}  // namespace

ModelConfig read_model_config(const GgufFile& f, const ModelOverrides& overrides) {
  ModelConfig c;
  c.architecture = read_architecture(f);
  c.name = f.get_string("general.name").value_or(c.architecture);
  const std::string p = c.architecture + ".";
  read_dimensions(f, p, c);
  read_rope(f, p, overrides, c);
  read_heads(f, p, c);
  read_vocabulary_size(f, c);
  c.wide_key_layers = wide_key_layers(f, c);
  if (c.architecture == "gemma3") read_gemma3(f, c);
  if (alibi_family(c)) read_alibi_family(f, c);
  read_experts(f, c);
  return c;
}

}  // namespace troupe
