// safetensors reader and writer (brrr.io). Format (Hugging Face safetensors, also what the
// Python/Rust reference reads and writes): an 8-byte little-endian u64 header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {str: str}} (padded with spaces to a multiple of 8), then the data buffer.
// Offsets are relative to the start of the buffer; tensors are contiguous, little-endian,
// row-major. The loader treats the file as hostile: every size is checked against the file
// before anything is allocated or read, and the header is validated as strictly as the
// reference loader does (known dtype, non-negative shape, sizes matching the offsets, ranges
// tiling the buffer exactly with no gaps or overlaps).
//
// Checksums: the format has none, so brrr stores CRC-32s (zlib's) in the one place other
// readers ignore, "__metadata__" strings. "brrr.crc32" (the record) holds a compact JSON
// object {tensor name: 8 hex digits, ..., "__metadata__": 8 hex digits}; a tensor's CRC
// covers its name, dtype, shape and bytes, the "__metadata__" CRC the other metadata strings.
// "brrr.crc32.record" holds the record's own CRC, so that a corrupted byte in either key's
// name leaves the other one alone: an incomplete record is an error, never a file that
// silently loads unverified. CRC-32 detects every error burst of up to 32 bits, so a single
// corrupted byte anywhere is an Error naming the file (and the tensor, for a byte of a tensor's
// data or header entry), except a padding space turned into other JSON whitespace, which
// changes nothing that is loaded. Files without the keys (other writers) load unverified.
module;
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>
module brrr.io;
import brrr.tensor;

namespace brrr::io {

static_assert(std::endian::native == std::endian::little,
              "brrr.io writes host bytes as-is: safetensors is little-endian");

namespace {

using json = nlohmann::json;

constexpr std::uint64_t kMaxHeader = 100'000'000;  // as the reference loader
constexpr int kMaxJsonDepth = 16;                  // a valid header nests 3 deep
constexpr const char* kChecksumKey = "brrr.crc32";  // in "__metadata__", see the top of the file
constexpr const char* kRecordCrcKey = "brrr.crc32.record";

const char* st_name(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

std::optional<DType> st_dtype(const std::string& s) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64,
                  DType::boolean})
    if (s == st_name(d)) return d;
  return std::nullopt;
}

[[noreturn]] void fail(const char* op, const std::string& path, const std::string& problem) {
  throw Error(ErrorKind::io, std::string(op) + ": " + path + ": " + problem);
}

std::string errno_text() { return std::strerror(errno); }

/// Closes a POSIX file descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// Reads exactly n bytes at offset; false on a short read (truncated file) or an error.
bool read_exact(int fd, void* dst, std::uint64_t n, std::uint64_t offset) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30));
    ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (got == 0) {
      errno = 0;
      return false;
    }
    p += got;
    n -= static_cast<std::uint64_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* src, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  while (n > 0) {
    ssize_t put = ::write(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (put < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

std::uint32_t crc_update(std::uint32_t crc, const void* data, std::size_t n) {
  if (n == 0) return crc;  // zlib returns 0 for a null buffer, whatever the running CRC
  return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

/// CRC-32 of what identifies a tensor: name, dtype and shape (each dim as 8 little-endian
/// bytes); continued over the tensor's bytes it is the tensor's checksum.
std::uint32_t crc_of_identity(const std::string& name, DType dtype, const Shape& shape) {
  std::uint32_t crc = crc_update(0, name.data(), name.size());
  crc = crc_update(crc, "", 1);  // the NUL ends the name
  const char* d = st_name(dtype);
  crc = crc_update(crc, d, std::strlen(d) + 1);
  for (std::int64_t s : shape) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(s) >> (8 * i));
    crc = crc_update(crc, b, 8);
  }
  return crc;
}

/// CRC-32 of the metadata strings (the checksum record itself excluded), in key order.
std::uint32_t crc_of_metadata(const std::map<std::string, std::string>& metadata) {
  std::uint32_t crc = 0;
  for (const auto& [k, v] : metadata) {
    crc = crc_update(crc, k.data(), k.size());
    crc = crc_update(crc, "", 1);
    crc = crc_update(crc, v.data(), v.size());
    crc = crc_update(crc, "", 1);
  }
  return crc;
}

std::string hex8(std::uint32_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 0xF];
  return s;
}

std::optional<std::uint32_t> parse_hex8(const std::string& s) {
  if (s.size() != 8) return std::nullopt;
  std::uint32_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<std::uint32_t>(d);
  }
  return v;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
  std::uint32_t identity_crc = 0;        // crc_of_identity
  std::optional<std::uint32_t> stored_crc;  // from the checksum record, when the file has one
};

