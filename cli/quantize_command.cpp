// troupe quantize: convert a model's weight matrices to another format.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "engine/requantize.h"

namespace troupe::cli {

Run add_quantize(CLI::App& app) {
  struct Args {
    std::string in, out, type;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("quantize", "Convert a model's weight matrices to another format");
  cmd->add_option("input", a->in, "Model name or GGUF path")->required();
  cmd->add_option("output", a->out, "Output GGUF path")->required();
  cmd->add_option("--type", a->type, "F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K")->required();
  return [a] {
    auto type = tensor_type_from_name(a->type);
    if (!type || *type == TensorType::Q8_K) throw std::invalid_argument("unknown weight type '" + a->type + "'");
    const auto r = requantize_model(resolve_model(a->in), a->out, *type);
    std::fprintf(stderr, "wrote %s: %d tensors converted to %s, %d kept\n", a->out.c_str(), r.converted,
                 a->type.c_str(), r.kept);
    return 0;
  };
}

}  // namespace troupe::cli
