#include "engine/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <optional>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "engine/pre_tokenizer.h"
#include "engine/unicode.h"

namespace troupe {
namespace {

// Texts that llama.cpp (the version llama-cpp-python 0.3.36 carries) treats
// as ending generation whatever the ids say, and as control tokens whatever
// type the file gives them: a model file whose "</s>" is a normal token
// (Qwen2.5's 128247) still has it parsed as one special token in text, and
// generation ends there (docs/MODELS.md, "Per model").
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",    "<|im_end|>",      "<|end|>",     "<|return|>",         "<|call|>",         "<|flush|>",
    "<|calls|>",     "<end_of_turn>",   "<|endoftext|>", "</s>",             "<|eom_id|>",       "<EOT>",
    "_<EOT>",        "[EOT]",           "[EOS]",       "<|end_of_text|>",    "<end_of_utterance>", "<eos>",
    "<turn|>",       "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
    "<|fim_pad|>",   "<|repo_name|>",   "<|file_sep|>",
};

constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // U+2581

struct MergeTarget {
  int32_t rank;
  int32_t result;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Lets the word cache be probed with a string_view without building a string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct Segment {
  std::string_view text;  // raw text when id == kNoToken
  int32_t id = kNoToken;
};

// Symbols of a word being merged: a doubly linked list over a vector, so a
// merge is O(1) and candidates can refer to symbols by index.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
};

std::optional<uint8_t> parse_byte_token(std::string_view text) {
  // "<0xAB>"
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos)).append(to);
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  Vocabulary vocab;
  TokenIndex index;
  std::vector<std::string> bytes;  // token_bytes of every id
  std::vector<bool> end_of_generation;
  std::vector<int32_t> eog_ids;
  // Control and user-defined tokens by first byte, longest first.
  std::array<std::vector<int32_t>, 256> specials;

  // gpt2
  std::unordered_map<uint64_t, MergeTarget> merges;
  std::array<int32_t, 256> byte_ids{};
  std::unique_ptr<PreTokenizerRegex> regex;
  bool ignore_merges = false;

  // llama: the <0xAB> token of each byte, or kNoToken
  std::array<int32_t, 256> fallback_ids{};

  static constexpr size_t kCacheMaxWordBytes = 64;
  static constexpr size_t kCacheMaxEntries = 1 << 16;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;

  explicit Impl(Vocabulary v);
  void init_bytes();
  void init_specials_and_eog();
  void init_gpt2();
  void init_llama();

  std::vector<Segment> split_special(std::string_view text, bool parse_special) const;
  void encode_gpt2_word(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_merge(std::string_view word, std::vector<int32_t>& out) const;
  void encode_llama(std::string_view text, bool prefix_space, std::vector<int32_t>& out) const;
  void emit_llama_piece(std::string_view piece, std::vector<int32_t>& out) const;
};

Tokenizer::Impl::Impl(Vocabulary v) : vocab(std::move(v)) {
  validate_vocabulary(vocab, "vocabulary");
  index = index_tokens(vocab);
  for (const std::string_view text : kEndOfGenerationTexts) {
    const auto it = index.find(text);
    if (it == index.end() || vocab.type_of(it->second) == TokenType::control) continue;
    if (vocab.token_types.empty()) vocab.token_types.assign(vocab.tokens.size(), TokenType::normal);
    vocab.token_types[static_cast<size_t>(it->second)] = TokenType::control;
  }
  init_bytes();
  init_specials_and_eog();
  if (vocab.model == TokenizerModel::gpt2) {
    init_gpt2();
  } else {
    init_llama();
  }
}

void Tokenizer::Impl::init_bytes() {
  bytes.resize(vocab.tokens.size());
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string& text = vocab.tokens[id];
    const TokenType type = vocab.type_of(static_cast<int32_t>(id));
    if (type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown) {
      bytes[id] = text;
    } else if (vocab.model == TokenizerModel::gpt2) {
      // A token outside the byte-level alphabet cannot come from merges;
      // showing its text is more useful than failing.
      bytes[id] = byte_level_decode(text).value_or(text);
    } else if (const auto b = type == TokenType::byte ? parse_byte_token(text) : std::nullopt) {
      bytes[id] = std::string(1, static_cast<char>(*b));
    } else {
      bytes[id] = replace_all(text, kSentencePieceSpace, " ");
    }
  }
}

void Tokenizer::Impl::init_specials_and_eog() {
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = vocab.type_of(id);
    const std::string& text = vocab.tokens[static_cast<size_t>(id)];
    if ((type == TokenType::control || type == TokenType::user_defined) && !text.empty()) {
      specials[static_cast<uint8_t>(text[0])].push_back(id);
    }
  }
  for (auto& list : specials) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return vocab.tokens[static_cast<size_t>(a)].size() > vocab.tokens[static_cast<size_t>(b)].size();
    });
  }

  end_of_generation.assign(vocab.tokens.size(), false);
  for (const int32_t id : {vocab.eos_id, vocab.eot_id, vocab.eom_id}) {
    if (id != kNoToken) end_of_generation[static_cast<size_t>(id)] = true;
  }
  for (const std::string_view text : kEndOfGenerationTexts) {
    if (const auto it = index.find(text); it != index.end()) end_of_generation[static_cast<size_t>(it->second)] = true;
  }
  for (int32_t id = 0; id < n; ++id) {
    if (end_of_generation[static_cast<size_t>(id)]) eog_ids.push_back(id);
  }
}