struct Header {
  std::vector<Entry> entries;  // sorted by name
  std::map<std::string, std::string> metadata;  // without the checksum record
  std::uint64_t data_start = 0;  // 8 + N
};

struct DepthExceeded {};
struct DuplicateKey {
  std::string key;
  int depth;  // 1: a top-level key (a tensor's name or "__metadata__")
};

/// Parses and checks the checksum record against the header's tensors and metadata; stores
/// each tensor's expected CRC in its entry (the data is checked as it is read).
void apply_checksums(const char* op, const std::string& path, const std::string& record, Header& h) {
  const std::string bad = std::string("the checksum record \"") + kChecksumKey + "\" in \"__metadata__\" is corrupt";
  json j;
  try {
    j = json::parse(
        record,
        [](int depth, json::parse_event_t, json&) {
          if (depth > 1) throw DepthExceeded{};  // {name: "hex"}: keys and values at depth 1
          return true;
        },
        true, false);
  } catch (const DepthExceeded&) {
    fail(op, path, bad + " (nested JSON)");
  } catch (const json::exception&) {
    fail(op, path, bad + " (not JSON)");
  }
  if (!j.is_object()) fail(op, path, bad + " (not a JSON object)");
  std::map<std::string, std::uint32_t> crcs;
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::optional<std::uint32_t> v;
    if (it.value().is_string()) v = parse_hex8(it.value().get<std::string>());
    if (!v) fail(op, path, bad + " (the value for \"" + it.key() + "\" is not 8 lowercase hex digits)");
    crcs.emplace(it.key(), *v);
  }
  auto meta = crcs.find("__metadata__");
  if (meta == crcs.end()) fail(op, path, bad + " (no checksum for \"__metadata__\")");
  const std::uint32_t meta_crc = crc_of_metadata(h.metadata);
  if (meta->second != meta_crc)
    fail(op, path, "checksum mismatch in \"__metadata__\" (stored " + hex8(meta->second) + ", computed " +
                       hex8(meta_crc) + "): the metadata is corrupt");
  crcs.erase(meta);
  for (Entry& e : h.entries) {
    auto c = crcs.find(e.name);
    if (c == crcs.end())
      fail(op, path, "tensor \"" + e.name + "\" has no checksum in \"" + kChecksumKey +
                         "\" (a corrupt header or a tensor renamed after writing)");
    e.stored_crc = c->second;
    crcs.erase(c);
  }
  if (!crcs.empty())
    fail(op, path, std::string("\"") + kChecksumKey + "\" holds a checksum for tensor \"" + crcs.begin()->first +
                       "\", which the file does not have (a corrupt header or a tensor renamed after writing)");
}

/// Up to 24 bytes each side of `at` (1-based, as nlohmann reports it), non-printable bytes as
/// '?': shows which tensor's entry a broken header breaks in.
std::string excerpt(const std::string& text, std::size_t at) {
  const std::size_t centre = std::min(at > 0 ? at - 1 : 0, text.size());
  const std::size_t from = centre > 24 ? centre - 24 : 0, to = std::min(text.size(), centre + 24);
  std::string s = "'";
  for (std::size_t i = from; i < to; ++i) s += text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
  return s + "'";
}

