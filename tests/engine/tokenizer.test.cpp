#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "engine/tokenizer.h"
#include "engine/unicode.h"
#include "engine/vocabulary.h"

#ifndef TROUPE_SOURCE_DIR
#error "TROUPE_SOURCE_DIR must be defined as the repository root (tests read tests/fixtures/)"
#endif

using namespace troupe;

namespace {

// A byte-level vocabulary written by hand: ids 0..255 are the byte tokens in
// byte order, merges and special tokens follow.
struct TinyVocab {
  Vocabulary v;

  explicit TinyVocab(std::string pre = "qwen2") {
    v.pre = std::move(pre);
    for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
    v.token_types.assign(256, TokenType::normal);
  }
  int32_t add(std::string text, TokenType type = TokenType::normal) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(type);
    return static_cast<int32_t>(v.tokens.size() - 1);
  }
  // Adds the merge of two raw-byte strings (next rank) and its result token.
  int32_t merge(std::string_view left, std::string_view right) {
    v.merges.push_back(byte_level_encode(left) + " " + byte_level_encode(right));
    return add(byte_level_encode(std::string(left) + std::string(right)));
  }
  Tokenizer build() const { return Tokenizer(v); }
};

int32_t byte_id(char c) { return static_cast<uint8_t>(c); }

std::vector<int32_t> byte_ids(std::string_view s) {
  std::vector<int32_t> ids;
  for (const char c : s) ids.push_back(byte_id(c));
  return ids;
}

std::string fixture_path(std::string_view name) {
  return std::string(TROUPE_SOURCE_DIR) + "/tests/fixtures/" + std::string(name);
}

Vocabulary qwen2_vocabulary() {
  const GgufFile file = GgufFile::open(fixture_path("qwen2-vocab.gguf"));
  return load_vocabulary(file);
}

