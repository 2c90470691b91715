#include "engine/model_weights.h"

#include <string>

#include "engine/cpu/quants.h"
#include "engine/gguf_file.h"
#include "engine/model_config.h"

namespace troupe {
namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const GgufTensorInfo& tensor(const GgufFile& f, const std::string& name, std::vector<int64_t> dims) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) throw GgufError(f.name() + ": missing tensor '" + name + "'");
  if (t->dims != dims)
    throw GgufError(f.name() + ": tensor '" + name + "' has shape " + shape_text(t->dims) + ", expected " +
                    shape_text(dims));
  return *t;
}

cpu::WeightMatrix matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  const GgufTensorInfo& t = tensor(f, name, {cols, rows});
  return {t.type, f.tensor_data(t), rows, cols};
}

std::vector<float> vector_f32(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensorInfo& t = tensor(f, name, {n});
  std::vector<float> v(n);
  cpu::dequantize_row(t.type, f.tensor_data(t), v.data(), n);
  return v;
}

std::vector<float> optional_vector(const GgufFile& f, const std::string& name, int64_t n) {
  return f.find_tensor(name) ? vector_f32(f, name, n) : std::vector<float>{};
}

// Rows [first, first + rows) of a matrix, as a matrix of their own.
cpu::WeightMatrix row_view(const cpu::WeightMatrix& m, int64_t first, int64_t rows) {
  return {m.type, static_cast<const uint8_t*>(m.data) + first * row_bytes(m.type, m.cols), rows, m.cols};
}

// bloom and mpt: LayerNorm everywhere, fused QKV, no gate; biases on every
// projection and norm (bloom), or where the file has them (mpt).
void bind_alibi_layer(const GgufFile& f, const ModelConfig& c, const std::string& p, LayerWeights& l) {
  const bool bloom = c.architecture == "bloom";
  const auto bias = [&](const std::string& name, int64_t n) {
    return bloom ? vector_f32(f, name, n) : optional_vector(f, name, n);
  };
  l.attn_norm = vector_f32(f, p + "attn_norm.weight", c.n_embd);
  l.attn_norm_b = bias(p + "attn_norm.bias", c.n_embd);
  const int64_t qkv_rows = c.q_dim() + 2 * c.kv_dim();
  const cpu::WeightMatrix qkv = matrix(f, p + "attn_qkv.weight", c.n_embd, qkv_rows);
  l.wq = row_view(qkv, 0, c.q_dim());
  l.wk = row_view(qkv, c.q_dim(), c.kv_dim());
  l.wv = row_view(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
  if (const std::vector<float> b = bias(p + "attn_qkv.bias", qkv_rows); !b.empty()) {
    l.bq.assign(b.begin(), b.begin() + c.q_dim());
    l.bk.assign(b.begin() + c.q_dim(), b.begin() + c.q_dim() + c.kv_dim());
    l.bv.assign(b.begin() + c.q_dim() + c.kv_dim(), b.end());
  }
  l.wo = matrix(f, p + "attn_output.weight", c.q_dim(), c.n_embd);
  l.bo = bias(p + "attn_output.bias", c.n_embd);
  l.ffn_norm = vector_f32(f, p + "ffn_norm.weight", c.n_embd);
  l.ffn_norm_b = bias(p + "ffn_norm.bias", c.n_embd);
  l.w_up = matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff);
  l.b_up = bias(p + "ffn_up.bias", c.n_ff);
  l.w_down = matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd);
  l.b_down = bias(p + "ffn_down.bias", c.n_embd);
}

// A 3-D tensor [cols, rows, n] as n matrices of rows x cols, one per expert.
std::vector<cpu::WeightMatrix> expert_views(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows,
                                            int64_t n) {
  const GgufTensorInfo& t = tensor(f, name, {cols, rows, n});
  const cpu::WeightMatrix whole{t.type, f.tensor_data(t), rows * n, cols};
  std::vector<cpu::WeightMatrix> views;
  for (int64_t e = 0; e < n; ++e) views.push_back(row_view(whole, e * rows, rows));
  return views;
}

void bind_experts(const GgufFile& f, const ModelConfig& c, const std::string& p, LayerWeights& l) {
  l.router = matrix(f, p + "ffn_gate_inp.weight", c.n_embd, c.n_expert);
  l.exp_gate = expert_views(f, p + "ffn_gate_exps.weight", c.n_embd, c.n_ff_expert, c.n_expert);
  l.exp_up = expert_views(f, p + "ffn_up_exps.weight", c.n_embd, c.n_ff_expert, c.n_expert);
  l.exp_down = expert_views(f, p + "ffn_down_exps.weight", c.n_ff_expert, c.n_embd, c.n_expert);
  if (c.n_ff_shared == 0) return;
  l.shared_gate = vector_f32(f, p + "ffn_gate_inp_shexp.weight", c.n_embd);
  l.sh_gate = matrix(f, p + "ffn_gate_shexp.weight", c.n_embd, c.n_ff_shared);
  l.sh_up = matrix(f, p + "ffn_up_shexp.weight", c.n_embd, c.n_ff_shared);
  l.sh_down = matrix(f, p + "ffn_down_shexp.weight", c.n_ff_shared, c.n_embd);
}

}  // namespace

ModelWeights bind_weights(const GgufFile& f, const ModelConfig& c) {
  ModelWeights w;
  w.token_embd = matrix(f, "token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = vector_f32(f, "output_norm.weight", c.n_embd);
  w.tied_output = f.find_tensor("output.weight") == nullptr;
  w.output = w.tied_output ? w.token_embd : matrix(f, "output.weight", c.n_embd, c.n_vocab);
  if (c.architecture == "bloom") {
    w.output_norm_b = vector_f32(f, "output_norm.bias", c.n_embd);
    w.embd_norm = vector_f32(f, "token_embd_norm.weight", c.n_embd);
    w.embd_norm_b = vector_f32(f, "token_embd_norm.bias", c.n_embd);
  } else if (c.architecture == "mpt") {
    w.output_norm_b = optional_vector(f, "output_norm.bias", c.n_embd);
  }
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    if (c.fused_qkv) {
      bind_alibi_layer(f, c, p, l);
      w.layers.push_back(std::move(l));
      continue;
    }
    l.attn_norm = vector_f32(f, p + "attn_norm.weight", c.n_embd);
    l.wq = matrix(f, p + "attn_q.weight", c.n_embd, c.q_dim());
    l.wk = matrix(f, p + "attn_k.weight", c.n_embd, c.kv_dim());
    l.wv = matrix(f, p + "attn_v.weight", c.n_embd, c.kv_dim());
    l.wo = matrix(f, p + "attn_output.weight", c.q_dim(), c.n_embd);
    l.bq = optional_vector(f, p + "attn_q.bias", c.q_dim());
    l.bk = optional_vector(f, p + "attn_k.bias", c.kv_dim());
    l.bv = optional_vector(f, p + "attn_v.bias", c.kv_dim());
    l.ffn_norm = vector_f32(f, p + "ffn_norm.weight", c.n_embd);
    if (c.moe()) {
      bind_experts(f, c, p, l);
    } else {
      l.w_gate = matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff);
      l.w_up = matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff);
      l.w_down = matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd);
    }
    if (c.architecture == "gemma3") {
      l.q_norm = vector_f32(f, p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = vector_f32(f, p + "attn_k_norm.weight", c.head_dim);
      l.post_attn_norm = vector_f32(f, p + "post_attention_norm.weight", c.n_embd);
      l.post_ffn_norm = vector_f32(f, p + "post_ffw_norm.weight", c.n_embd);
    }
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace troupe
