#include "engine/grammar/text_check.h"

#include <stdexcept>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex_to_gbnf.h"
#include "engine/grammar/stack_machine.h"

namespace troupe::grammar {

const char* check_kind_name(TextCheckKind kind) {
  switch (kind) {
    case TextCheckKind::none: return "none";
    case TextCheckKind::regex: return "regex";
    case TextCheckKind::contains: return "contains";
    case TextCheckKind::json_schema: return "json_schema";
  }
  return "unknown";
}

TextCheck::TextCheck(TextCheckKind kind, std::string text) : kind_(kind), text_(std::move(text)) {
  if (kind_ == TextCheckKind::none) return;
  if (text_.empty()) throw std::invalid_argument(std::string("an empty ") + check_kind_name(kind_) + " checks nothing");
  if (kind_ == TextCheckKind::regex) machine_ = std::make_unique<StackMachine>(compile_gbnf(regex_to_gbnf(text_)));
  if (kind_ == TextCheckKind::json_schema) validator_ = std::make_unique<SchemaValidator>(text_);
}

TextCheck::~TextCheck() = default;
TextCheck::TextCheck(TextCheck&&) noexcept = default;
TextCheck& TextCheck::operator=(TextCheck&&) noexcept = default;

bool TextCheck::passes(std::string_view text) {
  switch (kind_) {
    case TextCheckKind::none: return true;
    case TextCheckKind::contains: return text.find(text_) != std::string_view::npos;
    case TextCheckKind::json_schema: return validator_->validates(text);  // JSON allows surrounding whitespace
    case TextCheckKind::regex: break;
  }
  try {
    const StackMachine::State end = machine_->walk(machine_->start(), text);
    return end != StackMachine::kDead && machine_->accepts(end);
  } catch (const GrammarError&) {
    return false;  // the text drove the automaton past its bounds: not a sentence it can vouch for
  }
}

}  // namespace troupe::grammar