const Tokenizer& qwen2() {
  static const Tokenizer tokenizer(qwen2_vocabulary());
  return tokenizer;
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

struct ReferenceCase {
  bool parse_special = true;
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<ReferenceCase> reference_cases(std::string_view file = "qwen2-tokens.tsv") {
  std::ifstream in(fixture_path(file));
  REQUIRE(in);
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab1 = line.find('\t'), tab2 = line.find('\t', tab1 + 1);
    REQUIRE(tab2 != std::string::npos);
    ReferenceCase c;
    c.parse_special = line.substr(0, tab1) == "S";
    c.text = from_hex(std::string_view(line).substr(tab1 + 1, tab2 - tab1 - 1));
    std::istringstream ids(line.substr(tab2 + 1));
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, std::vector<std::string>* pieces) {
  StreamDecoder decoder(tok);
  std::string out;
  for (const int32_t id : ids) {
    std::string piece = decoder.push(id);
    if (pieces) pieces->push_back(piece);
    out += piece;
  }
  return out + decoder.finish();
}

}  // namespace

TEST_CASE("merges are applied lowest rank first") {
  TinyVocab a;
  const int32_t ab = a.merge("a", "b");
  const int32_t bc = a.merge("b", "c");
  CHECK(a.build().encode("abc", false, false) == std::vector<int32_t>{ab, byte_id('c')});

  TinyVocab b;
  const int32_t bc2 = b.merge("b", "c");
  b.merge("a", "b");
  CHECK(b.build().encode("abc", false, false) == std::vector<int32_t>{byte_id('a'), bc2});
  (void)bc;
}

TEST_CASE("merges build on earlier merges until no pair has a rank") {
  TinyVocab t;
  const int32_t he = t.merge("h", "e");
  const int32_t ll = t.merge("l", "l");
  const int32_t hell = t.merge("he", "ll");
  const int32_t hello = t.merge("hell", "o");
  const Tokenizer tok = t.build();
  CHECK(tok.encode("hello", false, false) == std::vector<int32_t>{hello});
  CHECK(tok.encode("hell", false, false) == std::vector<int32_t>{hell});
  CHECK(tok.encode("helo", false, false) == std::vector<int32_t>{he, byte_id('l'), byte_id('o')});
  CHECK(tok.encode("lll", false, false) == std::vector<int32_t>{ll, byte_id('l')});
}

TEST_CASE("a repeated pair merges from the left") {
  TinyVocab t;
  const int32_t aa = t.merge("a", "a");
  CHECK(t.build().encode("aaaaa", false, false) == std::vector<int32_t>{aa, aa, byte_id('a')});
}

TEST_CASE("merges never cross pre-tokenizer word boundaries") {
  TinyVocab t;
  t.merge("o", " ");  // would join "hello" and " world" if words were not split first
  const int32_t space_w = t.merge(" ", "w");
  const std::vector<int32_t> ids = t.build().encode("o wo", false, false);
  CHECK(ids == std::vector<int32_t>{byte_id('o'), space_w, byte_id('o')});
}

TEST_CASE("the pre-tokenizer name selects how digits are split") {
  TinyVocab qwen("qwen2"), gpt2("gpt-2"), llama3("llama-bpe");
  int32_t n12 = 0, n34 = 0, n123 = 0;
  for (TinyVocab* t : {&qwen, &gpt2, &llama3}) {
    n12 = t->merge("1", "2");
    n34 = t->merge("3", "4");
    n123 = t->merge("12", "3");
  }
  // qwen2: one digit per word; gpt-2: all digits in one word; llama-bpe: up to three.
  CHECK(qwen.build().encode("1234", false, false) == byte_ids("1234"));
  CHECK(gpt2.build().encode("1234", false, false) == std::vector<int32_t>{n12, n34});
  CHECK(llama3.build().encode("1234", false, false) == std::vector<int32_t>{n123, '4'});
}

TEST_CASE("llama-bpe takes a word that is itself a token whole, before any merge") {
  TinyVocab qwen("qwen2"), llama3("llama-bpe");
  int32_t ab = 0, abc = 0;
  for (TinyVocab* t : {&qwen, &llama3}) {
    ab = t->merge("a", "b");
    abc = t->add(byte_level_encode("abc"));  // in the vocabulary, but no merge makes it
  }
  CHECK(qwen.build().encode("abc", false, false) == std::vector<int32_t>{ab, 'c'});
  CHECK(llama3.build().encode("abc", false, false) == std::vector<int32_t>{abc});
}

TEST_CASE("an unknown pre-tokenizer name is rejected when the tokenizer is built") {
  TinyVocab t("made-up");
  t.merge("a", "b");
  CHECK_THROWS_WITH(t.build(), Catch::Contains("unsupported pre-tokenizer 'made-up'"));
}

TEST_CASE("special tokens are matched whole when parse_special is set") {
  TinyVocab t;
  t.merge("<", "|");
  const int32_t im_start = t.add("<|im_start|>", TokenType::control);
  const int32_t eot = t.add("<|endoftext|>", TokenType::control);
  const Tokenizer tok = t.build();
  const std::string text = "a<|im_start|>b<|endoftext|><|im_start|>";
  const std::vector<int32_t> ids = tok.encode(text, false, true);
  CHECK(ids == std::vector<int32_t>{byte_id('a'), im_start, byte_id('b'), eot, im_start});
  CHECK(tok.decode(ids) == text);
}

TEST_CASE("with parse_special off a control token is ordinary text") {
  TinyVocab t;
  const int32_t lt_bar = t.merge("<", "|");
  const int32_t im_start = t.add("<|im_start|>", TokenType::control);
  const Tokenizer tok = t.build();
  const std::vector<int32_t> ids = tok.encode("<|im_start|>", false, false);
  CHECK(std::find(ids.begin(), ids.end(), im_start) == ids.end());
  CHECK(ids.front() == lt_bar);
  CHECK(tok.decode(ids) == "<|im_start|>");
}

TEST_CASE("user-defined tokens are matched even with parse_special off") {
  TinyVocab t;
  const int32_t tool = t.add("<tool_call>", TokenType::user_defined);
  const std::vector<int32_t> ids = t.build().encode("x<tool_call>y", false, false);
  CHECK(ids == std::vector<int32_t>{byte_id('x'), tool, byte_id('y')});
}

TEST_CASE("overlapping special tokens: the leftmost match wins, then the longest") {
  TinyVocab t;
  const int32_t ab = t.add("<ab>", TokenType::control);
  const int32_t b_cd = t.add("b><cd>", TokenType::control);  // longer, but starts later
  const Tokenizer tok = t.build();
  CHECK(tok.encode("<ab><cd>", false, true) == std::vector<int32_t>{ab, '<', 'c', 'd', '>'});
  CHECK(tok.encode("x b><cd>", false, true) == std::vector<int32_t>{'x', ' ', b_cd});

  TinyVocab u;
  const int32_t short_one = u.add("<ab>", TokenType::control);
  const int32_t long_one = u.add("<ab><cd>", TokenType::control);
  const Tokenizer tok2 = u.build();
  CHECK(tok2.encode("<ab><cd>", false, true) == std::vector<int32_t>{long_one});
  CHECK(tok2.encode("<ab><c", false, true) == std::vector<int32_t>{short_one, '<', 'c'});
}

TEST_CASE("arbitrary bytes, including invalid UTF-8, round-trip exactly") {
  TinyVocab t;
  t.merge("\xC3", "\xA9");  // é
  t.merge(" ", "a");
  const Tokenizer tok = t.build();
  const std::vector<std::string> samples = {
      "\xFF\xFE\x80 abc \xC3\xA9\xC3", std::string("\0\x01\x02 \0 x", 7),
      "\xED\xA0\x80 surrogate", "\xF0\x9F\x98 truncated emoji", "overlong \xC0\xAF and \xE0\x80\xAF",
      "a\xF4\x90\x80\x80" "b",
  };
  for (const std::string& s : samples) CHECK(tok.decode(tok.encode(s, false, false)) == s);

  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    REQUIRE(tok.decode(tok.encode(s, false, true)) == s);
  }
}

