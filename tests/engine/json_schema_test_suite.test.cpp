// The official JSON Schema Test Suite (draft 7, Debian's json-schema-test-suite)
// against json_schema_to_gbnf's exact profile: each group's schema is converted or refused,
// and where converted, every test's data must match the grammar exactly when
// it is valid. No group may be half right: a mismatch is a wrong grammar.
//
// Declared properties have one order in the grammar (their declared one), so
// a valid instance counts as accepted when some order of its members is; an
// invalid one must be refused in every order. The table printed here is the
// one in docs/JSON_SCHEMA.md.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

using namespace troupe::grammar;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxOrderings = 5000;
// The suite checks validity in any spelling: the exact profile.
const SchemaOptions kExact{true};

// Serializations of `v` (compact, as dump() writes them) with the members of
// each object in every order, up to kMaxOrderings.
std::vector<std::string> orderings(const ojson& v) {
  auto product = [](const std::vector<std::vector<std::string>>& parts, const std::string& open, const std::string& close) {
    std::vector<std::string> out{open};
    for (size_t i = 0; i < parts.size(); ++i) {
      std::vector<std::string> next;
      for (const std::string& prefix : out)
        for (const std::string& p : parts[i])
          if (next.size() < kMaxOrderings) next.push_back(prefix + (i ? "," : "") + p);
      out = std::move(next);
    }
    for (std::string& s : out) s += close;
    return out;
  };
  if (v.is_array()) {
    std::vector<std::vector<std::string>> items;
    for (const ojson& x : v) items.push_back(orderings(x));
    return product(items, "[", "]");
  }
  if (!v.is_object()) return {v.dump()};
  std::vector<std::pair<std::string, std::vector<std::string>>> members;
  for (const auto& [k, x] : v.items()) members.emplace_back(ojson(k).dump() + ":", orderings(x));
  std::vector<size_t> order(members.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<std::string> out;
  do {
    std::vector<std::vector<std::string>> parts;
    for (size_t i : order) {
      std::vector<std::string> p;
      for (const std::string& value : members[i].second) p.push_back(members[i].first + value);
      parts.push_back(std::move(p));
    }
    for (std::string& s : product(parts, "{", "}"))
      if (out.size() < kMaxOrderings) out.push_back(std::move(s));
  } while (out.size() < kMaxOrderings && std::next_permutation(order.begin(), order.end()));
  return out;
}

// 1.0 and the like: JSON Schema calls them integers, the grammar does not
// (docs/JSON_SCHEMA.md), so the tests holding one are counted.
bool has_integral_float(const ojson& v) {
  if (v.is_number_float()) return v.get<double>() == std::floor(v.get<double>());
  if (v.is_structured())
    for (const ojson& x : v)
      if (has_integral_float(x)) return true;
  return false;
}

struct Counts {
  int groups = 0, refused_groups = 0, tests = 0, refused_tests = 0;
  int valid_accepted = 0, valid_reordered = 0, invalid_rejected = 0, mismatches = 0, integral_floats = 0;
  std::set<std::string> refused_keywords;

  void add(const Counts& o) {
    groups += o.groups, refused_groups += o.refused_groups, tests += o.tests, refused_tests += o.refused_tests;
    valid_accepted += o.valid_accepted, valid_reordered += o.valid_reordered, invalid_rejected += o.invalid_rejected;
    mismatches += o.mismatches, integral_floats += o.integral_floats;
    refused_keywords.insert(o.refused_keywords.begin(), o.refused_keywords.end());
  }
};

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "-" : out;
}

ojson draft7(ojson schema);

