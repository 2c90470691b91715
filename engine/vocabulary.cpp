#include "engine/vocabulary.h"

#include <optional>

#include "engine/gguf_file.h"

namespace troupe {
namespace {

[[noreturn]] void fail(std::string_view source, std::string_view key, const std::string& problem) {
  throw TokenizerError(std::string(source) + ": " + std::string(key) + ": " + problem);
}

std::optional<std::string> read_string(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const std::string* s = v->as_string();
  if (!s) fail(f.name(), key, "expected a string, found " + std::string(gguf_value_type_name(v->type)));
  return *s;
}

std::optional<bool> read_bool(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const auto b = v->as_bool();
  if (!b) fail(f.name(), key, "expected a bool, found " + std::string(gguf_value_type_name(v->type)));
  return b;
}

// Special ids are uint32 in files written by llama.cpp's converter; some
// writers store -1 for "none", which is accepted as such.
int32_t read_token_id(const GgufFile& f, std::string_view key, size_t n_tokens) {
  const GgufValue* v = f.find(key);
  if (!v) return kNoToken;
  const auto id = v->as_int();
  if (!id) fail(f.name(), key, "expected an integer, found " + std::string(gguf_value_type_name(v->type)));
  if (*id == -1) return kNoToken;
  if (*id < 0 || static_cast<uint64_t>(*id) >= n_tokens) {
    fail(f.name(), key, "token id " + std::to_string(*id) + " is out of range for a vocabulary of " +
                            std::to_string(n_tokens) + " tokens");
  }
  return static_cast<int32_t>(*id);
}

TokenizerModel read_model(const GgufFile& f) {
  const auto name = read_string(f, "tokenizer.ggml.model");
  if (!name) fail(f.name(), "tokenizer.ggml.model", "missing; the file has no tokenizer");
  if (*name == "gpt2") return TokenizerModel::gpt2;
  if (*name == "llama") return TokenizerModel::llama;
  fail(f.name(), "tokenizer.ggml.model",
       "unsupported tokenizer model '" + *name + "' (supported: gpt2, llama)");
}

void read_token_arrays(const GgufFile& f, Vocabulary& v) {
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) fail(f.name(), "tokenizer.ggml.tokens", "missing");
  v.tokens = std::move(*tokens);

  if (auto types = f.get_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != v.tokens.size()) {
      fail(f.name(), "tokenizer.ggml.token_type",
           "has " + std::to_string(types->size()) + " entries but tokenizer.ggml.tokens has " +
               std::to_string(v.tokens.size()));
    }
    v.token_types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > static_cast<int64_t>(TokenType::byte)) {
        fail(f.name(), "tokenizer.ggml.token_type",
             "token " + std::to_string(i) + " has unknown type " + std::to_string(t));
      }
      v.token_types.push_back(static_cast<TokenType>(t));
    }
  }
  if (auto scores = f.get_float_array("tokenizer.ggml.scores")) {
    v.scores.assign(scores->begin(), scores->end());
  }
  if (auto merges = f.get_string_array("tokenizer.ggml.merges")) {
    v.merges = std::move(*merges);
  } else if (v.model == TokenizerModel::gpt2) {
    // An empty list is a legal (byte-only) vocabulary; no key at all is a broken file.
    fail(f.name(), "tokenizer.ggml.merges", "missing; a byte-level BPE (gpt2) vocabulary needs merges");
  }
}

}  // namespace

