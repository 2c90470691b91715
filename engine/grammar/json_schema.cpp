// JSON Schema to GBNF, fail closed (json_schema.h, docs/JSON_SCHEMA.md): the
// entry points, and the converter's reading of the document and its run.
// How the converter works: json_schema_converter.h.
#include "engine/grammar/json_schema.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar {

SchemaError::SchemaError(std::string keyword, std::string pointer, const std::string& why)
    : std::invalid_argument((pointer.empty() ? std::string("/") : pointer) + ": " + keyword + ": " + why),
      keyword_(std::move(keyword)),
      pointer_(std::move(pointer)) {}

namespace schema {

namespace {

// Deepest nesting of arrays and objects in JSON text (strings skipped), so a
// hostile schema is refused before anything recurses over it.
size_t json_nesting(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

bool mentions_ref(const ojson& j) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if ((k == "$ref" && v.is_string()) || mentions_ref(v)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (mentions_ref(v)) return true;
  }
  return false;
}

}  // namespace

Converter::Converter(std::string_view text, const SchemaLimits& limits, const SchemaOptions& options)
    : limits_(limits), exact_(options.exact), b_(limits.max_grammar_bytes) {
  layout_.exact = exact_;
  if (text.size() > limits.max_schema_bytes)
    throw SchemaError("limits", "", "the schema is " + std::to_string(text.size()) + " bytes; the limit is " +
                                        std::to_string(limits.max_schema_bytes));
  if (json_nesting(text) > static_cast<size_t>(4 * limits.max_depth + 16))
    throw SchemaError("limits", "", "the schema nests deeper than max_depth " + std::to_string(limits.max_depth) + " allows");
  try {
    doc_ = ojson::parse(text);
  } catch (const ojson::exception& e) {
    throw SchemaError("schema", "", std::string("not valid JSON: ") + e.what());
  }
  if (doc_.is_object()) {
    if (auto it = doc_.find("$schema"); it != doc_.end() && it->is_string()) {
      const std::string uri = it->get<std::string>();
      for (const char* old : {"draft-03", "draft-04", "draft-06", "draft-07"})
        if (uri.find(old) != std::string::npos) draft_ = Draft::up_to_7;
      legacy_id_ = uri.find("draft-03") != std::string::npos || uri.find("draft-04") != std::string::npos ||
                   draft_ == Draft::unknown;
      if (uri.find("2019-09") != std::string::npos || uri.find("2020-12") != std::string::npos) draft_ = Draft::from_2019;
    }
  }
  has_refs_ = mentions_ref(doc_);
}

std::string Converter::run() {
  const int32_t root = b_.reserve("root", "");
  sh_ = add_shared(b_, layout_);
  if (is_false(Node{&doc_, ""})) throw SchemaError("false", "", "the schema `false` accepts no value");
  memo_[&doc_] = root;
  b_.define(root, lower_body(Node{&doc_, ""}));
  try {
    return b_.emit(root);
  } catch (const BuildError& e) {
    switch (e.reason) {
      case BuildError::Reason::empty_language:
        throw SchemaError("unsatisfiable", e.origin, "no JSON value satisfies the schema");
      case BuildError::Reason::endless_recursion:
      case BuildError::Reason::left_recursion: throw SchemaError("$ref", e.origin, e.why);
      case BuildError::Reason::too_large: throw SchemaError("limits", e.origin, e.why);
    }
    throw;
  }
}

std::string Converter::object_only() {
  const int32_t root = b_.reserve("root", "");
  sh_ = add_shared(b_, layout_);
  b_.define(root, ref(sh_.object));
  return b_.emit(root);
}

}  // namespace schema

std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaLimits& limits, const SchemaOptions& options) {
  return schema::Converter(schema_json, limits, options).run();
}

std::string json_object_gbnf(const SchemaOptions& options) {
  static const std::string exact = schema::Converter("{}", SchemaLimits{}, SchemaOptions{true}).object_only();
  static const std::string generation = schema::Converter("{}", SchemaLimits{}, SchemaOptions{false}).object_only();
  return options.exact ? exact : generation;
}

std::string choice_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw std::invalid_argument("choice: at least one string is needed");
  std::vector<detail::Expr> alts;
  for (const std::string& c : choices) {
    try {
      detail::decode_utf8(c);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("choice: a string that is not valid UTF-8");
    }
    alts.push_back(detail::text(c));
  }
  detail::RuleBuilder b(size_t{64} << 20);
  const int32_t root = b.reserve("root");
  b.define(root, detail::alt(std::move(alts)));
  try {
    return b.emit(root);
  } catch (const detail::BuildError& e) {
    throw std::invalid_argument("choice: " + e.why);
  }
}

// Built in place: the converter keeps pointers into its own document, and
// a reference to its limits, which live here as long as it does.
struct SchemaValidator::Impl {
  Impl(std::string_view text, const SchemaLimits& l) : limits(l), c(text, limits, SchemaOptions{.exact = true}) {}
  SchemaLimits limits;
  schema::Converter c;
};

SchemaValidator::SchemaValidator(std::string_view schema_json, const SchemaLimits& limits)
    : impl_(std::make_unique<Impl>(schema_json, limits)) {
  impl_->c.read_whole();  // refuses now what it could not check exactly
}

SchemaValidator::~SchemaValidator() = default;
SchemaValidator::SchemaValidator(SchemaValidator&&) noexcept = default;
SchemaValidator& SchemaValidator::operator=(SchemaValidator&&) noexcept = default;

bool SchemaValidator::validates(std::string_view instance_json) {
  // Bounded as a schema is before anything recurses over it.
  if (schema::json_nesting(instance_json) > 256) return false;
  try {
    return impl_->c.validates(schema::ojson::parse(instance_json));
  } catch (const schema::ojson::exception&) {
    return false;
  } catch (const SchemaError&) {
    return false;  // nested past max_depth
  }
}

}  // namespace troupe::grammar
