#include "engine/synthetic_vocabulary.h"
#include "engine/unicode.h"

#include <map>
#include <set>
#include <string_view>
#include <utility>

namespace troupe {

Vocabulary synthetic_vocabulary(const TrainedVocabulary& t) {
  Vocabulary v;
  v.tokens = t.tokens;
  for (int32_t type : t.token_types) v.token_types.push_back(static_cast<TokenType>(type));
  v.merges = t.merges;
  v.eos_id = t.im_end_id;
  v.bos_id = t.eos_id;
  v.pad_id = t.eos_id;
  return v;
}

namespace {

constexpr std::string_view kCorpus =
    "The quick brown fox jumps over the lazy dog. A language model predicts the next token of a text, "
    "one token at a time, from the tokens before it. The server streams each token to the client as soon "
    "as it is accepted, and the client may cancel the request at any time. Sessions live for days and "
    "survive restarts of the server; their pages are restored instead of recomputed. "
    "int main(int argc, char** argv) {\n    for (int i = 0; i < argc; ++i) {\n        printf(\"%s\\n\", argv[i]);\n    }\n    return 0;\n}\n"
    "def forward(self, x):\n    return self.norm(x + self.attention(x))\n\n"
    "Summarize these ten papers: attention is all you need; the transformer uses attention and feed forward "
    "layers; the model reads the prompt and then writes the answer. Hello, world! How are you today? "
    "I am fine, thank you. What is the capital of France? The capital of France is Paris.";

// Words as GPT-2 splits them roughly: a leading space stays with the word.
std::vector<std::vector<std::string>> split_words(std::string_view text) {
  std::vector<std::vector<std::string>> words;
  std::vector<std::string> cur;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if ((ch == ' ' || ch == '\n') && !cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
    cur.push_back(byte_to_token_text(static_cast<uint8_t>(ch)));
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

}  // namespace

std::string byte_to_token_text(uint8_t b) {
  // Printable Latin-1 bytes map to themselves; the rest to U+0100 and up, in order.
  auto printable = [](uint32_t c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE); };
  std::string out;
  if (printable(b)) {
    append_utf8(out, b);
    return out;
  }
  uint32_t n = 0;
  for (uint32_t c = 0; c < b; ++c)
    if (!printable(c)) ++n;
  append_utf8(out, 0x100 + n);
  return out;
}

TrainedVocabulary train_synthetic_vocabulary(int32_t n_merges, int64_t n_vocab) {
  TrainedVocabulary v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_to_token_text(static_cast<uint8_t>(b)));
    v.token_types.push_back(1);
  }
  std::set<std::string> known(v.tokens.begin(), v.tokens.end());
  auto words = split_words(kCorpus);
  for (int32_t m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& w : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
    if (counts.empty()) break;
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it)
      if (it->second > best->second) best = it;
    if (best->second < 2) break;
    const auto [a, b] = best->first;
    v.merges.push_back(a + " " + b);
    if (known.insert(a + b).second) {  // "th"+"e" and "t"+"he" both make "the"
      v.tokens.push_back(a + b);
      v.token_types.push_back(1);
    }
    for (auto& w : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          merged.push_back(a + b);
          ++i;
        } else {
          merged.push_back(w[i]);
        }
      }
      w = std::move(merged);
    }
  }
  auto add_control = [&](const char* text) {
    v.tokens.push_back(text);
    v.token_types.push_back(3);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  v.eos_id = add_control("<|endoftext|>");
  v.im_start_id = add_control("<|im_start|>");
  v.im_end_id = add_control("<|im_end|>");
  while (static_cast<int64_t>(v.tokens.size()) < n_vocab) {
    v.tokens.push_back("<|unused_" + std::to_string(v.tokens.size()) + "|>");
    v.token_types.push_back(5);
  }
  return v;
}

}  // namespace troupe
