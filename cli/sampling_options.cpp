#include "cli/sampling_options.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "messages/client_generated.h"

namespace troupe::cli {

void add_sampling_flags(CLI::App& cmd, SamplingOptions& o) {
  cmd.add_option("--max-tokens,-n", o.max_tokens, "Most tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--temperature,-t", o.params.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", o.params.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd.add_option("--top-p", o.params.top_p, "Nucleus: keep tokens up to this mass (1 = off)")->capture_default_str();
  cmd.add_option("--min-p", o.params.min_p, "Drop tokens below min-p times the top one")->capture_default_str();
  cmd.add_option("--repeat-penalty", o.params.repetition_penalty, "Divide logits of recent tokens (1 = off)");
  cmd.add_option("--presence-penalty", o.params.presence_penalty, "Subtract once per recent token");
  cmd.add_option("--frequency-penalty", o.params.frequency_penalty, "Subtract per occurrence of a recent token");
  cmd.add_option("--penalty-last-n", o.params.penalty_last_n, "How many recent tokens the penalties see");
  cmd.add_option("--seed", o.params.seed, "Random seed (same seed, same output)");
  cmd.add_option("--stop", o.stop, "Stop when this text appears (repeatable)");
  cmd.add_option("--accept-ratio", o.params.accept_ratio,
                 "Speculation on a greedy request: keep a drafted token at least this likely relative to the "
                 "model's top one (1 = exactly greedy; lower accepts more drafts)")
      ->check(CLI::Range(1e-6, 1.0));
  add_constraint_flags(cmd, o);
}

void add_constraint_flags(CLI::App& cmd, SamplingOptions& o) {
  auto* schema = cmd.add_option("--json-schema", o.json_schema_file,
                                "Constrain the output to JSON that validates against the JSON Schema in FILE")
                     ->check(CLI::ExistingFile);
  auto* grammar = cmd.add_option("--grammar", o.grammar_file, "Constrain the output to the GBNF grammar in FILE")
                      ->check(CLI::ExistingFile);
  auto* regex = cmd.add_option("--regex", o.regex, "Constrain the output to match this regular expression whole");
  auto* choice = cmd.add_option("--choice", o.choices, "Constrain the output to one of these strings (repeatable)");
  auto* json = cmd.add_flag("--json-object", o.json_object, "Constrain the output to a JSON object");
  for (CLI::Option* a : {schema, grammar, regex, choice, json})
    for (CLI::Option* b : {schema, grammar, regex, choice, json})
      if (a != b) a->excludes(b);
}

void add_tier_flags(CLI::App& cmd, SamplingOptions& o) {
  cmd.add_option("--tier", o.tier,
                 "On a server with model tiers: small, large, a tier's name, escalate, verify or auto "
                 "(default: the server's)");
  cmd.add_option("--escalate-threshold", o.escalate_threshold,
                 "--tier escalate: move to the next tier when the small tier's confidence falls below this (the "
                 "server's --escalate-hold says how it is measured)")
      ->check(CLI::Range(0.001, 0.999));
  cmd.add_option("--escalate-class", o.escalate_class,
                 "--tier escalate on a server with --escalate-budget: the workload class whose recent confidences "
                 "set this request's threshold (default: the job's, or the request's priority and length)");
  cmd.add_option("--kv-budget", o.kv_budget,
                 "KV positions this request keeps once its prompt is read, the rest evicted by attention (default: "
                 "the server's --kv-budget)")
      ->check(CLI::Range(0, 1 << 24));
}

messages::SamplingFields wire_sampling(const SamplingOptions& o) {
  messages::SamplingFields f;
  static_cast<SamplingParams&>(f) = o.params;
  f.max_tokens = o.max_tokens;
  f.stop = o.stop;
  f.tier = o.tier;
  f.escalate_threshold = o.escalate_threshold;
  f.escalate_class = o.escalate_class;
  f.kv_budget = o.kv_budget;
  f.constraint = constraint_of(o);
  return f;
}

namespace {

std::string read_constraint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) throw std::invalid_argument("cannot read " + path);
  return text.str();
}

}  // namespace

messages::ConstraintFields constraint_of(const SamplingOptions& o) {
  messages::ConstraintFields c;
  auto set = [&](wire::ConstraintKind kind, std::string text) {
    c.kind = static_cast<uint8_t>(kind);
    c.text = std::move(text);
  };
  if (!o.json_schema_file.empty()) set(wire::ConstraintKind::json_schema, read_constraint_file(o.json_schema_file));
  else if (!o.grammar_file.empty()) set(wire::ConstraintKind::grammar, read_constraint_file(o.grammar_file));
  else if (!o.regex.empty()) set(wire::ConstraintKind::regex, o.regex);
  else if (!o.choices.empty()) set(wire::ConstraintKind::choice, ""), c.choices = o.choices;
  else if (o.json_object) set(wire::ConstraintKind::json_object, "");
  return c;
}

}  // namespace troupe::cli
