// troupe make-model: write a synthetic GGUF model (random weights, tiny real
// BPE vocabulary) of any shape and format.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>

#include "cli/commands.h"
#include "engine/synthetic_model.h"

namespace troupe::cli {
namespace {

TensorType parse_type(const std::string& name) {
  auto t = tensor_type_from_name(name);
  if (!t || *t == TensorType::Q8_K) throw std::invalid_argument("unknown weight type '" + name + "'");
  return *t;
}

}  // namespace

Run add_make_model(CLI::App& app) {
  struct Args {
    SyntheticModelSpec spec;
    std::string out, type = "F32", embedding_type;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("make-model", "Write a synthetic model with random weights");
  cmd->add_option("--out,-o", a->out, "Output GGUF path")->required();
  cmd->add_option("--arch", a->spec.architecture, "qwen2, qwen2moe, llama, gemma3, bloom or mpt (ALiBi)")->capture_default_str();
  cmd->add_option("--type", a->type, "Weight format: F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K")->capture_default_str();
  cmd->add_option("--embedding-type", a->embedding_type, "Format of token_embd/output (default: --type)");
  cmd->add_option("--embd", a->spec.n_embd, "Embedding width")->capture_default_str();
  cmd->add_option("--layers", a->spec.n_layer, "Blocks")->capture_default_str();
  cmd->add_option("--heads", a->spec.n_head, "Attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", a->spec.n_head_kv, "KV heads (GQA)")->capture_default_str();
  cmd->add_option("--ff", a->spec.n_ff, "Feed-forward width")->capture_default_str();
  cmd->add_option("--vocab", a->spec.n_vocab, "Pad the vocabulary to this many tokens");
  cmd->add_option("--merges", a->spec.n_merges, "BPE merges to learn")->capture_default_str();
  cmd->add_option("--context", a->spec.context_length, "Training context length")->capture_default_str();
  cmd->add_option("--seed", a->spec.seed, "Weight seed")->capture_default_str();
  cmd->add_option("--rope-scaling", a->spec.rope_scaling, "Write rope.scaling metadata: linear or yarn")
      ->check(CLI::IsMember({"linear", "yarn"}));
  cmd->add_option("--rope-factor", a->spec.rope_factor, "rope.scaling.factor")->capture_default_str();
  cmd->add_option("--rope-orig-ctx", a->spec.rope_orig_ctx, "rope.scaling.original_context_length (yarn)");
  cmd->add_option("--window", a->spec.sliding_window, "gemma3: sliding window of the local layers")
      ->capture_default_str();
  cmd->add_option("--clamp-kqv", a->spec.clamp_kqv, "mpt: clamp Q, K and V to [-C, C] (0: none)");
  cmd->add_option("--experts", a->spec.n_expert, "Mixture of experts (qwen2moe, llama): experts per layer");
  cmd->add_option("--experts-used", a->spec.n_expert_used, "Experts each token uses");
  cmd->add_option("--expert-ff", a->spec.n_ff_expert, "An expert's feed-forward width (default --ff)");
  cmd->add_option("--shared-expert-ff", a->spec.n_ff_shared, "qwen2moe: the shared expert's width (0: none)");
  cmd->add_flag("!--untied", a->spec.tied_output, "Separate output matrix instead of the embedding");
  return [a] {
    a->spec.weight_type = parse_type(a->type);
    a->spec.embedding_type = parse_type(a->embedding_type.empty() ? a->type : a->embedding_type);
    write_synthetic_model(a->spec, a->out);
    std::fprintf(stderr, "wrote %s\n", a->out.c_str());
    return 0;
  };
}

}  // namespace troupe::cli
