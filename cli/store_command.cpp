// `troupe store check|repair`: the offline tools for a damaged store
// (persistence/store_check.h). Run them while no `troupe serve` uses the
// directory; the server's lock on it refuses them otherwise.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "actors/service.h"
#include "cli/commands.h"
#include "persistence/store_check.h"

namespace troupe::cli {
namespace {

struct StoreArgs {
  std::string data_dir;
};

std::filesystem::path dir_of(const StoreArgs& a) {
  return a.data_dir.empty() ? actors::default_data_dir() : std::filesystem::path(a.data_dir);
}

int run_check(const StoreArgs& a) {
  const auto dir = dir_of(a);
  const persistence::StoreCheck c = persistence::check_store(dir);
  std::printf("store %s:", dir.c_str());
  for (const auto& f : c.families) std::printf(" %s %lld records,", f.name.c_str(), static_cast<long long>(f.records));
  std::printf(" %lld jobs and %lld sessions read whole\n", static_cast<long long>(c.jobs), static_cast<long long>(c.sessions));
  for (const auto& p : c.problems) std::printf("damaged: %s\n", p.c_str());
  if (c.ok()) {
    std::printf("ok\n");
    return 0;
  }
  std::printf("%zu problems; `troupe store repair --data-dir %s` keeps what can still be read (docs/OPERATIONS.md)\n",
              c.problems.size(), dir.c_str());
  return 2;
}

int run_repair(const StoreArgs& a) {
  const auto dir = dir_of(a);
  const persistence::RepairOutcome r = persistence::repair_store(dir);
  std::printf("repaired %s: %lld records kept, %lld damaged blocks stepped over%s; the damaged store is kept as %s\n",
              dir.c_str(), static_cast<long long>(r.records), static_cast<long long>(r.damaged_blocks),
              r.rebuilt_manifest ? ", its manifest rebuilt by RocksDB's RepairDB" : "", r.original.c_str());
  for (const auto& d : r.dropped) std::printf("left out, incomplete: %s\n", d.c_str());
  return 0;
}

}  // namespace

Run add_store(CLI::App& app) {
  auto a = std::make_shared<StoreArgs>();
  CLI::App* cmd = app.add_subcommand("store", "Check or repair the store of sessions and jobs (server stopped)");
  cmd->require_subcommand(1);
  CLI::App* check = cmd->add_subcommand("check", "Read every record; report damage (exit 2) and change nothing");
  CLI::App* repair = cmd->add_subcommand("repair", "Keep every record that can still be read (the original is kept aside)");
  for (CLI::App* sub : {check, repair})
    sub->add_option("--data-dir", a->data_dir, "The store's directory (default: troupe serve's)");
  return [a, check] { return check->parsed() ? run_check(*a) : run_repair(*a); };
}

}  // namespace troupe::cli
