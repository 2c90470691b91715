#include "engine/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <new>
#include <string>

#include "engine/tokenizer.h"
#include "engine/unicode.h"

namespace troupe {
namespace {

// Pre-tokenizer patterns, as written in the models' tokenizer.json files.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int error) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(error, buffer.data(), buffer.size());
  return reinterpret_cast<const char*>(buffer.data());
}

// Scratch for matching. PCRE2's default 32 KiB JIT stack has been
// enough for every input tried (megabytes of one character class included),
// so a larger one is only made if a match ever reports running out.
struct MatchResources {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;

  explicit MatchResources(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)), context(pcre2_match_context_create(nullptr)) {
    if (!data || !context) {
      release();
      throw std::bad_alloc();
    }
  }
  MatchResources(const MatchResources&) = delete;
  MatchResources& operator=(const MatchResources&) = delete;
  ~MatchResources() { release(); }

  // False when the stack has already been grown: the failure is real.
  bool grow_stack() {
    if (stack) return false;
    stack = pcre2_jit_stack_create(256 * 1024, 64 * 1024 * 1024, nullptr);
    if (!stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, stack);
    return true;
  }
  void release() {  // each free function accepts null
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

}  // namespace

PreTokenizer pre_tokenizer_for(std::string_view pre) {
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") return {kGpt2Pattern, false};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {kQwen2Pattern, false};
  if (pre == "llama-bpe" || pre == "llama3") return {kLlama3Pattern, true};
  throw TokenizerError("tokenizer.ggml.pre: unsupported pre-tokenizer '" + std::string(pre) +
                       "' (supported: default, gpt-2, qwen2, deepseek-r1-qwen, llama-bpe)");
}

struct PreTokenizerRegex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

class PreTokenizerRegex::Scratch {
 public:
  explicit Scratch(const pcre2_code* code) : res(code) {}
  MatchResources res;
};

PreTokenizerRegex::PreTokenizerRegex(std::string_view pattern) : code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF lets arbitrary bytes through: ill-formed sequences
  // simply never match and end up in the gaps between matches.
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!code_->code)
    throw TokenizerError("pre-tokenizer regex does not compile at offset " + std::to_string(offset) + ": " +
                         pcre2_message(error));
  // Without JIT (unsupported CPU) the interpreter gives the same matches, slower.
  (void)pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

PreTokenizerRegex::~PreTokenizerRegex() = default;

PreTokenizerRegex::ScratchPtr PreTokenizerRegex::scratch() const { return ScratchPtr(new Scratch(code_->code)); }
void PreTokenizerRegex::ScratchDeleter::operator()(Scratch* s) const { delete s; }

void PreTokenizerRegex::split(Scratch& scratch, std::string_view text,
                              const std::function<void(size_t, size_t)>& emit) const {
  MatchResources& res = scratch.res;
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, emitted = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), pos, 0, res.data, res.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && res.grow_stack()) continue;
    if (rc < 0) throw TokenizerError("pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(res.data);
    const size_t begin = ov[0], end = ov[1];
    if (begin > emitted) emit(emitted, begin);
    if (end > begin) {
      emit(begin, end);
      emitted = pos = end;
    } else if (end < text.size()) {
      // An empty match (none of our patterns has one) must still advance.
      pos = end + std::max<size_t>(1, utf8_step(text, end).length);
    } else {
      break;
    }
  }
  if (emitted < text.size()) emit(emitted, text.size());
}

}  // namespace troupe