TEST_CASE("StreamDecoder never emits part of an emoji split across tokens") {
  TinyVocab t;
  const int32_t head = t.merge("\xF0", "\x9F");  // 😀 = F0 9F 98 80, in two tokens
  const int32_t tail = t.merge("\x98", "\x80");
  const Tokenizer tok = t.build();
  std::vector<std::string> pieces;
  CHECK(stream_all(tok, {byte_id('a'), head, tail, byte_id('b')}, &pieces) == "a\xF0\x9F\x98\x80" "b");
  CHECK(pieces == std::vector<std::string>{"a", "", "\xF0\x9F\x98\x80", "b"});

  // A ZWJ family, one byte per token: each piece is whole characters only.
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
  pieces.clear();
  CHECK(stream_all(tok, byte_ids(family), &pieces) == family);
  for (const std::string& p : pieces) CHECK(sanitize_utf8(p) == p);
}

TEST_CASE("StreamDecoder replaces bytes that can never form a character") {
  TinyVocab t;
  const Tokenizer tok = t.build();
  StreamDecoder d(tok);
  CHECK(d.push(0xF0).empty());
  CHECK(d.pending_bytes() == 1);
  CHECK(d.push(byte_id('a')) == "\xEF\xBF\xBD" "a");  // the lead byte is followed by no continuation
  CHECK(d.push(0x80) == "\xEF\xBF\xBD");                 // a lone continuation byte
  CHECK(d.push(0xE2).empty());
  CHECK(d.push(0x82).empty());
  CHECK(d.finish() == "\xEF\xBF\xBD");  // E2 82 needs one more byte
  CHECK(d.pending_bytes() == 0);
}

TEST_CASE("ids out of range are reported, not read") {
  TinyVocab t;
  const Tokenizer tok = t.build();
  const std::vector<int32_t> bad = {1, 256};
  CHECK_THROWS_AS(tok.decode(bad), std::out_of_range);
  CHECK_THROWS_WITH(tok.token_text(-1), Catch::Contains("token id -1 is out of range"));
  CHECK_THROWS_AS(tok.token_bytes(1000), std::out_of_range);
  StreamDecoder d(tok);
  CHECK_THROWS_AS(d.push(9999), std::out_of_range);
  CHECK_FALSE(tok.is_end_of_generation(-5));
}