/// Opens, checks and parses the header of `path`; validates every entry against the file.
/// Leaves `fd` open for the data reads.
Header read_header(const char* op, const std::string& path, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(op, path, "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) fail(op, path, "not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8)
    fail(op, path, "truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  unsigned char len_bytes[8];
  if (!read_exact(fd, len_bytes, 8, 0)) fail(op, path, "cannot read the header length (truncated?)");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeader)
    fail(op, path, "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeader) + " bytes");
  if (n > file_size - 8)
    fail(op, path, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(file_size) +
                       " bytes; truncated?)");
  std::string text(static_cast<std::size_t>(n), '\0');
  if (n > 0 && !read_exact(fd, text.data(), n, 8)) fail(op, path, "cannot read the header (truncated?)");
  if (text.empty() || text[0] != '{') fail(op, path, "header does not start with '{'");

  json root;
  // The keys of each open JSON object: a repeated key is refused. nlohmann keeps the last value
  // silently, so a tensor listed twice lost its first entry (then reported as a "gap" in the
  // buffer, or loaded without a word when both entries had the same offsets), and a repeated
  // "dtype" inside an entry picked the last one.
  std::vector<std::set<std::string>> open_objects;
  try {
    root = json::parse(
        text,
        [&open_objects](int depth, json::parse_event_t event, json& parsed) {
          if (depth > kMaxJsonDepth) throw DepthExceeded{};
          if (event == json::parse_event_t::object_start) open_objects.emplace_back();
          else if (event == json::parse_event_t::object_end) open_objects.pop_back();
          else if (event == json::parse_event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second)
            throw DuplicateKey{parsed.get<std::string>(), depth};
          return true;
        },
        true, false);
  } catch (const DepthExceeded&) {
    fail(op, path, "invalid JSON header: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const DuplicateKey& d) {
    fail(op, path, "invalid header: the key \"" + d.key + "\" appears twice in " +
                       (d.depth <= 1 ? std::string("the header (a tensor or \"__metadata__\" listed twice)")
                                     : std::string("one JSON object")));
  } catch (const json::parse_error& e) {
    fail(op, path, std::string("invalid JSON header: ") + e.what() + " (near byte " + std::to_string(e.byte) + ": " +
                       excerpt(text, e.byte) + ")");
  } catch (const json::exception& e) {
    fail(op, path, std::string("invalid JSON header: ") + e.what());
  }
  if (!root.is_object()) fail(op, path, "header is not a JSON object");

  Header h;
  h.data_start = 8 + n;
  const std::uint64_t buffer_size = file_size - h.data_start;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(op, path, "\"__metadata__\" is not a JSON object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(op, path, "\"__metadata__\" value of \"" + m.key() + "\" is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\": ";
    if (!v.is_object()) fail(op, path, where + "entry is not a JSON object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail(op, path, where + "\"dtype\" missing or not a string");
    if (sh == v.end() || !sh->is_array()) fail(op, path, where + "\"shape\" missing or not an array");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      fail(op, path, where + "\"data_offsets\" missing or not an array of two integers");
    Entry e;
    e.name = name;
    auto d = st_dtype(dt->get<std::string>());
    if (!d) fail(op, path, where + "unsupported dtype " + dt->get<std::string>());
    e.dtype = *d;
    // numel * itemsize without overflow; the non-zero dims must also fit int64 (strides).
    std::uint64_t numel = 1, nonzero = 1;
    bool overflow = false;
    for (const json& s : *sh) {
      if (!s.is_number_integer()) fail(op, path, where + "shape entry " + s.dump() + " is not an integer");
      if (s.is_number_unsigned()) {
        std::uint64_t u = s.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) overflow = true;
        e.shape.push_back(static_cast<std::int64_t>(std::min<std::uint64_t>(u, std::numeric_limits<std::int64_t>::max())));
      } else {
        std::int64_t x = s.get<std::int64_t>();
        if (x < 0) fail(op, path, where + "negative shape entry " + std::to_string(x));
        e.shape.push_back(x);
      }
      auto u = static_cast<std::uint64_t>(e.shape.back());
      if (u != 0 && __builtin_mul_overflow(nonzero, u, &nonzero)) overflow = true;
      numel = u == 0 ? 0 : numel * u;  // wraps only when `overflow` is already set
    }
    if (nonzero > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) overflow = true;
    std::uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, itemsize(e.dtype), &nbytes))
      fail(op, path, where + "shape " + sh->dump() + " is too large");
    for (const json& o : *off)
      if (!o.is_number_unsigned())
        fail(op, path, where + "data_offsets " + off->dump() + " are not non-negative integers");
    e.begin = (*off)[0].get<std::uint64_t>();
    e.end = (*off)[1].get<std::uint64_t>();
    if (e.begin > e.end || e.end > buffer_size)
      fail(op, path, where + "data_offsets " + off->dump() + " out of range for a data buffer of " +
                         std::to_string(buffer_size) + " bytes");
    if (e.end - e.begin != nbytes)
      fail(op, path, where + "data_offsets " + off->dump() + " span " + std::to_string(e.end - e.begin) +
                         " bytes but dtype " + st_name(e.dtype) + " and shape " + sh->dump() + " need " +
                         std::to_string(nbytes));
    e.identity_crc = crc_of_identity(e.name, e.dtype, e.shape);
    h.entries.push_back(std::move(e));
  }
  // The ranges must tile the buffer: no overlaps, no gaps, nothing left over.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < cursor)
      fail(op, path, "tensor \"" + e->name + "\" [" + std::to_string(e->begin) + ", " + std::to_string(e->end) +
                         ") overlaps tensor \"" + prev->name + "\" [" + std::to_string(prev->begin) + ", " +
                         std::to_string(prev->end) + ")");
    if (e->begin > cursor)
      fail(op, path, "gap in the data buffer: bytes [" + std::to_string(cursor) + ", " + std::to_string(e->begin) +
                         ") belong to no tensor");
    cursor = e->end;
    prev = e;
  }
  if (cursor != buffer_size)
    fail(op, path, "the tensors cover " + std::to_string(cursor) + " bytes but the data buffer has " +
                       std::to_string(buffer_size) + " (trailing bytes or wrong offsets)");
  auto rec = h.metadata.find(kChecksumKey), rec_crc = h.metadata.find(kRecordCrcKey);
  const bool has_rec = rec != h.metadata.end(), has_rec_crc = rec_crc != h.metadata.end();
  if (has_rec != has_rec_crc)
    fail(op, path, std::string("brrr's checksum record is incomplete: \"") + (has_rec ? kChecksumKey : kRecordCrcKey) +
                       "\" without \"" + (has_rec ? kRecordCrcKey : kChecksumKey) + "\" in \"__metadata__\" (a corrupt header)");
  if (has_rec) {
    const std::string record = std::move(rec->second);
    const std::optional<std::uint32_t> stored = parse_hex8(rec_crc->second);
    h.metadata.erase(rec);
    h.metadata.erase(kRecordCrcKey);
    const std::uint32_t crc = crc_update(0, record.data(), record.size());
    if (!stored || *stored != crc)
      fail(op, path, std::string("the checksum record \"") + kChecksumKey + "\" in \"__metadata__\" is corrupt (its CRC-32 " +
                         hex8(crc) + " does not match \"" + kRecordCrcKey + "\")");
    apply_checksums(op, path, record, h);
  }
  return h;
}

