// Files: read whole, write atomically, and map read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "pdserve/core/status.h"

namespace pdserve {

Result<std::string> read_file(const std::string& path);
// Writes to path.tmp then renames, so readers never see half a file.
Status write_file(const std::string& path, const void* data, size_t size);
inline Status write_file(const std::string& path, const std::string& s) { return write_file(path, s.data(), s.size()); }
bool file_exists(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// A read-only memory mapping that unmaps itself. Movable, not copyable.
class MappedFile {
 public:
  MappedFile() = default;
  static Result<MappedFile> open(const std::string& path);
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace pdserve
