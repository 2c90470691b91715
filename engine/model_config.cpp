#include "engine/model_config.h"

#include "engine/gguf_file.h"

namespace troupe {
namespace {

int64_t required(const GgufFile& f, const std::string& key) {
  auto v = f.get_uint(key);
  if (!v) throw GgufError(f.name() + ": missing metadata key '" + key + "'");
  if (*v == 0 || *v > (1ull << 31)) throw GgufError(f.name() + ": '" + key + "' = " + std::to_string(*v) + " is out of range");
  return static_cast<int64_t>(*v);
}

}  // namespace

ModelConfig read_model_config(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) throw GgufError(f.name() + ": missing metadata key 'general.architecture'");
  c.architecture = *arch;
  if (c.architecture != "qwen2" && c.architecture != "llama")
    throw GgufError(f.name() + ": architecture '" + c.architecture + "' is not supported (qwen2, llama)");
  c.name = f.get_string("general.name").value_or(c.architecture);
  const std::string p = c.architecture + ".";
  c.n_embd = required(f, p + "embedding_length");
  c.n_layer = required(f, p + "block_count");
  c.n_head = required(f, p + "attention.head_count");
  c.n_head_kv = f.get_uint(p + "attention.head_count_kv").value_or(c.n_head);
  c.n_ff = required(f, p + "feed_forward_length");
  c.n_ctx_train = f.get_uint(p + "context_length").value_or(4096);
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-6));
  c.rope_freq_base = static_cast<float>(f.get_float(p + "rope.freq_base").value_or(10000.0));
  if (auto type = f.get_string(p + "rope.scaling.type"); type && *type == "linear") {
    double factor = f.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor <= 0) throw GgufError(f.name() + ": rope.scaling.factor must be positive");
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  c.rope_order = c.architecture == "llama" ? RopeOrder::adjacent : RopeOrder::halves;

  if (c.n_embd % c.n_head != 0)
    throw GgufError(f.name() + ": embedding_length " + std::to_string(c.n_embd) + " is not divisible by head_count");
  c.head_dim = f.get_uint(p + "attention.key_length").value_or(c.n_embd / c.n_head);
  if (c.n_head_kv == 0 || c.n_head % c.n_head_kv != 0)
    throw GgufError(f.name() + ": head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                    std::to_string(c.n_head_kv));
  if (c.head_dim % 2 != 0) throw GgufError(f.name() + ": head dimension must be even for RoPE");

  const GgufTensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) throw GgufError(f.name() + ": missing or malformed tensor 'token_embd.weight'");
  if (embd->dims[0] != c.n_embd)
    throw GgufError(f.name() + ": token_embd.weight has width " + std::to_string(embd->dims[0]) +
                    ", expected embedding_length " + std::to_string(c.n_embd));
  c.n_vocab = embd->dims[1];
  return c;
}

}  // namespace troupe
