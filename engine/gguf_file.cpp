#include "engine/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace troupe {
namespace {

// Limits that no real model comes near; they bound the work a hostile header
// can make us do before the file size check would catch it.
constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKeyValues = 1u << 20;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayNesting = 2;

}  // namespace

struct GgufFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && size) munmap(addr, size);
  }
};

// Reads the header with a cursor that refuses to step past the end of the bytes.
class GgufParser {
 public:
  GgufParser(GgufFile& file, std::span<const uint8_t> bytes) : file_(file), bytes_(bytes) {}

  void parse() {
    read_preamble();
    uint64_t n_tensors = read_u64("tensor count");
    uint64_t n_kv = read_u64("metadata count");
    if (n_tensors > kMaxTensors) fail("tensor count " + std::to_string(n_tensors) + " exceeds limit");
    if (n_kv > kMaxKeyValues) fail("metadata count " + std::to_string(n_kv) + " exceeds limit");
    // Smallest encodings: a key-value is 13 bytes, a tensor info 33.
    const uint64_t left = bytes_.size() - pos_;
    if (n_kv > left / 13) fail("metadata count " + std::to_string(n_kv) + " exceeds the file");
    if (n_tensors > left / 33) fail("tensor count " + std::to_string(n_tensors) + " exceeds the file");
    read_metadata(n_kv);
    read_alignment();
    read_tensor_infos(n_tensors);
    place_data_section();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GgufError(file_.name_ + ": " + what);
  }

  void need(uint64_t n, const char* what) const {
    if (n > bytes_.size() - pos_)
      fail(std::string("truncated while reading ") + what + " at offset " + std::to_string(pos_) +
           " (need " + std::to_string(n) + " bytes, " + std::to_string(bytes_.size() - pos_) + " left)");
  }

