// The engine as a library: load a GGUF model, format a chat message, and
// stream a greedy answer to stdout.
//
//   generate_text MODEL.gguf "your question"
#include <cstdio>
#include <exception>

#include "engine/backend.h"
#include "engine/chat_template.h"
#include "engine/generator.h"
#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf \"question\"\n", argv[0]);
    return 2;
  }
  try {
    troupe::BackendOptions backend_options;  // the CPU; set .device = troupe::Device::cuda for a GPU
    backend_options.threads = 2;
    backend_options.kv_pages = 128;  // 128 pages x 16 tokens
    auto backend = troupe::open_backend(argv[1], backend_options);
    troupe::Tokenizer tokenizer(troupe::load_vocabulary(backend->file()));
    const auto format = troupe::detect_chat_format(tokenizer.vocabulary(), backend->config().architecture);
    const std::vector<troupe::ChatMessage> chat{{"user", argv[2]}};
    const auto prompt = tokenizer.encode(troupe::apply_chat_template(format, chat, true), false, true);

    troupe::GenerateOptions options;
    options.max_tokens = 128;
    options.sampling.temperature = 0.0f;  // greedy
    troupe::GenerateCallbacks callbacks;
    callbacks.on_text = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
    troupe::generate(*backend, tokenizer, prompt, options, callbacks);
    std::printf("\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
