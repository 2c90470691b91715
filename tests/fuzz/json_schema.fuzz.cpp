// Arbitrary bytes as a JSON Schema through the schema compiler a request's
// response_format reaches: lowered to GBNF (both profiles), then compiled.
//
// Properties: the converter either returns GBNF or throws SchemaError (a
// refusal naming a keyword) or std::invalid_argument; whatever GBNF it
// returns compiles (the converter never emits a grammar the engine refuses).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view schema(reinterpret_cast<const char*>(data), size);
  std::string gbnf;
  try {
    gbnf = grammar::json_schema_to_gbnf(schema);
  } catch (const std::invalid_argument&) {  // SchemaError among them
    return 0;
  }
  try {
    grammar::compile_gbnf(gbnf);
  } catch (const grammar::GrammarError& e) {
    fuzz::fail("the converter emitted a grammar the engine refuses:", e.what());
  }
  return 0;
}
