#pragma once
// The CPU engine behind the Backend interface: a Model and its host KvCache.
#include <memory>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

namespace troupe {

class CpuBackend final : public Backend {
 public:
  // local_pages > 0: a sliding-window model's local layers keep that many
  // pages apart (engine/kv_cache.h); 0 keeps every layer in every page.
  CpuBackend(std::unique_ptr<Model> model, int32_t kv_pages, int32_t page_size, KvType kv_type = KvType::f16,
             int32_t local_pages = 0);

  const ModelConfig& config() const override { return model_->config(); }
  const GgufFile& file() const override { return model_->file(); }
  PagePool& pages() override { return cache_.pool(); }
  int32_t page_size() const override { return cache_.page_size(); }
  std::string describe() const override;
  void forward(const Batch& batch, Logits& out) override { model_->forward(batch, cache_, out); }
  bool can_copy_pages() const override { return true; }
  void copy_pages(std::span<const PageCopy> copies) override {
    for (const PageCopy& c : copies) cache_.copy_page(c.src, c.dst);
  }

  bool can_transfer_pages() const override { return true; }
  void read_page(int32_t page, std::span<uint16_t> keys, std::span<uint16_t> values) const override;
  void write_page(int32_t page, std::span<const uint16_t> keys, std::span<const uint16_t> values) override;
  KvType kv_type() const override { return cache_.type(); }
  std::string read_page_bytes(int32_t page) const override;
  void write_page_bytes(int32_t page, std::string_view bytes) override;
  bool can_shift_kv() const override { return true; }
  bool can_evict_kv() const override { return model_->config().sliding_window == 0; }
  void evict_kv(const KvEviction& eviction) override;
  std::vector<uint64_t> expert_tokens() const override { return model_->expert_totals(); }
  void shift_kv(std::span<const KvShift> shifts) override;

  Model& model() { return *model_; }
  KvCache& cache() { return cache_; }

 private:
  void move_slot(int32_t src_page, int32_t src_slot, int32_t dst_page, int32_t dst_slot, int32_t delta, float* k);

  std::unique_ptr<Model> model_;
  KvCache cache_;
};

}  // namespace troupe