void run_group(const ojson& group, const std::string& file, Counts& c) {
  ++c.groups;
  const ojson schema = draft7(group["schema"]);
  std::shared_ptr<const Grammar> g;
  try {
    g = compile_gbnf(json_schema_to_gbnf(schema.dump(), {}, kExact));
  } catch (const SchemaError& e) {
    ++c.refused_groups;
    c.refused_tests += static_cast<int>(group["tests"].size());
    c.refused_keywords.insert(e.keyword());
    return;
  } catch (const GrammarError& e) {
    ++c.mismatches;
    std::cout << "MISMATCH " << file << " / " << group["description"].get<std::string>()
              << ": the grammar does not compile: " << e.what() << "\n";
    return;
  }
  for (const ojson& t : group["tests"]) {
    ++c.tests;
    const bool valid = t["valid"].get<bool>();
    if (has_integral_float(t["data"])) ++c.integral_floats;
    bool ok = false;
    if (matches(*g, t["data"].dump())) {
      ok = valid;
      if (valid) ++c.valid_accepted;
    } else {
      const std::vector<std::string> texts = orderings(t["data"]);
      const bool some = std::any_of(texts.begin(), texts.end(), [&](const std::string& s) { return matches(*g, s); });
      ok = some == valid;
      if (valid && some) ++c.valid_reordered;
      if (!valid && !some) ++c.invalid_rejected;
    }
    if (!ok) {
      ++c.mismatches;
      std::cout << "MISMATCH " << file << " / " << group["description"].get<std::string>() << " / "
                << t["description"].get<std::string>() << ": data " << t["data"].dump() << " valid " << valid
                << "\n  schema " << schema.dump() << "\n  grammar:\n" << json_schema_to_gbnf(schema.dump(), {}, kExact) << "\n";
    }
  }
}

// The suite's draft 7 files, sorted; none (and a warning) where it is not installed.
std::vector<fs::path> suite_files() {
  const char* env = std::getenv("TROUPE_JSON_SCHEMA_SUITE");
  const fs::path dir = env ? env : "/usr/share/json-schema-test-suite/tests/draft7";
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) {
    WARN("skipped: " << dir << " is missing (Debian package json-schema-test-suite)");
    return files;
  }
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE_FALSE(files.empty());
  return files;
}

ojson draft7(ojson schema) {
  // The suite's draft is 7: said where the schema has room to say it.
  if (schema.is_object() && !schema.contains("$schema")) schema["$schema"] = "http://json-schema.org/draft-07/schema#";
  return schema;
}

}  // namespace

TEST_CASE("the JSON Schema Test Suite's draft 7 groups are converted exactly or refused",
          "[json_schema][json_schema_suite]") {
  const std::vector<fs::path> files = suite_files();
  if (files.empty()) return;

  std::map<std::string, Counts> by_file;
  Counts total;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    const ojson groups = ojson::parse(in);
    Counts& c = by_file[f.filename().string()];
    for (const ojson& group : groups) run_group(group, f.filename().string(), c);
    total.add(c);
  }

  std::cout << "\n| keyword file | groups | refused | tests run | valid accepted (reordered) | invalid rejected | "
               "mismatches | refused for |\n|---|---:|---:|---:|---:|---:|---:|---|\n";
  auto row = [](const std::string& name, const Counts& c) {
    std::cout << "| " << name << " | " << c.groups << " | " << c.refused_groups << " | " << c.tests << " | "
              << c.valid_accepted + c.valid_reordered << " (" << c.valid_reordered << ") | " << c.invalid_rejected
              << " | " << c.mismatches << " | " << joined(c.refused_keywords) << " |\n";
  };
  for (const auto& [name, c] : by_file) row(name, c);
  row("**total**", total);
  std::cout << "\nTests not run (their group refused): " << total.refused_tests
            << ". Tests whose data holds an integral float such as 1.0: " << total.integral_floats << ".\n\n";
  CHECK(total.tests > 0);
  REQUIRE(total.mismatches == 0);
}

TEST_CASE("the validator of a job's check agrees with the JSON Schema Test Suite on every group it takes, in any "
          "member order",
          "[json_schema][json_schema_suite]") {
  const std::vector<fs::path> files = suite_files();
  if (files.empty()) return;
  int groups = 0, taken = 0, tests = 0, mismatches = 0;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    for (const ojson& group : ojson::parse(in)) {
      ++groups;
      std::optional<SchemaValidator> v;
      try {
        v.emplace(draft7(group["schema"]).dump());
      } catch (const SchemaError&) {
        continue;  // refused as a constraint would be
      }
      ++taken;
      for (const ojson& t : group["tests"]) {
        ++tests;
        if (v->validates(t["data"].dump()) == t["valid"].get<bool>()) continue;
        ++mismatches;
        std::cout << "MISMATCH " << f.filename().string() << " / " << group["description"].get<std::string>() << " / "
                  << t["description"].get<std::string>() << ": data " << t["data"].dump() << "\n";
      }
    }
  }
  std::cout << "validator: " << taken << " of " << groups << " groups taken, " << tests << " tests, " << mismatches
            << " mismatches\n";
  CHECK(tests > 0);
  CHECK(mismatches == 0);
}
