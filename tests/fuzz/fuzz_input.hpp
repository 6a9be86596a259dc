// Shared by the libFuzzer targets: the loaders under test read paths, so each input is put in
// an in-memory file (memfd, no disk I/O) reached as /proc/self/fd/N, and a scratch folder in
// memory for targets that also write. Only brrr::Error may leave a loader: anything else (a
// std:: or nlohmann exception) escapes LLVMFuzzerTestOneInput and libFuzzer reports it as a
// crash, as it does for sanitizer reports, timeouts and allocations over -rss_limit_mb.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace fuzz {

/// An in-memory regular file whose contents are replaced per input.
class MemFile {
public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() { ::close(fd_); }

  /// Replaces the contents with `size` bytes and returns the path to open.
  const std::string& write(const void* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t off = 0;
    while (off < size) {
      ssize_t put = ::pwrite(fd_, p + off, size - off, static_cast<off_t>(off));
      if (put <= 0) std::abort();
      off += static_cast<std::size_t>(put);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

private:
  int fd_;
  std::string path_;
};

/// A folder for files a target writes: under /dev/shm when it exists (memory), else TMPDIR.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto d = base / ("brrr_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

/// Aborts with a message: an oracle of the target failed (libFuzzer saves the input).
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "fuzz oracle violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace fuzz
