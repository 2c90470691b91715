#include "engine/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace troupe {
namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void raw(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void string(const std::string& s) {
    raw<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment) out_.push_back(0);
  }
  void value(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::UINT8: raw<uint8_t>(static_cast<uint8_t>(*v.as_uint())); break;
      case GgufValueType::UINT16: raw<uint16_t>(static_cast<uint16_t>(*v.as_uint())); break;
      case GgufValueType::UINT32: raw<uint32_t>(static_cast<uint32_t>(*v.as_uint())); break;
      case GgufValueType::UINT64: raw<uint64_t>(*v.as_uint()); break;
      case GgufValueType::INT8: raw<int8_t>(static_cast<int8_t>(*v.as_int())); break;
      case GgufValueType::INT16: raw<int16_t>(static_cast<int16_t>(*v.as_int())); break;
      case GgufValueType::INT32: raw<int32_t>(static_cast<int32_t>(*v.as_int())); break;
      case GgufValueType::INT64: raw<int64_t>(*v.as_int()); break;
      case GgufValueType::FLOAT32: raw<float>(static_cast<float>(*v.as_float())); break;
      case GgufValueType::FLOAT64: raw<double>(*v.as_float()); break;
      case GgufValueType::BOOL: raw<uint8_t>(*v.as_bool() ? 1 : 0); break;
      case GgufValueType::STRING: string(*v.as_string()); break;
      case GgufValueType::ARRAY: {
        const GgufArray& a = *v.as_array();
        raw<uint32_t>(static_cast<uint32_t>(a.element_type));
        raw<uint64_t>(a.items.size());
        for (const auto& item : a.items) value(item);
        break;
      }
    }
  }

 private:
  std::vector<uint8_t>& out_;
};

GgufValue scalar(GgufValueType t, auto v) { return GgufValue{t, v}; }

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment) : version_(version), alignment_(alignment) {
  if (alignment != 32) set_u32("general.alignment", static_cast<uint32_t>(alignment));
}

void GgufWriter::set(std::string key, GgufValue value) {
  for (auto& kv : metadata_)
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  metadata_.push_back({std::move(key), std::move(value)});
}

void GgufWriter::set_u32(std::string key, uint32_t v) { set(std::move(key), scalar(GgufValueType::UINT32, uint64_t{v})); }
void GgufWriter::set_i32(std::string key, int32_t v) { set(std::move(key), scalar(GgufValueType::INT32, int64_t{v})); }
void GgufWriter::set_f32(std::string key, float v) { set(std::move(key), scalar(GgufValueType::FLOAT32, double{v})); }
void GgufWriter::set_bool(std::string key, bool v) { set(std::move(key), scalar(GgufValueType::BOOL, v)); }
void GgufWriter::set_string(std::string key, std::string v) {
  set(std::move(key), scalar(GgufValueType::STRING, std::move(v)));
}

void GgufWriter::set_string_array(std::string key, const std::vector<std::string>& v) {
  GgufArray a{GgufValueType::STRING, {}};
  a.items.reserve(v.size());
  for (const auto& s : v) a.items.push_back(scalar(GgufValueType::STRING, s));
  set(std::move(key), GgufValue{GgufValueType::ARRAY, std::move(a)});
}

void GgufWriter::set_i32_array(std::string key, const std::vector<int32_t>& v) {
  GgufArray a{GgufValueType::INT32, {}};
  a.items.reserve(v.size());
  for (int32_t x : v) a.items.push_back(scalar(GgufValueType::INT32, int64_t{x}));
  set(std::move(key), GgufValue{GgufValueType::ARRAY, std::move(a)});
}

void GgufWriter::set_f32_array(std::string key, const std::vector<float>& v) {
  GgufArray a{GgufValueType::FLOAT32, {}};
  a.items.reserve(v.size());
  for (float x : v) a.items.push_back(scalar(GgufValueType::FLOAT32, double{x}));
  set(std::move(key), GgufValue{GgufValueType::ARRAY, std::move(a)});
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> dims, TensorType type, std::vector<uint8_t> data) {
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  if (dims.empty() || static_cast<int64_t>(data.size()) != rows * row_bytes(type, dims[0]))
    throw std::invalid_argument("GgufWriter: tensor '" + name + "' data size does not match its shape");
  tensors_.push_back({std::move(name), std::move(dims), type, std::move(data)});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  size_t data_bytes = 0;
  for (const auto& t : tensors_) data_bytes += t.data.size() + alignment_;
  out.reserve(data_bytes + (1u << 16));  // one allocation for the tensors (and no GCC 12 stringop false positive)
  ByteSink sink(out);
  uint32_t magic;
  std::memcpy(&magic, "GGUF", 4);
  sink.raw<uint32_t>(magic);
  sink.raw<uint32_t>(version_);
  sink.raw<uint64_t>(tensors_.size());
  sink.raw<uint64_t>(metadata_.size());
  for (const auto& kv : metadata_) {
    sink.string(kv.key);
    sink.raw<uint32_t>(static_cast<uint32_t>(kv.value.type));
    sink.value(kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    sink.string(t.name);
    sink.raw<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.raw<uint64_t>(static_cast<uint64_t>(d));
    sink.raw<uint32_t>(static_cast<uint32_t>(t.type));
    sink.raw<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  sink.pad_to(alignment_);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    sink.pad_to(alignment_);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
}

}  // namespace troupe
