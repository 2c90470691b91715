#pragma once
// A model with its tokenizer, as the commands that run one need them.
#include <memory>
#include <string>

#include "engine/model.h"
#include "engine/tokenizer.h"

namespace troupe::cli {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

LoadedModel load_model(const std::string& name_or_path, int threads);
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_path);
int default_threads();

}  // namespace troupe::cli
