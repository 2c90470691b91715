#pragma once
// Buffers of the stored files the HTTP Batch API reads (messages/client.fbs):
// PutFile → FileInfo, GetFile → FileInfo (with its data when asked),
// ListFiles → FileList, DeleteFile → Ack.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "messages/client_frames.h"

namespace troupe::messages {

struct FileFields {
  std::string file_id;
  int64_t bytes = 0;
  int64_t created_ms = 0;
  std::string filename, purpose, owner;
};

Bytes put_file_request(uint64_t id, std::string_view purpose, std::string_view filename, std::string_view data);
Bytes get_file_request(uint64_t id, std::string_view file_id, bool content);
Bytes list_files_request(uint64_t id);
Bytes delete_file_request(uint64_t id, std::string_view file_id);

// `data`: the file's content (GetFile with content), else empty.
Bytes file_info_response(uint64_t id, const FileFields& file, std::string_view data = {});
Bytes file_list_response(uint64_t id, std::span<const FileFields> files);
FileFields read_file_info(const wire::FileInfo* f);

}  // namespace troupe::messages
