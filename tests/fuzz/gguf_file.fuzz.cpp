// A model file as `troupe serve -m` meets it: parsed, then every reader a
// load runs (hyperparameters, weights bound by shape, the vocabulary and the
// tokenizer built from it). Any GgufError or TokenizerError is a refusal,
// which is fine; a crash, a sanitizer report or another exception is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

using namespace troupe;

namespace {

// Typed reads of every key, as the readers do with the keys they expect:
// a wrong type must come back as nullopt or GgufError, never as a bad read.
void read_every_key(const GgufFile& file) {
  for (const GgufKeyValue& kv : file.metadata()) {
    (void)file.get_string(kv.key);
    (void)file.get_uint(kv.key);
    (void)file.get_float(kv.key);
    (void)file.get_bool(kv.key);
    try {
      (void)file.get_string_array(kv.key);
    } catch (const GgufError&) {
    }
    try {
      (void)file.get_int_array(kv.key);
    } catch (const GgufError&) {
    }
    try {
      (void)file.get_float_array(kv.key);
    } catch (const GgufError&) {
    }
  }
}

// The bytes a tensor claims must lie inside the file the parser accepted.
void touch_tensors(const GgufFile& file) {
  uint8_t sum = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    const uint8_t* p = file.tensor_data(t);
    if (t.n_bytes > 0) sum ^= p[0] ^ p[t.n_bytes - 1];
  }
  volatile uint8_t sink = sum;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const GgufFile file = GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    read_every_key(file);
    touch_tensors(file);
    try {
      const ModelConfig config = read_model_config(file);
      (void)bind_weights(file, config);
    } catch (const GgufError&) {
    }
    const Tokenizer tokenizer(load_vocabulary(file));
    (void)tokenizer.encode("Hello, world! 123", tokenizer.bos() != kNoToken, true);
  } catch (const GgufError&) {
  } catch (const TokenizerError&) {
  }
  return 0;
}
