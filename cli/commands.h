#pragma once
// Each subcommand registers its options on the CLI11 app and returns the
// function that runs it. main.cpp wires them and turns errors into one line.
#include <functional>

namespace CLI {
class App;
}

namespace troupe::cli {

using Run = std::function<int()>;

Run add_generate(CLI::App& app);
Run add_tokenize(CLI::App& app);
Run add_detokenize(CLI::App& app);
Run add_inspect(CLI::App& app);
Run add_make_model(CLI::App& app);
Run add_logits(CLI::App& app);
Run add_pull(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_quantize(CLI::App& app);
Run add_serve(CLI::App& app);
Run add_complete(CLI::App& app);
Run add_chat(CLI::App& app);
Run add_stats(CLI::App& app);
Run add_worker(CLI::App& app);
Run add_sessions(CLI::App& app);
Run add_batch(CLI::App& app);
Run add_perplexity(CLI::App& app);
Run add_store(CLI::App& app);
Run add_keygen(CLI::App& app);
Run add_grammar(CLI::App& app);

}  // namespace troupe::cli
