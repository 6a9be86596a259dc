// IDX files (the MNIST format) through zlib's gzread, which reads .gz and plain files alike.
module;
#include <zlib.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>
module brrr.data;
import brrr.tensor;

namespace brrr::data {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::io, "read_idx: " + path + ": " + what);
}

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() {
    if (f) gzclose(f);
  }
};

// Reads exactly n bytes or fails naming what was being read.
void read_exact(gzFile f, void* dst, std::size_t n, const std::string& path, const char* what) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : static_cast<unsigned>(n);
    int got = gzread(f, p, chunk);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      fail(path, std::string("corrupt data while reading the ") + what + " (" + (msg ? msg : "zlib error") + ")");
    }
    if (got == 0) fail(path, std::string("truncated: the file ends inside the ") + what);
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

}  // namespace

Tensor read_idx(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) fail(path, "no such file");
  GzFile file;
  file.f = gzopen(path.c_str(), "rb");
  if (!file.f) fail(path, "cannot open (" + std::string(std::strerror(errno)) + ")");
  unsigned char magic[4];
  read_exact(file.f, magic, 4, path, "magic number");
  if (magic[0] != 0 || magic[1] != 0)
    fail(path, "bad magic number (not an IDX file: the first two bytes must be 0)");
  if (magic[2] != 0x08) {
    static constexpr char hex[] = "0123456789abcdef";
    fail(path, std::string("unsupported IDX element type 0x") + hex[magic[2] >> 4] + hex[magic[2] & 0xF] +
                   " (only unsigned bytes, 0x08)");
  }
  int ndim = magic[3];
  if (ndim < 1 || ndim > 4) fail(path, "unsupported number of dimensions " + std::to_string(ndim));
  Shape dims(static_cast<std::size_t>(ndim));
  std::int64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    unsigned char b[4];
    read_exact(file.f, b, 4, path, "dimensions");
    dims[d] = (std::int64_t(b[0]) << 24) | (std::int64_t(b[1]) << 16) | (std::int64_t(b[2]) << 8) | b[3];
    if (dims[d] <= 0 || dims[d] > (1 << 28)) fail(path, "implausible dimension " + std::to_string(dims[d]));
    count *= dims[d];
    if (count > (std::int64_t(1) << 34)) fail(path, "dimensions describe more than 16 GiB of data");
  }
  // A plain file is sized up front. A compressed one cannot be: read it in chunks, so a lying
  // header fails on truncation instead of allocating what it claims.
  std::vector<unsigned char> bytes;
  if (gzdirect(file.f)) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const std::int64_t want = 4 + 4 * static_cast<std::int64_t>(ndim) + count;
    if (ec) fail(path, "cannot read its size (" + ec.message() + ")");
    if (static_cast<std::uint64_t>(want) != size)
      fail(path, "the file has " + std::to_string(size) + " bytes but its dimensions " + to_string(dims) + " need " +
                     std::to_string(want) + (size < static_cast<std::uint64_t>(want) ? " (truncated)" : " (trailing data)"));
    bytes.reserve(static_cast<std::size_t>(count));
  }
  constexpr std::size_t chunk = 1 << 20;
  for (std::int64_t done = 0; done < count;) {
    std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(chunk, count - done));
    bytes.resize(bytes.size() + n);
    read_exact(file.f, bytes.data() + done, n, path, "data (the header's dimensions promise more bytes)");
    done += static_cast<std::int64_t>(n);
  }
  // One more read: it must find the end. For a gzip file this is also where zlib checks the
  // trailer (CRC-32 and length) of a stream whose data ended exactly here.
  unsigned char extra;
  const int more = gzread(file.f, &extra, 1);
  if (more > 0) fail(path, "longer than its dimensions " + to_string(dims) + " say (trailing data)");
  int err = Z_OK;
  const char* msg = gzerror(file.f, &err);
  if (more < 0) fail(path, std::string("corrupt data after the last element (") + (msg ? msg : "zlib error") + ")");
  // zlib reports a gzip stream cut short (here: inside its 8-byte trailer) as Z_BUF_ERROR
  // with a clean end of file, not as a failed read.
  if (err == Z_BUF_ERROR) fail(path, "truncated: the gzip stream ends before its trailer (CRC-32 and length)");

  if (ndim == 1) {
    std::vector<std::int64_t> labels(bytes.begin(), bytes.end());
    return Tensor::from_vector(labels, dims);
  }
  std::vector<float> values(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) values[i] = static_cast<float>(bytes[i]) / 255.0f;
  return Tensor::from_vector(values, dims);
}

}  // namespace brrr::data
