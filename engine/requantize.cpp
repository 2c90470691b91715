#include "engine/requantize.h"

#include <stdexcept>
#include <vector>

#include "engine/cpu/quants.h"
#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"

namespace troupe {

RequantizeReport requantize_model(const std::string& in_path, const std::string& out_path, TensorType type) {
  if (type == TensorType::Q8_K) throw std::invalid_argument("Q8_K is an activation format");
  const GgufFile in = GgufFile::open(in_path);
  GgufWriter out(in.version() >= 2 ? 3 : in.version(), in.alignment());
  for (const auto& kv : in.metadata())
    if (kv.key != "general.file_type" && kv.key != "general.alignment") out.set(kv.key, kv.value);
  RequantizeReport report;
  const int64_t block = traits(type).block_elems;
  std::vector<float> row;
  for (const auto& t : in.tensors()) {
    const uint8_t* src = in.tensor_data(t);
    const int64_t cols = t.dims[0], rows = t.n_elements / cols;
    if (t.dims.size() != 2 || cols % block != 0 || t.type == type) {
      out.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(src, src + t.n_bytes));
      ++report.kept;
      continue;
    }
    const int64_t in_rb = row_bytes(t.type, cols), out_rb = row_bytes(type, cols);
    std::vector<uint8_t> data(static_cast<size_t>(rows * out_rb));
    row.resize(cols);
    for (int64_t r = 0; r < rows; ++r) {
      cpu::dequantize_row(t.type, src + r * in_rb, row.data(), cols);
      cpu::quantize_row(type, row.data(), data.data() + r * out_rb, cols);
    }
    out.add_tensor(t.name, t.dims, type, std::move(data));
    ++report.converted;
  }
  out.write(out_path);
  return report;
}

}  // namespace troupe
