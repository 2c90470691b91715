// The GGUF reader against well-formed files and a corpus of hostile ones:
// each hostile file gets one precise error, never a crash or a read outside
// the bytes (run under ASan to see the latter).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"

using namespace troupe;

namespace {

// Builds GGUF bytes field by field, so tests can write what no writer would.
struct RawGguf {
  std::vector<uint8_t> b;
  template <typename T>
  RawGguf& raw(T v) {
    auto p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  RawGguf& str(const std::string& s) {
    raw<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return raw(version).raw(n_tensors).raw(n_kv);
  }
  RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).raw<uint32_t>(4).raw(v); }
  RawGguf& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).raw<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (auto d : dims) raw(d);
    return raw(type).raw(offset);
  }
  RawGguf& pad(size_t align = 32) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes, "t.gguf");
  } catch (const GgufError& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> small_valid_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.set_f32_array("scores", {0.5f, -1.0f});
  w.set_bool("flag", true);
  std::vector<uint8_t> data(4 * 8 * sizeof(float));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  w.add_tensor("weight", {8, 4}, TensorType::F32, data);
  w.add_tensor("q8", {32, 2}, TensorType::Q8_0, std::vector<uint8_t>(68, 1));
  return w.to_bytes();
}

}  // namespace

TEST_CASE("a file written by the writer reads back with every field") {
  const auto bytes = small_valid_file();
  const GgufFile f = GgufFile::parse(bytes);
  CHECK(f.version() == 3);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_uint("llama.block_count") == 1u);
  CHECK(f.get_bool("flag") == true);
  CHECK(f.get_string_array("tokenizer.ggml.tokens") == std::vector<std::string>{"a", "b", "c"});
  CHECK(f.get_float_array("scores") == std::vector<double>{0.5, -1.0});
  REQUIRE(f.tensors().size() == 2);
  const auto* t = f.find_tensor("weight");
  REQUIRE(t);
  CHECK(t->dims == std::vector<int64_t>{8, 4});
  CHECK(t->n_bytes == 128);
  CHECK(f.tensor_data(*t)[5] == 5);
  CHECK(f.tensor_data(*t) - bytes.data() == static_cast<ptrdiff_t>(f.data_offset()));
  CHECK(f.find_tensor("q8")->offset % 32 == 0);
}

TEST_CASE("every scalar metadata type round-trips") {
  GgufWriter w;
  w.set("u8", {GgufValueType::UINT8, uint64_t{200}});
  w.set("i8", {GgufValueType::INT8, int64_t{-100}});
  w.set("u16", {GgufValueType::UINT16, uint64_t{60000}});
  w.set("i16", {GgufValueType::INT16, int64_t{-30000}});
  w.set("u64", {GgufValueType::UINT64, uint64_t{1} << 40});
  w.set("i64", {GgufValueType::INT64, int64_t{-1} << 40});
  w.set("f64", {GgufValueType::FLOAT64, 0.125});
  w.set_i32("i32", -7);
  const auto bytes = w.to_bytes();
  const GgufFile f = GgufFile::parse(bytes);
  CHECK(f.find("u8")->as_uint() == 200u);
  CHECK(f.find("i8")->as_int() == -100);
  CHECK(f.find("u16")->as_uint() == 60000u);
  CHECK(f.find("i16")->as_int() == -30000);
  CHECK(f.find("u64")->as_uint() == (uint64_t{1} << 40));
  CHECK(f.find("i64")->as_int() == -(int64_t{1} << 40));
  CHECK(f.find("f64")->as_float() == 0.125);
  CHECK(f.find("i32")->as_int() == -7);
  CHECK_FALSE(f.find("i32")->as_uint().has_value());
}

TEST_CASE("version 2 files are read and version 1 and 4 are refused") {
  RawGguf v2;
  v2.header(2, 0, 1).kv_u32("k", 9);
  CHECK(GgufFile::parse(v2.b).get_uint("k") == 9u);
  RawGguf v1, v4;
  v1.header(1, 0, 0);
  v4.header(4, 0, 0);
  CHECK_THAT(error_of(v1.b), Catch::Contains("version 1 is not supported"));
  CHECK_THAT(error_of(v4.b), Catch::Contains("unsupported GGUF version 4"));
}

TEST_CASE("a file with a bad magic is refused as not GGUF") {
  auto bytes = small_valid_file();
  bytes[0] = 'X';
  CHECK_THAT(error_of(bytes), Catch::Contains("bad magic"));
  CHECK_THAT(error_of({}), Catch::Contains("truncated while reading magic"));
}

TEST_CASE("every truncation of a valid file is refused without a crash") {
  const auto bytes = small_valid_file();
  // The writer pads after the last tensor; a cut inside that padding loses nothing.
  const GgufFile whole = GgufFile::parse(bytes);
  const auto& last = whole.tensors().back();
  const size_t end = whole.data_offset() + last.offset + last.n_bytes;
  for (size_t n = 0; n < end; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    const std::string err = error_of(cut);
    INFO("truncated at " << n);
    CHECK_FALSE(err.empty());
  }
}

TEST_CASE("random corruption never crashes the reader") {
  const auto bytes = small_valid_file();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    auto bad = bytes;
    for (int flips = 0; flips < 4; ++flips) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    error_of(bad);  // success or GgufError: both fine, anything else fails the test
  }
}

