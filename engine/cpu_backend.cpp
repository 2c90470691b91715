#include "engine/cpu_backend.h"

#include <string>

namespace troupe {

CpuBackend::CpuBackend(std::unique_ptr<Model> model, int32_t kv_pages, int32_t page_size)
    : model_(std::move(model)), cache_(model_->config(), kv_pages, page_size) {}

std::string CpuBackend::describe() const {
  return "cpu, " + std::to_string(model_->pool().size()) + " threads, KV " +
         std::to_string(cache_.pool().capacity()) + " pages x " + std::to_string(cache_.page_size()) + " tokens";
}

}  // namespace troupe
