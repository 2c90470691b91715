#include "cli/serve_config.h"

#include <CLI/CLI.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

namespace troupe::cli {
namespace {

// What a key's value must be in the file, from the option's CLI11 type.
enum class Kind { flag, integer, number, boolean, text };

Kind kind_of(const CLI::Option& op) {
  if (op.get_expected_min() == 0) return Kind::flag;
  const std::string full = op.get_type_name();
  const std::string base = full.substr(0, full.find(':'));
  if (base == "INT" || base == "UINT") return Kind::integer;
  if (base == "FLOAT") return Kind::number;
  if (base == "BOOLEAN") return Kind::boolean;
  return Kind::text;
}

bool takes_units(CLI::Option& op) {
  try {
    op.get_validator(kUnitsValidator);
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

bool takes_list(const CLI::Option& op) { return op.get_items_expected_max() > 1; }

std::string expected(Kind kind, bool units, bool list) {
  std::string e = kind == Kind::flag      ? "true or false"
                  : kind == Kind::integer ? "an integer"
                  : kind == Kind::number  ? "a number"
                  : kind == Kind::boolean ? "true or false"
                                          : "a string";
  if (units) e += " or a string with a unit";
  return list ? e + ", or an array of them" : e;
}

const char* toml_type(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

std::string shortest(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, ec == std::errc{} ? end : buf);
  // TOML floats need a fraction or an exponent (inf and nan are words).
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string (UTF-8 passes as it is).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(u));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + '"';
}

// One scalar of the file as CLI11 reads it from a command line; empty when
// its type is not the option's.
std::optional<std::string> scalar(const toml::node& n, Kind kind, bool units) {
  if (const auto* b = n.as_boolean(); b && (kind == Kind::flag || kind == Kind::boolean))
    return std::string(b->get() ? "true" : "false");
  if (const auto* i = n.as_integer(); i && (kind == Kind::integer || kind == Kind::number))
    return std::to_string(i->get());
  if (const auto* f = n.as_floating_point(); f && kind == Kind::number) return shortest(f->get());
  if (const auto* s = n.as_string(); s && (kind == Kind::text || (units && kind != Kind::flag))) return s->get();
  return std::nullopt;
}

CLI::ConfigError error(const std::string& where, const std::string& what) {
  return CLI::ConfigError(where + ": " + what, CLI::ExitCodes::ConfigError);
}

CLI::Option* find_option(CLI::App& cmd, std::string key) {
  if (key.empty() || key.front() == '-') return nullptr;
  CLI::Option* op = cmd.get_option_no_throw("--" + key);
  if (op == nullptr && key.find('_') != std::string::npos) {  // kv_tokens for kv-tokens
    std::replace(key.begin(), key.end(), '_', '-');
    op = cmd.get_option_no_throw("--" + key);
  }
  return op;
}

}  // namespace

void add_config_options(CLI::App& cmd, bool& print_config) {
  CLI::App* app = &cmd;
  cmd.add_option_function<std::string>(
         "--config", [app](const std::string& path) { apply_config_file(*app, path); },
         "Read options from this TOML file (keys: the long flags without --); flags given here win")
      ->type_name("FILE")
      ->configurable(false);
  bool* print = &print_config;
  cmd.add_flag_callback(
         "--print-config",
         [app, print] {
           *print = true;
           for (CLI::Option* op : app->get_options())
             if (op->get_required()) op->required(false);
         },
         "Print the configuration (file, flags and defaults) as TOML that --config reads, and exit")
      ->configurable(false);
}

void apply_config_file(CLI::App& cmd, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error(path, std::strerror(errno));
  toml::table file;
  try {
    file = toml::parse(in, path);
  } catch (const toml::parse_error& e) {
    throw error(path + ":" + std::to_string(e.source().begin.line) + ":" + std::to_string(e.source().begin.column),
                std::string(e.description()));
  }
  // The table is sorted by key; report what is wrong in the file's order.
  std::vector<std::pair<const toml::key*, const toml::node*>> items;
  for (const auto& [key, node] : file) items.emplace_back(&key, &node);
  std::sort(items.begin(), items.end(), [](const auto& x, const auto& y) {
    return x.first->source().begin.line < y.first->source().begin.line;
  });
  for (const auto& [k, node] : items) {
    const std::string key(k->str());
    const std::string where = path + ":" + std::to_string(k->source().begin.line);
    CLI::Option* op = find_option(cmd, key);
    if (op == nullptr || op->get_lnames().empty())
      throw error(where, "unknown key '" + key + "' (keys are `troupe " + cmd.get_name() +
                             " --help`'s long flags without --)");
    if (!op->get_configurable()) throw error(where, "'" + key + "' cannot be set in a config file");
    const Kind kind = kind_of(*op);
    const bool units = takes_units(*op), list = takes_list(*op);
    std::vector<std::string> inputs;
    const auto* array = node->as_array();
    if (array != nullptr && list) {
      for (const toml::node& element : *array) {
        auto value = scalar(element, kind, units);
        if (!value)
          throw error(where, key + ": expected " + expected(kind, units, list) + ", got an array holding " +
                                 toml_type(element));
        inputs.push_back(std::move(*value));
      }
    } else {
      auto value = scalar(*node, kind, units);
      if (!value) throw error(where, key + ": expected " + expected(kind, units, list) + ", got " + toml_type(*node));
      inputs.push_back(std::move(*value));
    }
    if (!op->empty()) continue;  // the command line gave it
    try {
      if (kind == Kind::flag)
        op->add_result(op->get_flag_value(key, inputs.front()));
      else
        op->add_result(inputs);
      op->run_callback();
    } catch (const CLI::ParseError& e) {
      std::string what = e.what();
      const std::string prefix = op->get_name() + ": ";  // "--kv-tokens: Value 10 not in range ..."
      if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
      throw error(where, key + ": " + what);
    }
  }
}

std::string config_toml(const CLI::App& cmd) {
  std::string out = "# troupe " + cmd.get_name() +
                    " --print-config: every key (a long flag without --) with its value; a key commented out\n"
                    "# is unset (the flag's default applies). Read by --config; flags given with it win.\n";
  for (const CLI::Option* op : cmd.get_options()) {
    if (!op->get_configurable() || op->get_lnames().empty()) continue;
    const std::string key = op->get_lnames().front();
    const Kind kind = kind_of(*op);
    std::vector<std::string> values = op->results();
    if (values.empty() && !op->get_default_str().empty()) values = {op->get_default_str()};
    if (kind == Kind::flag) {
      const bool on = !values.empty() && CLI::detail::to_flag_value(values.back()) > 0;
      out += key + " = " + (on ? "true" : "false") + "\n";
      continue;
    }
    if (values.empty()) {
      out += "# " + key + " =\n";
      continue;
    }
    std::vector<std::string> shown;
    for (const std::string& v : values) {
      int64_t i = 0;
      uint64_t u = 0;
      double d = 0;
      bool b = false;
      if (kind == Kind::integer && CLI::detail::lexical_cast(v, i))
        shown.push_back(std::to_string(i));
      else if (kind == Kind::integer && CLI::detail::lexical_cast(v, u))
        shown.push_back(std::to_string(u));
      else if (kind == Kind::number && CLI::detail::lexical_cast(v, d))
        shown.push_back(shortest(d));
      else if (kind == Kind::boolean && CLI::detail::lexical_cast(v, b))
        shown.push_back(b ? "true" : "false");
      else
        shown.push_back(quoted(v));
    }
    if (takes_list(*op)) {
      std::string joined;
      for (const std::string& s : shown) joined += (joined.empty() ? "" : ", ") + s;
      out += key + " = [" + joined + "]\n";
    } else {
      out += key + " = " + shown.back() + "\n";
    }
  }
  return out;
}

}  // namespace troupe::cli
