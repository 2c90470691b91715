#pragma once
// The generation loop of one sequence: chunked prefill of the prompt, then
// decode with sampling until end of generation, a stop string, or the token
// limit. Used by `troupe generate`; the server's scheduler batches many
// sequences through Backend::forward instead.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kv_eviction.h"
#include "engine/sampler.h"
#include "engine/speculation/controller.h"

namespace troupe {

class Backend;
class ModelDrafter;
class SuffixTree;
class Tokenizer;
namespace grammar {
class GrammarIndex;
}

struct GenerateOptions {
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;
  int32_t prefill_chunk = 256;  // tokens per forward while prefilling
  // Speculative decoding: n-gram prompt lookup or a draft model, verified
  // in one forward per window; source and k chosen per step by the
  // controller (engine/speculation).
  SpeculationMode speculation = SpeculationMode::off;
  int32_t max_draft = 8;
  ModelDrafter* drafter = nullptr;  // the draft model (modes draft and auto); not owned
  // Earlier outputs to draft from (modes suffix and auto), besides the
  // request's own prompt and output; not owned.
  const SuffixTree* history = nullptr;
  // Constrained decoding (engine/grammar): every token follows this grammar,
  // and tokens it forces are computed together in one forward (jump-forward).
  std::shared_ptr<grammar::GrammarIndex> grammar;
  // KV eviction (engine/kv_budget.h): the sequence holds at most
  // eviction.budget positions once its prompt is read; off by default.
  EvictionPolicy eviction;
};

enum class FinishReason { length, end_of_generation, stop_string, context_full, grammar_blocked };
const char* finish_reason_name(FinishReason reason);

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids, stop/end tokens excluded
  FinishReason finish = FinishReason::length;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // from the first generated token to the last
  int32_t prompt_tokens = 0;
  SpeculationStats speculation;
  int32_t forward_steps = 0;  // decode forwards (fewer than tokens when drafts are accepted)
  int32_t evictions = 0;      // times the KV was cut to its budget
  int32_t evicted = 0;        // positions gone from the KV in all
};

// on_text receives the decoded text as it becomes final (whole UTF-8
// characters, stop strings held back); on_token each accepted token id.
struct GenerateCallbacks {
  std::function<void(std::string_view text)> on_text;
  std::function<void(int32_t token)> on_token;
  // At the end, before the sequence's pages are released: its block table
  // and how many positions hold computed K/V (tests compare caches).
  std::function<void(std::span<const int32_t> block_table, int32_t computed)> on_kv;
};

GenerateResult generate(Backend& backend, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const GenerateCallbacks& callbacks);

}  // namespace troupe
