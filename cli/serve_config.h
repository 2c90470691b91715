#pragma once
// A TOML config file for a subcommand (`troupe serve --config troupe.toml`):
// every option with a long name is a key, the name without `--`
// (`kv-tokens = 32768`, `no-prefix-cache = true`), read with TOML's types.
// Options given on the command line win over the file; an unknown key, a
// wrong type or a refused value is one line naming the key (CLI::ConfigError,
// which main.cpp prints as `troupe: error: ...`).
//
// CLI11 2.1.2 reads a config file only for the top-level app (`set_config` on
// a subcommand is silently ignored), so the file is applied here, from the
// callback of `--config`, before CLI11 checks required options.
#include <string>

namespace CLI {
class App;
}

namespace troupe::cli {

// The name of a transform that reads a number with a unit (`24h`, `20G`):
// an integer option carrying it may also be given a string in the file.
inline constexpr const char* kUnitsValidator = "units";

// Adds `--config FILE` and `--print-config` (sets print_config and makes
// required options optional, for they may be unset while one looks).
void add_config_options(CLI::App& cmd, bool& print_config);

// Reads a TOML file into cmd's options that the command line did not set.
void apply_config_file(CLI::App& cmd, const std::string& path);

// cmd's options as TOML that `--config` reads back: every key in the order of
// --help, with its value or its default; keys with neither are commented out.
std::string config_toml(const CLI::App& cmd);

}  // namespace troupe::cli
