#pragma once
// Models are named by short names (qwen2.5-coder-0.5b) or by path. Installed
// models live in $TROUPE_HOME/models/NAME.gguf (default ~/.cache/troupe).
#include <string>

namespace troupe::cli {

std::string troupe_home();
// A path that exists as given, or the installed model of that name; throws
// with a hint to install it otherwise.
std::string resolve_model(const std::string& name_or_path);

}  // namespace troupe::cli
