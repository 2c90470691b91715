// troupe tokenize / detokenize: text on stdin to ids on stdout, and back.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/loaded_model.h"

namespace troupe::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  bool add_bos = false;
  bool special = false;
  bool json_lines = false;
};

std::string read_stdin() { return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()}; }

// Many texts in one run (what a tokenizer test against another
// implementation needs): each stdin line a JSON string, each output line
// {"ids": [...], "text": the ids decoded}.
int run_tokenize_lines(const TokenizeArgs& a) {
  auto tok = load_tokenizer(a.model);
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json in;
    try {
      in = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw std::invalid_argument("stdin line " + std::to_string(n) + " is not JSON: " + e.what());
    }
    if (!in.is_string()) throw std::invalid_argument("stdin line " + std::to_string(n) + " is not a JSON string");
    const std::vector<int32_t> ids = tok->encode(in.get<std::string>(), a.add_bos, a.special);
    const nlohmann::json out{{"ids", ids}, {"text", tok->decode(ids)}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

int run_tokenize(const TokenizeArgs& a) {
  if (a.json_lines) return run_tokenize_lines(a);
  auto tok = load_tokenizer(a.model);
  const std::vector<int32_t> ids = tok->encode(read_stdin(), a.add_bos, a.special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_detokenize(const TokenizeArgs& a) {
  auto tok = load_tokenizer(a.model);
  std::istringstream in(read_stdin());
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v >= static_cast<long>(tok->size()))
      throw std::invalid_argument("'" + word + "' is not a token id of this model (0.." +
                                  std::to_string(tok->size() - 1) + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  const std::string text = tok->decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

Run add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Text on stdin to token ids on stdout (one line)");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path (a vocab-only GGUF works)")->required();
  cmd->add_flag("--bos", a->add_bos, "Prepend the BOS token");
  cmd->add_flag("--special", a->special, "Parse special tokens such as <|im_start|> in the text");
  cmd->add_flag("--json-lines", a->json_lines,
                "Each stdin line is a JSON string to tokenize on its own; each output line is {\"ids\": [...], "
                "\"text\": the ids decoded}");
  return [a] { return run_tokenize(*a); };
}

Run add_detokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Token ids on stdin (space-separated) to text on stdout");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  return [a] { return run_detokenize(*a); };
}

}  // namespace troupe::cli