/// Where save_safetensors writes: `path`, or for a symbolic link the end of its link chain, so
/// the link survives and shows the new file (as Python's open(path, "wb") writes through it);
/// renaming over the link itself would replace it with a regular file. The chain is read link by
/// link because weakly_canonical stops at a dangling link, whose target we may create.
/// Refuses what exists and is not a regular file: renaming over a FIFO or a device node
/// (/dev/null, as root) would replace it. Only the std::error_code overloads are used, so every
/// failure (a loop, a name too long) is an Error naming `path`, never a filesystem_error.
std::filesystem::path save_target(const char* op, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) fail(op, path, "empty path");
  if (path.back() == '/') fail(op, path, "ends in '/': a folder, not a file name");
  fs::path target = path;
  const auto at = [&] { return target == fs::path(path) ? std::string() : " " + target.string(); };
  fs::file_status st;
  for (int links = 0;; ++links) {
    std::error_code ec;
    st = fs::symlink_status(target, ec);  // not_found (with ec set) is fine: we create it
    if (st.type() == fs::file_type::none) fail(op, path, "cannot stat" + at() + ": " + ec.message());
    if (st.type() != fs::file_type::symlink) break;
    if (links == 40)  // Linux's own limit (MAXSYMLINKS)
      fail(op, path, "cannot resolve the symbolic link: too many levels of symbolic links (a loop?)");
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) fail(op, path, "cannot read the symbolic link" + at() + ": " + ec.message());
    target = next.is_absolute() ? next : target.parent_path() / next;  // relative to the link's folder
  }
  const std::string what = at().empty() ? "" : "its target" + at() + " ";
  switch (st.type()) {
    case fs::file_type::regular:
    case fs::file_type::not_found: return target;
    case fs::file_type::directory: fail(op, path, what + "is a directory");
    case fs::file_type::fifo: fail(op, path, what + "is not a regular file (a FIFO)");
    case fs::file_type::socket: fail(op, path, what + "is not a regular file (a socket)");
    case fs::file_type::character: fail(op, path, what + "is not a regular file (a character device)");
    case fs::file_type::block: fail(op, path, what + "is not a regular file (a block device)");
    case fs::file_type::none:     // not reached: failed above
    case fs::file_type::symlink:  // not reached: followed above
    case fs::file_type::unknown: break;
  }
  fail(op, path, what + "is not a regular file");
}

int open_for_reading(const char* op, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(op, path, "cannot open: " + errno_text());
  return fd;
}

}  // namespace

