#pragma once
// Files the HTTP Batch API reads (PutFile, GetFile, ListFiles, DeleteFile;
// docs/HTTP.md, "Batches"), in the jobs family beside the jobs they feed:
//   'f' <file_id> → wire.FileInfo without its data (what listings read)
//   'c' <file_id> → the file's bytes
// Written in one synced batch, so a file acknowledged is on disk. Files are
// their owner's, as sessions and jobs are, and kept until deleted.
#include <cstdint>
#include <random>
#include <string>

#include "messages/client_frames.h"
#include "persistence/principal.h"
#include "persistence/store.h"

namespace troupe::persistence {

class FileBook {
 public:
  explicit FileBook(Store& store) : store_(store) {}
  // One file request's answer (the Request verified by the gate), as `who`;
  // `unix_ms`: now, stamped on a new file.
  messages::Bytes answer(const std::string& request, const Principal& who, int64_t unix_ms);

 private:
  Store& store_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace troupe::persistence