TEST_CASE("token_bytes undoes the byte-level mapping, and control tokens render as text") {
  TinyVocab t;
  t.merge("h", "i");
  const int32_t space_hi = t.merge(" ", "hi");
  const int32_t ctl = t.add("<|im_end|>", TokenType::control);
  const Tokenizer tok = t.build();
  CHECK(tok.token_text(' ') == "\xC4\xA0");  // Ġ
  CHECK(tok.token_bytes(' ') == " ");
  CHECK(tok.token_bytes(0) == std::string(1, '\0'));
  CHECK(tok.token_bytes(space_hi) == " hi");
  CHECK(tok.token_bytes(ctl) == "<|im_end|>");
  CHECK(tok.find_token("<|im_end|>") == ctl);
  CHECK(tok.find_token("absent") == kNoToken);
}

TEST_CASE("end of generation covers eos, eot and end-of-turn texts") {
  TinyVocab t;
  const int32_t eot_text = t.add("<|endoftext|>", TokenType::control);
  const int32_t im_end = t.add("<|im_end|>", TokenType::control);
  const int32_t im_start = t.add("<|im_start|>", TokenType::control);
  const int32_t custom_eos = t.add("</done>", TokenType::control);
  t.v.eos_id = custom_eos;
  t.v.bos_id = eot_text;
  const Tokenizer tok = t.build();
  CHECK(tok.is_end_of_generation(custom_eos));
  CHECK(tok.is_end_of_generation(eot_text));
  CHECK(tok.is_end_of_generation(im_end));
  CHECK_FALSE(tok.is_end_of_generation(im_start));
  CHECK_FALSE(tok.is_end_of_generation(byte_id('a')));
  CHECK(tok.end_of_generation_ids() == std::vector<int32_t>{eot_text, im_end, custom_eos});
  CHECK(tok.encode("a", true, false) == std::vector<int32_t>{eot_text, byte_id('a')});
}

TEST_CASE("an end-of-generation text the file calls a normal token is a control token, as llama.cpp makes it") {
  // Qwen2.5's "</s>" (id 128247) is NORMAL in its GGUF; llama.cpp parses it
  // as one special token and ends generation there
  // (tests/reference/check_tokenizer_oracle.py found the difference).
  TinyVocab t;
  const int32_t close = t.add("</s>", TokenType::normal);
  const int32_t other = t.add("<x>", TokenType::normal);
  const Tokenizer tok = t.build();
  CHECK(tok.encode("a</s>", false, true) == std::vector<int32_t>{byte_id('a'), close});
  CHECK(tok.encode("a</s>", false, false) != std::vector<int32_t>{byte_id('a'), close});  // text when not parsing specials
  CHECK(tok.is_end_of_generation(close));
  CHECK_FALSE(tok.is_end_of_generation(other));
  CHECK(tok.decode(std::vector<int32_t>{close}) == "</s>");
}

TEST_CASE("asking for a BOS the vocabulary lacks is an error") {
  TinyVocab t;
  CHECK_THROWS_WITH(t.build().encode("a", true, false), Catch::Contains("no BOS"));
}

TEST_CASE("an inconsistent vocabulary is rejected with a precise message") {
  TinyVocab t;
  t.merge("a", "b");
  SECTION("token types of the wrong length") {
    t.v.token_types.pop_back();
    CHECK_THROWS_WITH(t.build(), Catch::Contains("token_type") && Catch::Contains("entries"));
  }
  SECTION("a merge naming an unknown token") {
    t.v.merges.push_back("a zzz");
    CHECK_THROWS_WITH(t.build(), Catch::Contains("merge 1 'a zzz' names unknown token 'zzz'"));
  }
  SECTION("a merge without a separator") {
    t.v.merges.push_back("ab");
    CHECK_THROWS_WITH(t.build(), Catch::Contains("not of the form"));
  }
  SECTION("a special id out of range") {
    t.v.eos_id = 100000;
    CHECK_THROWS_WITH(t.build(), Catch::Contains("eos_token_id") && Catch::Contains("out of range"));
  }
  SECTION("a missing byte token") {
    t.v.tokens[0] = "not a byte";
    CHECK_THROWS_WITH(t.build(), Catch::Contains("no token for byte 0x00"));
  }
}