// Writes the host bytes of each tensor (the host is little-endian, as the format). CUDA
// tensors are copied back with Tensor::to(Device::cpu()), a blocking sync point; the whole
// file is built in "<target>.tmp.<pid>" and renamed over the target (`path`, or the end of its
// symlink chain: save_target), so readers never see a partial file and an existing file is
// replaced atomically.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  constexpr const char* op = "save_safetensors";
  // Host copies first: errors here leave no file behind.
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  json header = json::object();
  json crcs = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail(op, path, "the tensor name \"__metadata__\" is reserved");
    if (!t.defined()) fail(op, path, "tensor \"" + name + "\" is undefined");
    Tensor c = t.detach().to(Device::cpu()).contiguous();
    const std::uint64_t nbytes = c.nbytes();
    header[name] = {{"dtype", st_name(c.dtype())},
                    {"shape", c.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    crcs[name] = hex8(crc_update(crc_of_identity(name, c.dtype(), c.shape()), c.data_ptr(), nbytes));
    host.push_back(std::move(c));
  }
  for (const char* key : {kChecksumKey, kRecordCrcKey})
    if (metadata.count(key)) fail(op, path, std::string("the metadata key \"") + key + "\" is reserved for brrr's checksums");
  crcs["__metadata__"] = hex8(crc_of_metadata(metadata));
  std::string text;
  try {
    json meta = metadata;
    const std::string record = crcs.dump();  // strict: throws on names that are not valid UTF-8
    meta[kChecksumKey] = record;
    meta[kRecordCrcKey] = hex8(crc_update(0, record.data(), record.size()));
    header["__metadata__"] = std::move(meta);
    text = header.dump();
  } catch (const json::exception& e) {
    fail(op, path, std::string("cannot encode the header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

  // Before anything is created: a folder, FIFO or device at `path` is refused, a link followed.
  const std::filesystem::path target = save_target(op, path);
  const std::string tmp = target.string() + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail(op, path, "cannot create temporary file " + tmp + ": " + errno_text());
  auto abandon = [&](const std::string& problem) {
    int saved = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    errno = saved;
    fail(op, path, problem);
  };
  if (!write_all(fd, len_bytes, 8) || !write_all(fd, text.data(), text.size()))
    abandon("cannot write " + tmp + ": " + errno_text());
  for (const Tensor& c : host)
    if (c.nbytes() > 0 && !write_all(fd, c.data_ptr(), c.nbytes()))
      abandon("cannot write " + tmp + ": " + errno_text());
  if (::fsync(fd) != 0) abandon("cannot flush " + tmp + ": " + errno_text());
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) abandon("cannot close " + tmp + ": " + errno_text());
  std::error_code ec;
  std::filesystem::rename(tmp, target, ec);
  if (ec) abandon("cannot rename " + tmp + " to it: " + ec.message());
  // The rename is durable only once the folder is flushed too (a crash, not a kill, could
  // otherwise lose it). Some file systems cannot fsync a folder (EINVAL): nothing to do there.
  std::filesystem::path dir = target.parent_path();
  Fd dir_fd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.fd >= 0 && ::fsync(dir_fd.fd) != 0 && errno != EINVAL)
    fail(op, path, "written, but flushing its folder failed: " + errno_text());
}

// Validates the whole header against the file (read_header) before allocating anything; then
// one CPU tensor per entry, read straight into its storage. BOOL bytes must be 0 or 1.
TensorMap load_safetensors(const std::string& path) {
  constexpr const char* op = "load_safetensors";
  Fd fd(open_for_reading(op, path));
  Header h = read_header(op, path, fd.fd);
  TensorMap out;
  for (const Entry& e : h.entries) {
    Tensor t = empty(e.shape, {.dtype = e.dtype});
    const std::uint64_t nbytes = e.end - e.begin;
    if (nbytes > 0) {
      if (!read_exact(fd.fd, t.data_ptr(), nbytes, h.data_start + e.begin))
        fail(op, path, "cannot read tensor \"" + e.name + "\" (truncated?)" + (errno ? ": " + errno_text() : ""));
    }
    if (e.stored_crc) {
      const std::uint32_t crc = crc_update(e.identity_crc, t.data_ptr(), nbytes);
      if (crc != *e.stored_crc)
        fail(op, path, "tensor \"" + e.name + "\": checksum mismatch (stored " + hex8(*e.stored_crc) + ", computed " +
                           hex8(crc) + "): its bytes, dtype or shape were corrupted");
    }
    if (nbytes > 0) {
      if (e.dtype == DType::boolean) {
        const auto* b = static_cast<const unsigned char*>(t.data_ptr());
        for (std::uint64_t i = 0; i < nbytes; ++i)
          if (b[i] > 1)
            fail(op, path, "BOOL tensor \"" + e.name + "\" holds byte " + std::to_string(b[i]) + " (must be 0 or 1)");
      }
    }
    out.emplace(e.name, std::move(t));
  }
  return out;
}

// Parses and validates the header like load_safetensors, reading no tensor data.
std::map<std::string, std::string> safetensors_metadata(const std::string& path) {
  constexpr const char* op = "safetensors_metadata";
  Fd fd(open_for_reading(op, path));
  return read_header(op, path, fd.fd).metadata;
}

}  // namespace brrr::io