TEST_CASE("hostile headers each get their precise error") {
  SECTION("duplicate metadata key") {
    RawGguf g;
    g.header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2);
    CHECK_THAT(error_of(g.b), Catch::Contains("duplicate metadata key 'a'"));
  }
  SECTION("string longer than the file") {
    RawGguf g;
    g.header(3, 0, 1).raw<uint64_t>(1ull << 62).raw<uint32_t>(0).zeros(16);
    CHECK_THAT(error_of(g.b), Catch::Contains("metadata key claims length 4611686018427387904"));
  }
  SECTION("unknown value type") {
    RawGguf g;
    g.header(3, 0, 1).str("k").raw<uint32_t>(99).raw<uint32_t>(0);
    CHECK_THAT(error_of(g.b), Catch::Contains("key 'k': unknown value type 99"));
  }
  SECTION("array longer than the file") {
    RawGguf g;
    g.header(3, 0, 1).str("arr").raw<uint32_t>(9).raw<uint32_t>(4).raw<uint64_t>(1ull << 40);
    CHECK_THAT(error_of(g.b), Catch::Contains("key 'arr': array length 1099511627776 exceeds the file"));
  }
  SECTION("nested arrays too deep") {
    RawGguf g;
    g.header(3, 0, 1).str("n").raw<uint32_t>(9);
    for (int i = 0; i < 4; ++i) g.raw<uint32_t>(9).raw<uint64_t>(1);
    g.raw<uint32_t>(4).raw<uint64_t>(0).zeros(64);
    CHECK_THAT(error_of(g.b), Catch::Contains("arrays nested deeper than"));
  }
  SECTION("bool that is neither 0 nor 1") {
    RawGguf g;
    g.header(3, 0, 1).str("b").raw<uint32_t>(7).raw<uint8_t>(2);
    CHECK_THAT(error_of(g.b), Catch::Contains("bool value 2"));
  }
  SECTION("metadata count beyond the file") {
    RawGguf g;
    g.header(3, 0, 1000);
    CHECK_THAT(error_of(g.b), Catch::Contains("metadata count 1000 exceeds the file"));
  }
  SECTION("tensor count beyond any limit") {
    RawGguf g;
    g.header(3, 1ull << 40, 0);
    CHECK_THAT(error_of(g.b), Catch::Contains("tensor count 1099511627776 exceeds limit"));
  }
  SECTION("alignment that is not a power of two") {
    RawGguf g;
    g.header(3, 0, 1).kv_u32("general.alignment", 24);
    CHECK_THAT(error_of(g.b), Catch::Contains("general.alignment 24 is not a power of two"));
  }
}

TEST_CASE("hostile tensor tables each get their precise error") {
  auto one_tensor = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    RawGguf g;
    g.header(3, 1, 0).tensor("t", std::move(dims), type, offset).pad().zeros(data);
    return error_of(g.b);
  };
  CHECK(one_tensor({32, 2}, 0, 0, 256).empty());
  CHECK_THAT(one_tensor({32, 2}, 0, 0, 255), Catch::Contains("tensor 't': data [0, +256) lies outside the data section of 255 bytes"));
  CHECK_THAT(one_tensor({32, 2}, 0, 1ull << 60, 256), Catch::Contains("lies outside the data section"));
  CHECK_THAT(one_tensor({32, 2}, 0, 16, 256), Catch::Contains("offset 16 is not aligned to 32"));
  CHECK_THAT(one_tensor({1ull << 40, 1ull << 40}, 0, 0, 0), Catch::Contains("tensor 't': element count overflows"));
  CHECK_THAT(one_tensor({1ull << 61}, 0, 0, 0), Catch::Contains("tensor 't': byte size overflows"));
  CHECK_THAT(one_tensor({32, 0}, 0, 0, 0), Catch::Contains("tensor 't': dimension 1 is 0"));
  CHECK_THAT(one_tensor({2, 2, 2, 2, 2}, 0, 0, 0), Catch::Contains("tensor 't': 5 dimensions"));
  CHECK_THAT(one_tensor({32}, 77, 0, 32), Catch::Contains("tensor 't': unsupported tensor type 77"));
  CHECK_THAT(one_tensor({48}, 8, 0, 64), Catch::Contains("row of 48 is not a multiple of the Q8_0 block size 32"));

  RawGguf dup;
  dup.header(3, 2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).pad().zeros(64);
  CHECK_THAT(error_of(dup.b), Catch::Contains("duplicate tensor name 't'"));
}

TEST_CASE("typed accessors refuse values of the wrong type") {
  const auto bytes = small_valid_file();
  const GgufFile f = GgufFile::parse(bytes);
  CHECK_THROWS_WITH(f.get_string("llama.block_count"), Catch::Contains("expected a string"));
  CHECK_THROWS_WITH(f.get_int_array("tokenizer.ggml.tokens"), Catch::Contains("not an array of integers"));
  CHECK_FALSE(f.get_string("absent").has_value());
}

TEST_CASE("opening a missing file names the path and the reason") {
  CHECK_THROWS_WITH(GgufFile::open("/nonexistent/model.gguf"),
                    Catch::Contains("/nonexistent/model.gguf: cannot open: No such file or directory"));
}