TEST_CASE("a SentencePiece vocabulary merges by score and falls back to bytes") {
  Vocabulary v;
  v.model = TokenizerModel::llama;
  const auto add = [&](std::string text, float score, TokenType type = TokenType::normal) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.token_types.push_back(type);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  const int32_t unk = add("<unk>", 0, TokenType::unknown);
  const int32_t bos = add("<s>", 0, TokenType::control);
  std::vector<int32_t> byte_tokens;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_tokens.push_back(add(name, 0, TokenType::byte));
  }
  const std::string sp = "\xE2\x96\x81";
  for (const char* c : {"h", "e", "l", "o", "w", "r", "d"}) add(c, -10);
  add(sp, -5);
  const int32_t he = add("he", -1), ll = add("ll", -2), hell = add("hell", -3), hello_sp = add(sp + "hello", -4);
  for (const char* prefix : {"h", "he", "hell"}) add(sp + prefix, -8);
  v.bos_id = bos, v.unk_id = unk, v.add_bos = true;
  const Tokenizer tok(v);

  const std::vector<int32_t> ids = tok.encode("hello", true, false);
  CHECK(ids == std::vector<int32_t>{bos, hello_sp});
  CHECK(tok.decode(ids) == "<s>hello");  // control tokens render; the prefixed space does not
  CHECK(tok.decode(std::span(ids).subspan(1)) == "hello");
  CHECK(tok.encode("<s>hello", false, true) == ids);  // a fragment after a special token gets the space too
  const std::vector<int32_t> odd = tok.encode("hellq", false, false);
  CHECK(odd.back() == byte_tokens['q']);
  CHECK(tok.decode(odd) == "hellq");
  (void)he, (void)ll, (void)hell;
}

TEST_CASE("load_vocabulary reads the tokenizer keys of a vocab-only GGUF") {
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  TinyVocab t;
  t.merge("a", "b");
  const int32_t end = t.add("<|endoftext|>", TokenType::control);
  std::vector<int32_t> types;
  for (const TokenType ty : t.v.token_types) types.push_back(static_cast<int32_t>(ty));
  w.set_string_array("tokenizer.ggml.tokens", t.v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", t.v.merges);
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(end));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template", "{{ messages }}");

  SECTION("a consistent file loads") {
    const std::vector<uint8_t> bytes = w.to_bytes();
    const Vocabulary v = load_vocabulary(GgufFile::parse(bytes, "tiny.gguf"));
    CHECK(v.tokens == t.v.tokens);
    CHECK(v.token_types == t.v.token_types);
    CHECK(v.merges == t.v.merges);
    CHECK(v.eos_id == end);
    CHECK(v.bos_id == kNoToken);
    CHECK(v.chat_template == "{{ messages }}");
    CHECK(Tokenizer(v).encode("ab", false, false).size() == 1);
  }
  SECTION("a token_type array of the wrong length") {
    types.pop_back();
    w.set_i32_array("tokenizer.ggml.token_type", types);
    const std::vector<uint8_t> bytes = w.to_bytes();
    CHECK_THROWS_WITH(load_vocabulary(GgufFile::parse(bytes, "tiny.gguf")),
                      Catch::Contains("tiny.gguf: tokenizer.ggml.token_type: has 257 entries"));
  }
  SECTION("a merge naming an unknown token") {
    w.set_string_array("tokenizer.ggml.merges", {"a q!"});
    const std::vector<uint8_t> bytes = w.to_bytes();
    CHECK_THROWS_WITH(load_vocabulary(GgufFile::parse(bytes, "tiny.gguf")),
                      Catch::Contains("tokenizer.ggml.merges: merge 0 'a q!' names unknown token 'q!'"));
  }
  SECTION("a special id out of range") {
    w.set_u32("tokenizer.ggml.bos_token_id", 5000);
    const std::vector<uint8_t> bytes = w.to_bytes();
    CHECK_THROWS_WITH(load_vocabulary(GgufFile::parse(bytes, "tiny.gguf")),
                      Catch::Contains("bos_token_id: token id 5000 is out of range"));
  }
  SECTION("no tokenizer model") {
    GgufWriter bare;
    bare.set_string("general.architecture", "qwen2");
    const std::vector<uint8_t> bytes = bare.to_bytes();
    CHECK_THROWS_WITH(load_vocabulary(GgufFile::parse(bytes, "bare.gguf")),
                      Catch::Contains("bare.gguf: tokenizer.ggml.model: missing"));
  }
  SECTION("an unsupported tokenizer model") {
    w.set_string("tokenizer.ggml.model", "bert");
    const std::vector<uint8_t> bytes = w.to_bytes();
    CHECK_THROWS_WITH(load_vocabulary(GgufFile::parse(bytes, "tiny.gguf")),
                      Catch::Contains("unsupported tokenizer model 'bert'"));
  }
}