Vocabulary load_vocabulary(const GgufFile& file) {
  Vocabulary v;
  v.model = read_model(file);
  v.pre = read_string(file, "tokenizer.ggml.pre").value_or("default");
  read_token_arrays(file, v);

  const size_t n = v.tokens.size();
  v.bos_id = read_token_id(file, "tokenizer.ggml.bos_token_id", n);
  v.eos_id = read_token_id(file, "tokenizer.ggml.eos_token_id", n);
  v.eot_id = read_token_id(file, "tokenizer.ggml.eot_token_id", n);
  v.eom_id = read_token_id(file, "tokenizer.ggml.eom_token_id", n);
  v.pad_id = read_token_id(file, "tokenizer.ggml.padding_token_id", n);
  v.unk_id = read_token_id(file, "tokenizer.ggml.unknown_token_id", n);

  // SentencePiece models expect a BOS unless told otherwise; byte-level BPE
  // models that want one say so (Llama 3 does, Qwen2 does not).
  v.add_bos = read_bool(file, "tokenizer.ggml.add_bos_token").value_or(v.model == TokenizerModel::llama);
  v.add_eos = read_bool(file, "tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = read_bool(file, "tokenizer.ggml.add_space_prefix").value_or(true);
  v.chat_template = read_string(file, "tokenizer.chat_template").value_or("");

  validate_vocabulary(v, file.name());
  resolve_merges(v, index_tokens(v), file.name());
  return v;
}

void validate_vocabulary(const Vocabulary& v, std::string_view source) {
  const size_t n = v.tokens.size();
  if (n == 0) fail(source, "tokenizer.ggml.tokens", "is empty");
  if (n > static_cast<size_t>(INT32_MAX)) fail(source, "tokenizer.ggml.tokens", "has too many tokens");
  if (!v.token_types.empty() && v.token_types.size() != n) {
    fail(source, "tokenizer.ggml.token_type",
         "has " + std::to_string(v.token_types.size()) + " entries but there are " + std::to_string(n) +
             " tokens");
  }
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    const auto t = static_cast<int32_t>(v.token_types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::byte)) {
      fail(source, "tokenizer.ggml.token_type", "token " + std::to_string(i) + " has unknown type " +
                                                    std::to_string(t));
    }
  }
  if (!v.scores.empty() && v.scores.size() != n) {
    fail(source, "tokenizer.ggml.scores",
         "has " + std::to_string(v.scores.size()) + " entries but there are " + std::to_string(n) + " tokens");
  }
  if (v.model == TokenizerModel::llama && v.scores.empty()) {
    fail(source, "tokenizer.ggml.scores", "missing; a SentencePiece (llama) vocabulary needs scores");
  }
  const std::pair<const char*, int32_t> ids[] = {
      {"tokenizer.ggml.bos_token_id", v.bos_id},     {"tokenizer.ggml.eos_token_id", v.eos_id},
      {"tokenizer.ggml.eot_token_id", v.eot_id},     {"tokenizer.ggml.eom_token_id", v.eom_id},
      {"tokenizer.ggml.padding_token_id", v.pad_id}, {"tokenizer.ggml.unknown_token_id", v.unk_id},
  };
  for (const auto& [key, id] : ids) {
    if (id != kNoToken && (id < 0 || static_cast<size_t>(id) >= n)) {
      fail(source, key, "token id " + std::to_string(id) + " is out of range for a vocabulary of " +
                            std::to_string(n) + " tokens");
    }
  }
}

TokenIndex index_tokens(const Vocabulary& v) {
  TokenIndex index;
  index.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) index.emplace(v.tokens[i], static_cast<int32_t>(i));
  return index;
}

std::vector<MergeRule> resolve_merges(const Vocabulary& v, const TokenIndex& index, std::string_view source) {
  constexpr std::string_view key = "tokenizer.ggml.merges";
  std::vector<MergeRule> rules;
  rules.reserve(v.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < v.merges.size(); ++rank) {
    const std::string_view line = v.merges[rank];
    // Search from 1 so that a left part which is itself a space still parses.
    const size_t space = line.size() > 1 ? line.find(' ', 1) : std::string_view::npos;
    const auto where = [&] { return "merge " + std::to_string(rank) + " '" + std::string(line) + "'"; };
    if (space == std::string_view::npos || space + 1 >= line.size()) {
      fail(source, key, where() + " is not of the form 'left right'");
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    joined.assign(left).append(right);
    const auto l = index.find(left), r = index.find(right), j = index.find(joined);
    if (l == index.end()) fail(source, key, where() + " names unknown token '" + std::string(left) + "'");
    if (r == index.end()) fail(source, key, where() + " names unknown token '" + std::string(right) + "'");
    if (j == index.end()) fail(source, key, where() + " produces unknown token '" + joined + "'");
    rules.push_back({l->second, r->second, j->second});
  }
  return rules;
}

}  // namespace troupe
