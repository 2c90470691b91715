#include "persistence/store_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace troupe::persistence {

StoreLog::StoreLog(std::string dir, rocksdb::InfoLogLevel level) : rocksdb::Logger(level), path_(std::move(dir) + "/LOG") {
  std::lock_guard lock(mutex_);
  open_locked();
}

StoreLog::~StoreLog() { (void)StoreLog::CloseImpl(); }

void StoreLog::open_locked() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  struct stat st {};
  bytes_ = fd_ >= 0 && ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

void StoreLog::Logv(const char* format, va_list ap) {
  char line[1024];
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  gmtime_r(&now, &tm);
  size_t n = std::strftime(line, sizeof line, "%Y/%m/%d-%H:%M:%S ", &tm);
  va_list copy;
  va_copy(copy, ap);
  const int body = std::vsnprintf(line + n, sizeof line - n - 1, format, copy);
  va_end(copy);
  if (body < 0) return;
  n = std::min(sizeof line - 2, n + static_cast<size_t>(body));
  if (line[n - 1] != '\n') line[n++] = '\n';

  std::lock_guard lock(mutex_);
  if (bytes_ + static_cast<int64_t>(n) > kMaxBytes) {  // LOG becomes LOG.old, replacing the one before
    if (fd_ >= 0) ::close(fd_);
    (void)::rename(path_.c_str(), (path_ + ".old").c_str());
    open_locked();
  }
  if (fd_ < 0) open_locked();
  const ssize_t w = fd_ >= 0 ? ::write(fd_, line, n) : -1;
  if (w == static_cast<ssize_t>(n)) bytes_ += w;
  else dropped_.fetch_add(1);  // a full disk: the line is lost, nothing else
}

size_t StoreLog::GetLogFileSize() const {
  std::lock_guard lock(mutex_);
  return static_cast<size_t>(bytes_);
}

rocksdb::Status StoreLog::CloseImpl() {
  std::lock_guard lock(mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return rocksdb::Status::OK();
}

}  // namespace troupe::persistence
