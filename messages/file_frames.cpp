#include "messages/file_frames.h"

#include <vector>

namespace troupe::messages {
namespace {

flatbuffers::Offset<wire::FileInfo> build_file(flatbuffers::FlatBufferBuilder& fbb, const FileFields& f,
                                               std::string_view data) {
  const auto id = fbb.CreateString(f.file_id);
  const auto name = fbb.CreateString(f.filename);
  const auto purpose = fbb.CreateString(f.purpose);
  const auto owner = f.owner.empty() ? 0 : fbb.CreateString(f.owner);
  const auto bytes =
      data.empty() ? 0 : fbb.CreateVector(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  return wire::CreateFileInfo(fbb, id, f.bytes, f.created_ms, name, purpose, owner, bytes);
}

}  // namespace

Bytes put_file_request(uint64_t id, std::string_view purpose, std::string_view filename, std::string_view data) {
  flatbuffers::FlatBufferBuilder fbb(256 + filename.size() + data.size());
  const auto p = fbb.CreateString(purpose.data(), purpose.size());
  const auto n = fbb.CreateString(filename.data(), filename.size());
  const auto d = fbb.CreateVector(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  return request_bytes(id, wire::RequestBody::PutFile, wire::CreatePutFile(fbb, p, n, d).Union(), fbb);
}

Bytes get_file_request(uint64_t id, std::string_view file_id, bool content) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto f = fbb.CreateString(file_id.data(), file_id.size());
  return request_bytes(id, wire::RequestBody::GetFile, wire::CreateGetFile(fbb, f, content).Union(), fbb);
}

Bytes list_files_request(uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return request_bytes(id, wire::RequestBody::ListFiles, wire::CreateListFiles(fbb).Union(), fbb);
}

Bytes delete_file_request(uint64_t id, std::string_view file_id) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto f = fbb.CreateString(file_id.data(), file_id.size());
  return request_bytes(id, wire::RequestBody::DeleteFile, wire::CreateDeleteFile(fbb, f).Union(), fbb);
}

Bytes file_info_response(uint64_t id, const FileFields& file, std::string_view data) {
  flatbuffers::FlatBufferBuilder fbb(256 + data.size());
  const auto f = build_file(fbb, file, data);
  return response_bytes(id, wire::ResponseBody::FileInfo, f.Union(), fbb);
}

Bytes file_list_response(uint64_t id, std::span<const FileFields> files) {
  flatbuffers::FlatBufferBuilder fbb(128 + 128 * files.size());
  std::vector<flatbuffers::Offset<wire::FileInfo>> list;
  for (const auto& f : files) list.push_back(build_file(fbb, f, {}));
  const auto v = fbb.CreateVector(list.data(), list.size());
  return response_bytes(id, wire::ResponseBody::FileList, wire::CreateFileList(fbb, v).Union(), fbb);
}

FileFields read_file_info(const wire::FileInfo* f) {
  FileFields out;
  if (!f) return out;
  if (f->file_id()) out.file_id = f->file_id()->str();
  out.bytes = f->bytes();
  out.created_ms = f->created_ms();
  if (f->filename()) out.filename = f->filename()->str();
  if (f->purpose()) out.purpose = f->purpose()->str();
  if (f->owner()) out.owner = f->owner()->str();
  return out;
}

}  // namespace troupe::messages
