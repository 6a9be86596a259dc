// libFuzzer target: brrr::data::read_idx (IDX files, plain or gzip-compressed) on arbitrary
// bytes. Each input is read twice: as the file itself (plain, or gzip when it starts with
// the gzip magic; mutated .gz seeds exercise zlib's corrupt-stream paths), and gzip-compressed
// by the target (so valid compressed streams reach the IDX parser). Oracles beyond "no crash,
// no sanitizer report, only brrr::Error":
//   - the plain and the compressed reading agree: both fail, or both give the same tensor;
//   - a tensor read has the dims of the header, dtype i64 for 1-D files (values 0..255) and
//     f32 otherwise (values k/255).
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
import brrr;

using namespace brrr;

namespace {

std::vector<unsigned char> gzip(const std::uint8_t* data, std::size_t size) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();  // +16: gzip wrapper
  std::vector<unsigned char> out(deflateBound(&z, size) + 32);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::optional<Tensor> read(const std::string& path) {
  try {
    return data::read_idx(path);
  } catch (const Error&) {
    return std::nullopt;
  }
}

void check_values(const Tensor& t, const std::uint8_t* data, std::size_t size) {
  if (size < 4 || t.dim() != data[3]) fuzz::violated("dims differ from the header");
  std::int64_t numel = 1;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    std::size_t o = 4 + 4 * static_cast<std::size_t>(d);
    std::int64_t want = (std::int64_t(data[o]) << 24) | (std::int64_t(data[o + 1]) << 16) |
                        (std::int64_t(data[o + 2]) << 8) | data[o + 3];
    if (t.size(d) != want) fuzz::violated("a dim differs from the header");
    numel *= want;
  }
  const std::size_t start = 4 + 4 * static_cast<std::size_t>(t.dim());
  if (start + static_cast<std::size_t>(numel) != size) fuzz::violated("a file of the wrong length was accepted");
  if (t.dim() == 1) {
    if (t.dtype() != DType::i64) fuzz::violated("labels are not i64");
    std::vector<std::int64_t> v = t.to_host<std::int64_t>();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != data[start + i]) fuzz::violated("a label differs from its byte");
  } else {
    if (t.dtype() != DType::f32) fuzz::violated("images are not f32");
    std::vector<float> v = t.to_host<float>();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != static_cast<float>(data[start + i]) / 255.0f) fuzz::violated("a pixel differs from its byte");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemFile plain_file("idx"), gz_file("idx.gz");
  std::optional<Tensor> plain = read(plain_file.write(data, size));
  const bool is_gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (is_gzip) return 0;  // read by zlib as a (probably corrupt) stream: no crash is the oracle
  if (plain) check_values(*plain, data, size);

  std::vector<unsigned char> z = gzip(data, size);
  std::optional<Tensor> compressed = read(gz_file.write(z.data(), z.size()));
  if (plain.has_value() != compressed.has_value())
    fuzz::violated(std::string("plain and gzip readings disagree: the ") + (plain ? "gzip" : "plain") + " one failed");
  if (plain) {
    if (plain->shape() != compressed->shape() || plain->dtype() != compressed->dtype())
      fuzz::violated("plain and gzip readings give different shapes or dtypes");
    check_values(*compressed, data, size);
  }
  return 0;
}
