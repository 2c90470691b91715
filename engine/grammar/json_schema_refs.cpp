// Keywords checked, and $ref resolved within the document
// (json_schema_converter.h).
#include <cctype>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

namespace {

// Whether `$ref`'s siblings say nothing (annotations and definitions only).
bool ref_alone(const ojson& s) {
  for (const auto& [k, v] : s.items())
    if (k != "$ref" && !is_annotation(k)) return false;
  return true;
}

// A URI fragment is %-encoded ("#/percent%25field").
std::string percent_decoded(const std::string& s, const std::string& ref, const std::string& at) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      throw SchemaError("$ref", at, "'" + ref + "': a malformed %-escape");
    out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

// One JSON Pointer token, ~1 and ~0 decoded.
std::string pointer_token(const std::string& raw, const std::string& ref, const std::string& at) {
  std::string token;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '~') {
      token += raw[i];
    } else if (i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
      token += raw[++i] == '0' ? '~' : '/';
    } else {
      throw SchemaError("$ref", at, "'" + ref + "': a malformed ~-escape");
    }
  }
  return token;
}

}  // namespace

void Converter::check_keywords(const Node& n) const {
  for (const auto& [k, v] : n.s->items()) {
    if (supported_keywords().count(k)) continue;
    if (auto it = refused_keywords().find(k); it != refused_keywords().end()) throw SchemaError(k, n.ptr, it->second);
    if (const std::string near = misspelt(k); !near.empty())
      throw SchemaError(k, n.ptr, "not a keyword, but so close to '" + near +
                                      "' that it is taken for a misspelling of it (a validator would ignore it)");
    // Other keywords are annotations; an identifier in a subschema moves
    // the base that references resolve against.
    // (A fragment, "#name", names the subschema in the same document.)
    const bool identifier = (k == "$id" || (k == "id" && legacy_id_)) && v.is_string() &&
                            !(v.get_ref<const std::string&>().size() > 0 && v.get_ref<const std::string&>()[0] == '#');
    if (identifier && !n.ptr.empty() && has_refs_)
      throw SchemaError(k, n.ptr, "an embedded " + k + " changes what $ref resolves against; it is not supported");
  }
}

// Whether this schema's $ref stands for the whole schema (draft 7 ignores
// its siblings; later drafts apply them too).
bool Converter::ref_replaces(const Node& n) const {
  const ojson& s = *n.s;
  if (!s.contains("$ref")) return false;
  if (ref_alone(s) || draft_ == Draft::up_to_7) return true;
  if (draft_ == Draft::unknown)
    throw SchemaError("$ref", n.ptr,
                      "keywords beside $ref mean different things in draft 7 (ignored) and 2019-09 on (applied); "
                      "say which with $schema");
  return false;
}

Node Converter::resolve(const Node& n) const {
  const ojson& r = (*n.s)["$ref"];
  const std::string at = n.ptr + "/$ref";
  if (!r.is_string()) throw SchemaError("$ref", at, "must be a string");
  const std::string ref = r.get<std::string>();
  if (ref.empty() || ref[0] != '#')
    throw SchemaError("$ref", at, "'" + ref + "': only references within the schema (#/...) are supported");
  const std::string pointer = percent_decoded(ref.substr(1), ref, at);
  if (!pointer.empty() && pointer[0] != '/')
    throw SchemaError("$ref", at, "'" + ref + "': named anchors are not supported; use a JSON Pointer (#/...)");
  const ojson* cur = &doc_;
  for (size_t pos = 0; pos < pointer.size();) {
    const size_t next = std::min(pointer.find('/', pos + 1), pointer.size());
    const std::string token = pointer_token(pointer.substr(pos + 1, next - pos - 1), ref, at);
    const bool index = cur->is_array() && !token.empty() && token.size() < 10 &&
                       token.find_first_not_of("0123456789") == std::string::npos && std::stoul(token) < cur->size();
    if (cur->is_object() && cur->contains(token)) cur = &(*cur)[token];
    else if (index) cur = &(*cur)[std::stoul(token)];
    else throw SchemaError("$ref", at, "'" + ref + "' points to nothing in the schema");
    pos = next;
  }
  return Node{cur, pointer};
}

}  // namespace troupe::grammar::schema