void Tokenizer::Impl::init_gpt2() {
  const PreTokenizer pre = pre_tokenizer_for(vocab.pre);
  ignore_merges = pre.ignore_merges;
  regex = std::make_unique<PreTokenizerRegex>(pre.pattern);

  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, byte_to_codepoint(static_cast<uint8_t>(b)));
    const auto it = index.find(symbol);
    if (it == index.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw TokenizerError("vocabulary: byte-level BPE vocabulary has no token for byte " + std::string(hex) +
                           " ('" + symbol + "')");
    }
    byte_ids[static_cast<size_t>(b)] = it->second;
  }

  const std::vector<MergeRule> rules = resolve_merges(vocab, index, "vocabulary");
  merges.reserve(rules.size());
  for (size_t rank = 0; rank < rules.size(); ++rank) {
    // A repeated merge keeps its first rank, as in llama.cpp (HF keeps the
    // last); real vocabularies have no repeats.
    merges.emplace(pair_key(rules[rank].left, rules[rank].right),
                   MergeTarget{static_cast<int32_t>(rank), rules[rank].result});
  }
}

void Tokenizer::Impl::init_llama() {
  fallback_ids.fill(kNoToken);
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.type_of(static_cast<int32_t>(id)) != TokenType::byte) continue;
    if (const auto b = parse_byte_token(vocab.tokens[id])) fallback_ids[*b] = static_cast<int32_t>(id);
  }
}

std::vector<Segment> Tokenizer::Impl::split_special(std::string_view text, bool parse_special) const {
  std::vector<Segment> segments;
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    int32_t hit = kNoToken;
    for (const int32_t id : specials[static_cast<uint8_t>(text[pos])]) {
      if (!parse_special && vocab.type_of(id) == TokenType::control) continue;
      if (text.substr(pos).starts_with(vocab.tokens[static_cast<size_t>(id)])) {
        hit = id;
        break;
      }
    }
    if (hit == kNoToken) {
      ++pos;
      continue;
    }
    if (pos > start) segments.push_back({text.substr(start, pos - start), kNoToken});
    segments.push_back({{}, hit});
    pos += vocab.tokens[static_cast<size_t>(hit)].size();
    start = pos;
  }
  if (start < text.size()) segments.push_back({text.substr(start), kNoToken});
  return segments;
}

void Tokenizer::Impl::encode_gpt2_word(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  if (ignore_merges) {
    if (const auto it = index.find(byte_level_encode(word)); it != index.end()) {
      out.push_back(it->second);
    }
  }
  if (out.size() == first) bpe_merge(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex);
    if (cache.size() >= kCacheMaxEntries) cache.clear();
    cache.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void Tokenizer::Impl::bpe_merge(std::string_view word, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[static_cast<size_t>(i)] = {byte_ids[static_cast<uint8_t>(word[static_cast<size_t>(i)])], i - 1,
                                       i + 1 < n ? i + 1 : -1};
  }
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
    // Lowest rank first; equal ranks (the same pair twice) merge left to right.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t l = symbols[static_cast<size_t>(left)].id, r = symbols[static_cast<size_t>(right)].id;
    if (const auto it = merges.find(pair_key(l, r)); it != merges.end()) {
      queue.push({it->second.rank, left, right, l, r, it->second.result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(c.left)];
    Symbol& right = symbols[static_cast<size_t>(c.right)];
    // Stale if either side has been merged since the candidate was queued.
    if (left.id != c.left_id || left.next != c.right || right.id != c.right_id) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.left;
    right.id = kNoToken;
    consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    out.push_back(symbols[static_cast<size_t>(i)].id);
  }
}

void Tokenizer::Impl::encode_llama(std::string_view raw, bool prefix_space, std::vector<int32_t>& out) const {
  std::string text = prefix_space ? std::string(kSentencePieceSpace) : std::string();
  text += replace_all(raw, " ", kSentencePieceSpace);

  // Symbols are character spans of `text`; after a merge a symbol's span
  // covers its right neighbour's too, so spans stay contiguous.
  struct Span {
    size_t begin, length;
    int32_t prev, next;
  };
  std::vector<Span> spans;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = utf8_step(text, pos).length;
    const auto i = static_cast<int32_t>(spans.size());
    spans.push_back({pos, len, i - 1, pos + len < text.size() ? i + 1 : -1});
    pos += len;
  }
  struct Candidate {
    float score;
    int32_t left, right;
    size_t length;
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0 || spans[static_cast<size_t>(left)].next < 0) return;
    const Span& l = spans[static_cast<size_t>(left)];
    const Span& r = spans[static_cast<size_t>(l.next)];
    const auto it = index.find(std::string_view(text).substr(l.begin, l.length + r.length));
    if (it == index.end()) return;
    queue.push({vocab.scores[static_cast<size_t>(it->second)], left, l.next, l.length + r.length});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(spans.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Span& left = spans[static_cast<size_t>(c.left)];
    Span& right = spans[static_cast<size_t>(c.right)];
    if (left.length == 0 || right.length == 0 || left.next != c.right || left.length + right.length != c.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) spans[static_cast<size_t>(right.next)].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = spans.empty() ? -1 : 0; i >= 0; i = spans[static_cast<size_t>(i)].next) {
    emit_llama_piece(std::string_view(text).substr(spans[static_cast<size_t>(i)].begin,
                                                   spans[static_cast<size_t>(i)].length),
                     out);
  }
}

