#pragma once
// A GGUF model file, memory-mapped and validated before anything is read from it.
//
// On-disk layout (little-endian), versions 2 and 3:
//
//   +--------------------+----------------------------------------------------+
//   | magic "GGUF"       | 4 bytes                                            |
//   | version            | u32 (2 or 3)                                       |
//   | n_tensors          | u64                                                |
//   | n_kv               | u64                                                |
//   | kv[n_kv]           | key: string, value_type: u32, value                |
//   | tensor_info[n_t]   | name: string, n_dims: u32, dims: u64[n_dims],      |
//   |                    | type: u32, offset: u64 (relative to data section)  |
//   | padding            | to `general.alignment` (default 32)                |
//   | data section       | tensors, each at an aligned offset                 |
//   +--------------------+----------------------------------------------------+
//   string = u64 length, bytes (no terminator)
//   array  = u32 element type, u64 count, elements
//
// Every length, count, offset and dimension is checked against the file size
// and against overflow before use; a bad file raises GgufError naming the
// problem and never reads outside the mapping.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/tensor_type.h"

namespace troupe {

class GgufError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

struct GgufValue;
struct GgufArray {
  GgufValueType element_type = GgufValueType::UINT8;
  std::vector<GgufValue> items;
};

struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  // Conversions that succeed only when the stored type fits.
  std::optional<uint64_t> as_uint() const;   // any non-negative integer
  std::optional<int64_t> as_int() const;     // any integer in range
  std::optional<double> as_float() const;    // any number
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the innermost (contiguous) dimension
  TensorType type = TensorType::F32;
  uint64_t offset = 0;  // from the start of the data section
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

class GgufFile {
 public:
  // Maps and parses a file. Throws GgufError("<path>: <problem>").
  static GgufFile open(const std::string& path);
  // Parses bytes already in memory (tests, fuzzing); the caller keeps them alive.
  static GgufFile parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }  // the whole file, as mapped
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Typed array accessors: nullopt if absent; GgufError if present with the wrong element type.
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Pointer to a tensor's bytes inside the mapping (valid while this object lives).
  const uint8_t* tensor_data(const GgufTensorInfo& info) const;
  // Lets the kernel drop the mapped pages wholly inside [p, p + n) from this
  // process (a copy lives elsewhere); reading them again faults them back in
  // from the file. No effect on files parsed from memory.
  void release(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::span<const uint8_t> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  friend class GgufParser;
};

}  // namespace troupe
