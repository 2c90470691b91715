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
#include "cli/model_path.h"
#include "engine/chat_tools.h"
#include "engine/gguf_file.h"

namespace troupe::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  bool add_bos = false;
  bool special = false;
  bool json_lines = false;
  bool chat = false;
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

// A conversation in OpenAI's shape, as troupe writes its prompt: messages
// (an assistant's tool_calls, role "tool") and tools.
std::vector<ChatMessage> conversation(const nlohmann::ordered_json& in, ChatFormat format, std::vector<ToolSpec>& tools) {
  std::vector<ChatMessage> out;
  for (const auto& m : in.at("messages")) {
    ChatMessage cm{m.at("role").get<std::string>(), m.value("content", nlohmann::ordered_json("")).is_string()
                                                        ? m.value("content", std::string())
                                                        : std::string()};
    if (m.contains("tool_calls")) {
      std::vector<ToolCall> calls;
      for (const auto& c : m["tool_calls"]) {
        const auto& fn = c.contains("function") ? c["function"] : c;
        const auto& args = fn.at("arguments");
        calls.push_back({c.value("id", std::string()), fn.at("name").get<std::string>(),
                         args.is_string() ? args.get<std::string>() : args.dump()});
      }
      cm.content = assistant_text(format, cm.content, calls);
    }
    out.push_back(std::move(cm));
  }
  for (const auto& t : in.value("tools", nlohmann::ordered_json::array())) {
    ToolSpec spec;
    spec.name = t.at("function").at("name").get<std::string>();
    spec.json = t.dump();
    tools.push_back(std::move(spec));
  }
  return out;
}

// Each stdin line {"messages": [...], "tools": [...]} (OpenAI's shapes): the
// prompt troupe gives the model, {"text": ..., "ids": [...]}, as the server
// renders it (the reference test renders the GGUF's own Jinja template).
int run_chat_lines(const TokenizeArgs& a) {
  const GgufFile file = GgufFile::open(resolve_model(a.model));
  const Tokenizer tok(load_vocabulary(file));
  const ChatFormat format = detect_chat_format(tok.vocabulary(), file.get_string("general.architecture").value_or(""));
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    const nlohmann::ordered_json in = nlohmann::ordered_json::parse(line, nullptr, false);
    if (in.is_discarded() || !in.is_object() || !in.contains("messages"))
      throw std::invalid_argument("stdin line " + std::to_string(n) + " is not {\"messages\": [...], \"tools\": [...]}");
    std::vector<ToolSpec> tools;
    const std::vector<ChatMessage> plain = conversation(in, format, tools);
    const std::vector<ChatMessage> messages = with_tools(format, plain, tools, tok.vocabulary().chat_template);
    const nlohmann::json out{{"text", apply_chat_template(format, messages, true)},
                             {"ids", encode_chat(tok, format, messages, true)}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

int run_tokenize(const TokenizeArgs& a) {
  if (a.chat) return run_chat_lines(a);
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
  cmd->add_flag("--chat", a->chat,
                "Each stdin line is a conversation, {\"messages\": [...], \"tools\": [...]} in OpenAI's shapes; each "
                "output line is the prompt the server gives the model, {\"text\": ..., \"ids\": [...]}");
  return [a] { return run_tokenize(*a); };
}

Run add_detokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Token ids on stdin (space-separated) to text on stdout");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  return [a] { return run_detokenize(*a); };
}

}  // namespace troupe::cli
