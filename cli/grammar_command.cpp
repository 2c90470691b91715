// troupe grammar: what a constraint becomes, and the token masks it gives.
// Without --model it prints the GBNF a JSON Schema, regex or choice lowers
// to (or the refusal, naming the keyword); with --model it reads token
// prefixes on stdin and writes each one's allowed tokens (the differential
// test against llguidance and the structured-output benchmark use it).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "cli/sampling_options.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/matcher.h"
#include "engine/tokenizer.h"

namespace troupe::cli {
namespace {

struct GrammarArgs {
  SamplingOptions constraint;
  std::string model;
};

std::string base64(const std::vector<uint64_t>& words) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(words.data());  // little-endian: bit i of token i
  const size_t n = words.size() * sizeof(uint64_t);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (i + 1 < n ? uint32_t{bytes[i + 1]} << 8 : 0) | (i + 2 < n ? bytes[i + 2] : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// Each stdin line {"tokens": [...]}: the tokens taken from the grammar's
// start, then {"taken": how many it accepted, "allowed": count, "mask":
// base64 of the bitmask (bit t of byte t/8: token t), "can_end", "us": the
// mask's microseconds}.
int run_masks(const std::string& gbnf, const std::string& model) {
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(model);
  auto index = std::make_shared<grammar::GrammarIndex>(grammar::compile_gbnf(gbnf), grammar::token_trie_of(*tok));
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    const nlohmann::json in = nlohmann::json::parse(line, nullptr, false);
    if (in.is_discarded() || !in.contains("tokens") || !in["tokens"].is_array())
      throw std::invalid_argument("stdin line " + std::to_string(n) + " is not {\"tokens\": [...]}");
    grammar::Matcher m(index);
    int taken = 0;
    for (const auto& t : in["tokens"]) {
      if (!t.is_number_integer() || !m.accept(t.get<int32_t>())) break;
      ++taken;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto mask = m.allowed();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    const nlohmann::json out{{"taken", taken}, {"allowed", mask->count()}, {"mask", base64(mask->bits)},
                             {"can_end", m.can_end()}, {"us", us}};
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}

int run_grammar(const GrammarArgs& a) {
  const messages::ConstraintFields c = constraint_of(a.constraint);
  if (c.kind == 0) throw std::invalid_argument("give one of --json-schema, --grammar, --regex, --choice, --json-object");
  const std::string gbnf = grammar::constraint_gbnf({static_cast<grammar::ConstraintKind>(c.kind), c.text, c.choices});
  if (!a.model.empty()) return run_masks(gbnf, a.model);
  grammar::compile_gbnf(gbnf);  // what the server would refuse, refused here too
  std::fwrite(gbnf.data(), 1, gbnf.size(), stdout);
  if (!gbnf.empty() && gbnf.back() != '\n') std::printf("\n");
  return 0;
}

}  // namespace

Run add_grammar(CLI::App& app) {
  auto a = std::make_shared<GrammarArgs>();
  CLI::App* cmd = app.add_subcommand("grammar", "Print the GBNF a constraint compiles to, or (--model) the token masks "
                                                "it gives for token prefixes on stdin");
  add_constraint_flags(*cmd, a->constraint);
  cmd->add_option("--model,-m", a->model,
                  "Read {\"tokens\": [...]} lines on stdin and write each prefix's allowed tokens under this "
                  "model's vocabulary");
  return [a] { return run_grammar(*a); };
}

}  // namespace troupe::cli
