#pragma once
// Converts a GGUF model's weight matrices to another format (`troupe
// quantize`): every 2-D tensor whose rows divide into the target's blocks is
// dequantized and quantized again; vectors (norms, biases) and tensors that do
// not fit stay as they are. Metadata is copied unchanged, with
// general.file_type dropped (it would describe the old mix).
#include <string>

#include "engine/tensor_type.h"

namespace troupe {

struct RequantizeReport {
  int converted = 0;
  int kept = 0;
};

RequantizeReport requantize_model(const std::string& in_path, const std::string& out_path, TensorType type);

}  // namespace troupe