void Tokenizer::Impl::emit_llama_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (const auto it = index.find(piece); it != index.end()) {
    out.push_back(it->second);
    return;
  }
  for (const char c : piece) {
    const int32_t id = fallback_ids[static_cast<uint8_t>(c)];
    if (id != kNoToken) {
      out.push_back(id);
    } else if (vocab.unk_id != kNoToken) {
      out.push_back(vocab.unk_id);
      return;  // one <unk> for the whole piece, as SentencePiece does
    } else {
      throw TokenizerError("cannot encode '" + std::string(piece) +
                           "': no token, no byte fallback and no unknown token");
    }
  }
}

Tokenizer::Tokenizer(Vocabulary vocab) : impl_(std::make_unique<Impl>(std::move(vocab))) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos) {
    if (im.vocab.bos_id == kNoToken) throw TokenizerError("encode: add_bos requested but the vocabulary has no BOS token");
    out.push_back(im.vocab.bos_id);
  }
  const std::vector<Segment> segments = im.split_special(text, parse_special);
  // Match scratch is made once per call: creating it costs more than
  // matching a short prompt.
  PreTokenizerRegex::ScratchPtr scratch;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    if (s.id != kNoToken) {
      out.push_back(s.id);
    } else if (im.vocab.model == TokenizerModel::llama) {
      // As llama.cpp: a fragment after a special token is prefixed too.
      const bool fragment_starts = i == 0 || segments[i - 1].id != kNoToken;
      im.encode_llama(s.text, im.vocab.add_space_prefix && fragment_starts, out);
    } else {
      if (!scratch) scratch = im.regex->scratch();
      im.regex->split(*scratch, s.text, [&](size_t b, size_t e) { im.encode_gpt2_word(s.text.substr(b, e - b), out); });
    }
  }
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->vocab.tokens.size()) {
    throw std::out_of_range("token id " + std::to_string(id) + " is out of range for a vocabulary of " +
                            std::to_string(impl_->vocab.tokens.size()) + " tokens");
  }
}

void Tokenizer::append_piece(std::string& out, int32_t id, bool at_start) const {
  check_id(id);
  const std::string& piece = impl_->bytes[static_cast<size_t>(id)];
  const Vocabulary& v = impl_->vocab;
  const bool strip = at_start && v.model == TokenizerModel::llama && v.add_space_prefix &&
                     v.type_of(id) == TokenType::normal && !piece.empty() && piece[0] == ' ';
  out.append(piece, strip ? 1 : 0);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  bool at_start = true;
  for (const int32_t id : ids) {
    append_piece(out, id, at_start);
    if (id != impl_->vocab.bos_id) at_start = false;
  }
  return out;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return impl_->vocab.tokens[static_cast<size_t>(id)];
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return impl_->bytes[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return impl_->vocab.type_of(id);
}

int32_t Tokenizer::find_token(std::string_view text) const {
  const auto it = impl_->index.find(text);
  return it == impl_->index.end() ? kNoToken : it->second;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->end_of_generation.size() &&
         impl_->end_of_generation[static_cast<size_t>(id)];
}

const std::vector<int32_t>& Tokenizer::end_of_generation_ids() const { return impl_->eog_ids; }
int32_t Tokenizer::bos() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos_id; }
bool Tokenizer::add_bos_by_default() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos_by_default() const { return impl_->vocab.add_eos; }
size_t Tokenizer::size() const { return impl_->vocab.tokens.size(); }
const Vocabulary& Tokenizer::vocabulary() const { return impl_->vocab; }

std::string StreamDecoder::push(int32_t id) {
  tokenizer_->append_piece(pending_, id, at_start_);
  if (id != tokenizer_->bos()) at_start_ = false;
  const size_t settled = utf8_settled_prefix(pending_);
  std::string out = sanitize_utf8(std::string_view(pending_).substr(0, settled));
  pending_.erase(0, settled);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  at_start_ = true;
  return out;
}

}  // namespace troupe