  template <typename T>
  T read_raw(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t read_u32(const char* what) { return read_raw<uint32_t>(what); }
  uint64_t read_u64(const char* what) { return read_raw<uint64_t>(what); }

  std::string read_string(const char* what) {
    uint64_t len = read_u64(what);
    if (len > bytes_.size() - pos_)
      fail(std::string(what) + " claims length " + std::to_string(len) + " at offset " +
           std::to_string(pos_ - 8) + ", beyond the end of the file");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  void read_preamble() {
    need(4, "magic");
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) fail("bad magic (not a GGUF file)");
    pos_ = 4;
    file_.version_ = read_u32("version");
    if (file_.version_ == 1) fail("GGUF version 1 is not supported (only 2 and 3)");
    if (file_.version_ != 2 && file_.version_ != 3)
      fail("unsupported GGUF version " + std::to_string(file_.version_) + " (only 2 and 3)");
  }

  GgufValue read_value(GgufValueType type, const std::string& key, int depth) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufValueType::UINT8: v.value = uint64_t{read_raw<uint8_t>("value")}; break;
      case GgufValueType::UINT16: v.value = uint64_t{read_raw<uint16_t>("value")}; break;
      case GgufValueType::UINT32: v.value = uint64_t{read_raw<uint32_t>("value")}; break;
      case GgufValueType::UINT64: v.value = read_raw<uint64_t>("value"); break;
      case GgufValueType::INT8: v.value = int64_t{read_raw<int8_t>("value")}; break;
      case GgufValueType::INT16: v.value = int64_t{read_raw<int16_t>("value")}; break;
      case GgufValueType::INT32: v.value = int64_t{read_raw<int32_t>("value")}; break;
      case GgufValueType::INT64: v.value = read_raw<int64_t>("value"); break;
      case GgufValueType::FLOAT32: v.value = double{read_raw<float>("value")}; break;
      case GgufValueType::FLOAT64: v.value = read_raw<double>("value"); break;
      case GgufValueType::BOOL: {
        uint8_t b = read_raw<uint8_t>("value");
        if (b > 1) fail("key '" + key + "': bool value " + std::to_string(b) + " is not 0 or 1");
        v.value = b == 1;
        break;
      }
      case GgufValueType::STRING: v.value = read_string("string value"); break;
      case GgufValueType::ARRAY: v.value = read_array(key, depth + 1); break;
      default: fail("key '" + key + "': unknown value type " + std::to_string(static_cast<uint32_t>(type)));
    }
    return v;
  }

  static uint64_t min_encoded_size(GgufValueType t) {
    switch (t) {
      case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
      case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
      case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
      case GgufValueType::ARRAY: return 12;
      default: return 8;  // 64-bit scalars; strings carry at least their u64 length
    }
  }

  GgufArray read_array(const std::string& key, int depth) {
    if (depth > kMaxArrayNesting) fail("key '" + key + "': arrays nested deeper than " + std::to_string(kMaxArrayNesting));
    GgufArray a;
    uint32_t raw = read_u32("array type");
    if (raw > static_cast<uint32_t>(GgufValueType::FLOAT64))
      fail("key '" + key + "': unknown array element type " + std::to_string(raw));
    a.element_type = static_cast<GgufValueType>(raw);
    uint64_t count = read_u64("array length");
    // Each element takes at least min_encoded_size bytes: a count the rest of
    // the file cannot hold is rejected before anything is allocated for it.
    if (count > (bytes_.size() - pos_) / min_encoded_size(a.element_type))
      fail("key '" + key + "': array length " + std::to_string(count) + " exceeds the file");
    a.items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) a.items.push_back(read_value(a.element_type, key, depth));
    return a;
  }

  void read_metadata(uint64_t n_kv) {
    std::unordered_set<std::string> seen;
    file_.metadata_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = read_string("metadata key");
      if (key.empty()) fail("metadata entry " + std::to_string(i) + " has an empty key");
      if (!seen.insert(key).second) fail("duplicate metadata key '" + key + "'");
      uint32_t raw = read_u32("value type");
      if (raw > static_cast<uint32_t>(GgufValueType::FLOAT64))
        fail("key '" + key + "': unknown value type " + std::to_string(raw));
      GgufValue v = read_value(static_cast<GgufValueType>(raw), key, 0);
      file_.metadata_.push_back({std::move(key), std::move(v)});
    }
  }

  void read_alignment() {
    const GgufValue* a = file_.find("general.alignment");
    if (!a) return;
    auto n = a->as_uint();
    if (!n || a->type != GgufValueType::UINT32) fail("general.alignment must be a uint32");
    if (*n == 0 || (*n & (*n - 1)) != 0) fail("general.alignment " + std::to_string(*n) + " is not a power of two");
    file_.alignment_ = *n;
  }

  void read_tensor_infos(uint64_t n_tensors) {
    std::unordered_set<std::string> seen;
    file_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo t;
      t.name = read_string("tensor name");
      if (!seen.insert(t.name).second) fail("duplicate tensor name '" + t.name + "'");
      uint32_t n_dims = read_u32("tensor dimension count");
      if (n_dims == 0 || n_dims > kMaxDims)
        fail("tensor '" + t.name + "': " + std::to_string(n_dims) + " dimensions (1 to 4 supported)");
      int64_t elems = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t dim = read_u64("tensor dimension");
        if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          fail("tensor '" + t.name + "': dimension " + std::to_string(d) + " is " + std::to_string(dim));
        if (__builtin_mul_overflow(elems, static_cast<int64_t>(dim), &elems))
          fail("tensor '" + t.name + "': element count overflows");
        t.dims.push_back(static_cast<int64_t>(dim));
      }
      t.n_elements = elems;
      uint32_t raw_type = read_u32("tensor type");
      auto traits = tensor_type_traits(raw_type);
      if (!traits || raw_type == static_cast<uint32_t>(TensorType::Q8_K))
        fail("tensor '" + t.name + "': unsupported tensor type " + std::to_string(raw_type));
      t.type = static_cast<TensorType>(raw_type);
      if (t.dims[0] % traits->block_elems != 0)
        fail("tensor '" + t.name + "': row of " + std::to_string(t.dims[0]) + " is not a multiple of the " +
             std::string(traits->name) + " block size " + std::to_string(traits->block_elems));
      int64_t n_bytes = 0;
      if (__builtin_mul_overflow(elems / traits->block_elems, traits->block_bytes, &n_bytes))
        fail("tensor '" + t.name + "': byte size overflows");
      t.n_bytes = static_cast<uint64_t>(n_bytes);
      t.offset = read_u64("tensor offset");
      if (t.offset % file_.alignment_ != 0)
        fail("tensor '" + t.name + "': offset " + std::to_string(t.offset) + " is not aligned to " +
             std::to_string(file_.alignment_));
      file_.tensors_.push_back(std::move(t));
    }
  }

  void place_data_section() {
    uint64_t aligned = (pos_ + file_.alignment_ - 1) / file_.alignment_ * file_.alignment_;
    if (file_.tensors_.empty()) {
      file_.data_offset_ = std::min<uint64_t>(aligned, bytes_.size());
      return;
    }
    if (aligned > bytes_.size()) fail("truncated: the data section starts beyond the end of the file");
    file_.data_offset_ = aligned;
    const uint64_t data_size = bytes_.size() - aligned;
    for (const auto& t : file_.tensors_) {
      if (t.offset > data_size || t.n_bytes > data_size - t.offset)
        fail("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
             ") lies outside the data section of " + std::to_string(data_size) + " bytes");
    }
  }

  GgufFile& file_;
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  GgufParser(f, bytes).parse();
  return f;
}

