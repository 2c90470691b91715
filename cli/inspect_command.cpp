// troupe inspect: a GGUF file's metadata and tensor table.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "engine/gguf_file.h"

namespace troupe::cli {
namespace {

std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 117)) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return s.size() > 117 ? out + "..." : out;
}

std::string show(const GgufValue& v) {
  if (const auto* s = v.as_string()) return "\"" + one_line(*s) + "\"";
  if (const auto* a = v.as_array()) {
    std::string out = "[" + std::string(gguf_value_type_name(a->element_type)) + " x " + std::to_string(a->items.size());
    if (!a->items.empty()) out += ": " + show(a->items[0]) + (a->items.size() > 1 ? ", ..." : "");
    return out + "]";
  }
  if (auto b = v.as_bool()) return *b ? "true" : "false";
  if (v.type == GgufValueType::FLOAT32 || v.type == GgufValueType::FLOAT64) return std::to_string(*v.as_float());
  if (auto i = v.as_int()) return std::to_string(*i);
  return std::to_string(*v.as_uint());
}

int run_inspect(const std::string& path, bool tensors) {
  const GgufFile f = GgufFile::open(resolve_model(path));
  std::printf("file: %s\nGGUF version %u, %zu metadata keys, %zu tensors, alignment %llu, data at %llu\n\n",
              f.name().c_str(), f.version(), f.metadata().size(), f.tensors().size(),
              static_cast<unsigned long long>(f.alignment()), static_cast<unsigned long long>(f.data_offset()));
  for (const auto& kv : f.metadata()) std::printf("%-45s %s\n", kv.key.c_str(), show(kv.value).c_str());
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t params = 0;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[std::string(tensor_type_name(t.type))];
    ++e.first;
    e.second += t.n_bytes;
    params += static_cast<uint64_t>(t.n_elements);
  }
  std::printf("\n%.1f M parameters;", static_cast<double>(params) / 1e6);
  for (const auto& [name, e] : by_type) std::printf(" %s: %d tensors, %.1f MiB;", name.c_str(), e.first, e.second / 1048576.0);
  std::printf("\n");
  if (tensors) {
    std::printf("\n%-40s %-6s %-22s %12s\n", "tensor", "type", "shape", "offset");
    for (const auto& t : f.tensors()) {
      std::string shape;
      for (size_t i = 0; i < t.dims.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.dims[i]);
      std::printf("%-40s %-6s %-22s %12llu\n", t.name.c_str(), std::string(tensor_type_name(t.type)).c_str(),
                  shape.c_str(), static_cast<unsigned long long>(t.offset));
    }
  }
  return 0;
}

}  // namespace

Run add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto tensors = std::make_shared<bool>(true);
  CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensor table");
  cmd->add_option("file", *path, "GGUF path or model name")->required();
  cmd->add_flag("!--no-tensors", *tensors, "Omit the tensor table");
  return [path, tensors] { return run_inspect(*path, *tensors); };
}

}  // namespace troupe::cli
