#include "cli/loaded_model.h"

#include <algorithm>
#include <thread>

#include "cli/model_path.h"
#include "engine/gguf_file.h"
#include "engine/vocabulary.h"

namespace troupe::cli {

int default_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

LoadedModel load_model(const std::string& name_or_path, int threads) {
  LoadedModel m;
  m.model = Model::load(resolve_model(name_or_path), threads);
  m.tokenizer = std::make_unique<Tokenizer>(load_vocabulary(m.model->file()));
  return m;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_path) {
  GgufFile file = GgufFile::open(resolve_model(name_or_path));
  return std::make_unique<Tokenizer>(load_vocabulary(file));
}

}  // namespace troupe::cli