TEST_CASE("the Qwen2 vocab-only fixture loads with its special tokens") {
  const Tokenizer& tok = qwen2();
  CHECK(tok.size() == 151936);
  CHECK(tok.vocabulary().pre == "qwen2");
  CHECK(tok.bos() == 151643);
  CHECK(tok.eos() == 151645);
  CHECK_FALSE(tok.add_bos_by_default());
  CHECK(tok.token_text(151644) == "<|im_start|>");
  CHECK(tok.token_type(151644) == TokenType::control);
  CHECK(tok.token_type(151657) == TokenType::user_defined);
  CHECK(tok.is_end_of_generation(151643));  // <|endoftext|>
  CHECK(tok.is_end_of_generation(151645));  // <|im_end|>
  CHECK_FALSE(tok.is_end_of_generation(151644));
}

TEST_CASE("the Qwen2 vocabulary encodes every reference case as HF tokenizers does") {
  const Tokenizer& tok = qwen2();
  const std::vector<ReferenceCase> cases = reference_cases();
  REQUIRE(cases.size() > 100);
  for (const ReferenceCase& c : cases) {
    INFO("text: " << c.text << " (parse_special " << c.parse_special << ")");
    const std::vector<int32_t> ids = tok.encode(c.text, false, c.parse_special);
    CHECK(ids == c.ids);
    CHECK(tok.decode(ids) == c.text);
    CHECK(stream_all(tok, ids, nullptr) == c.text);  // the corpus is valid UTF-8
  }
}

TEST_CASE("the Llama 3 and GPT-2 pre-tokenizers match HF tokenizers on the same vocabulary") {
  for (const std::string pre : {"llama-bpe", "gpt-2"}) {
    Vocabulary v = qwen2_vocabulary();
    v.pre = pre;
    const Tokenizer tok(std::move(v));
    const std::vector<ReferenceCase> cases = reference_cases("qwen2-tokens." + pre + ".tsv");
    REQUIRE(cases.size() > 100);
    for (const ReferenceCase& c : cases) {
      INFO("pre " << pre << ", text: " << c.text << " (parse_special " << c.parse_special << ")");
      CHECK(tok.encode(c.text, false, c.parse_special) == c.ids);
    }
  }
}

TEST_CASE("one tokenizer can encode from several threads at once") {
  const Tokenizer& tok = qwen2();
  const std::vector<ReferenceCase> cases = reference_cases();
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (const ReferenceCase& c : cases) mismatches[t] += tok.encode(c.text, false, c.parse_special) != c.ids;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("long runs of one character class do not exhaust the regex engine") {
  const Tokenizer& tok = qwen2();
  for (const std::string& s : {std::string(200000, ' '), std::string(100000, '\n'), std::string(200000, 'a'),
                               std::string(100000, '!') + std::string(1000, ' ') + "x"}) {
    CHECK(tok.decode(tok.encode(s, false, false)) == s);
  }
}

TEST_CASE("encoding 100 KB of English text is fast") {
  const Tokenizer& tok = qwen2();
  const std::string paragraph =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
      "it was the season of Darkness, it was the spring of hope, it was the winter of despair.\n";
  std::string text;
  for (int i = 0; text.size() < 100 * 1024; ++i) text += "Chapter " + std::to_string(i) + ". " + paragraph;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  WARN("encoded " << text.size() << " bytes into " << ids.size() << " tokens in " << ms << " ms");
  CHECK(tok.decode(ids) == text);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  CHECK(ms < 100);
#endif
}
