// troupe: an actor-model streaming LLM inference service. This is its command
// line; each subcommand lives in its own file.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <algorithm>
#include <map>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"troupe: streaming LLM inference"};
  app.require_subcommand(1);
  std::map<std::string, troupe::cli::Run> runs = {
      {"generate", troupe::cli::add_generate(app)},     {"tokenize", troupe::cli::add_tokenize(app)},
      {"detokenize", troupe::cli::add_detokenize(app)}, {"inspect", troupe::cli::add_inspect(app)},
      {"make-model", troupe::cli::add_make_model(app)}, {"logits", troupe::cli::add_logits(app)},
      {"pull", troupe::cli::add_pull(app)},         {"bench", troupe::cli::add_bench(app)},
      {"quantize", troupe::cli::add_quantize(app)},     {"serve", troupe::cli::add_serve(app)},
      {"complete", troupe::cli::add_complete(app)},     {"chat", troupe::cli::add_chat(app)},
      {"stats", troupe::cli::add_stats(app)},           {"worker", troupe::cli::add_worker(app)},
      {"sessions", troupe::cli::add_sessions(app)},     {"batch", troupe::cli::add_batch(app)},
      {"perplexity", troupe::cli::add_perplexity(app)}, {"store", troupe::cli::add_store(app)},
      {"keygen", troupe::cli::add_keygen(app)},         {"grammar", troupe::cli::add_grammar(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {  // a --config file (cli/serve_config): one line naming the key
    std::fprintf(stderr, "troupe: error: %s\n", e.what());
    return 1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
