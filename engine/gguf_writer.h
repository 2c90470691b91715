#pragma once
// Writes GGUF files (the layout is drawn in gguf_file.h). Used by
// `troupe make-model` for synthetic models and by tests to build hostile files.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf_file.h"

namespace troupe {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  void set(std::string key, GgufValue value);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string(std::string key, std::string v);
  void set_string_array(std::string key, const std::vector<std::string>& v);
  void set_i32_array(std::string key, const std::vector<int32_t>& v);
  void set_f32_array(std::string key, const std::vector<float>& v);

  // dims[0] is the contiguous dimension; data holds row_bytes(type, dims[0]) per row.
  void add_tensor(std::string name, std::vector<int64_t> dims, TensorType type, std::vector<uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
  // Writes to path.tmp, then renames, so a reader never sees half a file.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    TensorType type;
    std::vector<uint8_t> data;
  };
  uint32_t version_;
  uint64_t alignment_;
  std::vector<GgufKeyValue> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace troupe
