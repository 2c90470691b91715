#pragma once
// Offline checks and repair of a store (`troupe store check|repair`), run
// while no `troupe serve` holds the directory:
//
//   check   verifies every block's checksum (a read-only open), reads every
//           record of every family, then decodes each stored job and session
//           as the server would. It reports what it read and every block or
//           record it could not, and changes nothing.
//   repair  copies every record it can read into a fresh store, stepping
//           over damaged blocks (only their records are lost), and puts it in
//           the directory's place; the damaged original is kept beside it as
//           DIR.damaged-<time>. A job or session that lost part of itself
//           is left out whole (it could not be resumed). A store that cannot
//           be opened at all (a
//           damaged manifest or log) first goes through RocksDB's RepairDB.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace troupe::persistence {

struct StoreCheck {
  struct FamilyCount {
    std::string name;
    int64_t records = 0;
  };
  std::vector<FamilyCount> families;
  int64_t jobs = 0, sessions = 0;  // decoded whole
  std::vector<std::string> problems;  // empty: the store is sound
  bool ok() const { return problems.empty(); }
};

StoreCheck check_store(const std::filesystem::path& dir);  // throws StoreError when it cannot be opened at all
struct RepairOutcome {
  int64_t records = 0;         // copied into the repaired store
  int64_t damaged_blocks = 0;  // stepped over
  bool rebuilt_manifest = false;
  std::vector<std::string> dropped;  // "job ID" / "session ID": incomplete, left out
  std::filesystem::path original;  // the damaged store, kept
};
RepairOutcome repair_store(const std::filesystem::path& dir);  // throws StoreError

}  // namespace troupe::persistence