GgufFile GgufFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(path + ": not a regular file");
  }
  auto mapping = std::make_unique<Mapping>();
  mapping->size = static_cast<size_t>(st.st_size);
  if (mapping->size > 0) {
    mapping->addr = mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd, 0);
    if (mapping->addr == MAP_FAILED) {
      mapping->addr = nullptr;
      ::close(fd);
      throw GgufError(path + ": mmap failed: " + std::strerror(errno));
    }
  }
  ::close(fd);
  // Weights are read front to back every step: ask the kernel to start
  // reading now rather than page-faulting through the first forward pass.
  if (mapping->addr) madvise(mapping->addr, mapping->size, MADV_WILLNEED);
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(mapping->addr), mapping->size);
  GgufFile f = parse(bytes, path);
  f.mapping_ = std::move(mapping);
  return f;
}

void GgufFile::release(const void* p, size_t n) const {
  if (!mapping_ || !mapping_->addr) return;
  const auto base = reinterpret_cast<uintptr_t>(mapping_->addr), begin = reinterpret_cast<uintptr_t>(p);
  if (begin < base || begin + n > base + mapping_->size) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page, last = (begin + n) / page * page;
  if (first < last) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : metadata_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (const std::string* s = v->as_string()) return *s;
  throw GgufError(name_ + ": key '" + std::string(key) + "' is " +
                  std::string(gguf_value_type_name(v->type)) + ", expected a string");
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto n = v->as_uint()) return n;
  throw GgufError(name_ + ": key '" + std::string(key) + "' is not a non-negative integer");
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto n = v->as_float()) return n;
  throw GgufError(name_ + ": key '" + std::string(key) + "' is not a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto b = v->as_bool()) return b;
  throw GgufError(name_ + ": key '" + std::string(key) + "' is not a bool");
}

namespace {
template <typename T, typename Convert>
std::optional<std::vector<T>> typed_array(const GgufFile& f, std::string_view key, const char* expected,
                                          Convert convert) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const GgufArray* a = v->as_array();
  if (!a) throw GgufError(f.name() + ": key '" + std::string(key) + "' is not an array");
  std::vector<T> out;
  out.reserve(a->items.size());
  for (const auto& item : a->items) {
    auto x = convert(item);
    if (!x) throw GgufError(f.name() + ": key '" + std::string(key) + "' is not an array of " + expected);
    out.push_back(std::move(*x));
  }
  return out;
}
}  // namespace

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  return typed_array<std::string>(*this, key, "strings", [](const GgufValue& v) -> std::optional<std::string> {
    if (const std::string* s = v.as_string()) return *s;
    return std::nullopt;
  });
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  return typed_array<int64_t>(*this, key, "integers", [](const GgufValue& v) { return v.as_int(); });
}

std::optional<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  return typed_array<double>(*this, key, "numbers", [](const GgufValue& v) { return v.as_float(); });
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& info) const {
  return bytes_.data() + data_offset_ + info.offset;
}

std::optional<uint64_t> GgufValue::as_uint() const {
  if (auto u = std::get_if<uint64_t>(&value)) return *u;
  if (auto i = std::get_if<int64_t>(&value); i && *i >= 0) return static_cast<uint64_t>(*i);
  return std::nullopt;
}

std::optional<int64_t> GgufValue::as_int() const {
  if (auto i = std::get_if<int64_t>(&value)) return *i;
  if (auto u = std::get_if<uint64_t>(&value); u && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(*u);
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (auto d = std::get_if<double>(&value)) return *d;
  if (auto u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
  if (auto i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (auto b = std::get_if<bool>(&value)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&value); }
const GgufArray* GgufValue::as_array() const { return std::get_if<GgufArray>(&value); }

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

}  // namespace troupe
