// Arbitrary bytes as a GBNF grammar, then as text for it, through what a
// server does with a request's grammar: compile (within GrammarLimits), and
// when it compiles, run a matcher over the real default model's vocabulary.
// The first half of the input (up to a NUL) is the grammar, the rest a text.
//
// Properties: compile either succeeds or throws GrammarError (nothing else,
// no crash, no hang past libFuzzer's timeout); on a compiled grammar the
// token mask agrees with taking each token alone, a refused token leaves the
// matcher unchanged, and the forced tokens are always allowed in turn; the
// grammar with its rules renamed apart (prefix_rule_names) compiles alike.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;

namespace {

const std::shared_ptr<const grammar::TokenTrie>& trie() {
  static const auto t = [] {
    static const Tokenizer tok(fuzz::qwen2_vocabulary());
    return grammar::token_trie_of(tok);
  }();
  return t;
}

void run_matcher(const std::shared_ptr<const grammar::Grammar>& g, std::string_view sample) {
  (void)grammar::matches(*g, sample);
  auto index = std::make_shared<grammar::GrammarIndex>(g, trie());
  grammar::Matcher m(index);
  // Walk the sample's bytes as single-byte tokens where the vocabulary has them.
  for (size_t at = 0; at < sample.size() && at < 64; ++at) {
    const auto mask = m.allowed();
    const auto [token, len] = trie()->longest_prefix(sample.substr(at, 1));
    if (token < 0) break;
    if (mask->allows(token) != m.allows(token)) fuzz::fail("mask disagrees with taking the token alone");
    grammar::Matcher before = m;
    if (!m.accept(token)) {
      if (before.allows(token)) fuzz::fail("an allowed token was refused");
      break;
    }
  }
  grammar::Matcher probe = m;
  for (int32_t t : m.forced_tokens(8))
    if (!probe.accept(t)) fuzz::fail("a forced token is refused");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\0');
  const std::string_view text = input.substr(0, cut);
  const std::string_view sample = cut == std::string_view::npos ? std::string_view() : input.substr(cut + 1);
  grammar::GrammarLimits limits;
  limits.max_elements = 1 << 14;
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::compile_gbnf(text, limits);
  } catch (const grammar::GrammarError&) {
    return 0;
  }
  // Its rules renamed apart (a tool call's grammar joins a response format's
  // so): the same grammar under the new names.
  std::shared_ptr<const grammar::Grammar> renamed;
  grammar::GrammarLimits roomy = limits;
  roomy.max_text_bytes = 2 * limits.max_text_bytes + 4 * text.size();
  try {
    renamed = grammar::compile_gbnf(grammar::prefix_rule_names(text, "p_"), roomy, "p_root");
  } catch (const grammar::GrammarError& e) {
    fuzz::fail("a grammar renamed apart does not compile", e.what());
  }
  if (renamed->elements.size() != g->elements.size()) fuzz::fail("a grammar renamed apart has other elements");
  // A grammar whose parse stacks grow past the machine's limits (x+++...+
  // nested deep) throws GrammarError while it runs: the worker ends that
  // sequence with grammar_blocked (tests/worker/step_runner.test.cpp).
  try {
    run_matcher(g, sample);
  } catch (const grammar::GrammarError&) {
  }
  return 0;
}

