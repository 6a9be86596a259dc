// brrr.data's IDX reader: the Fashion-MNIST files cut small (tests/fuzz/corpus/idx, made by
// tests/fuzz/make_seeds.py from the Debian package's files), plain and gzip giving the same
// tensors, and hostile files (bad magic, types, dims, lengths, corrupt gzip streams) that
// must be Error(io) naming the path and the problem, without allocating what a header claims.
#include <doctest/doctest.h>

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
import brrr;

using namespace brrr;
namespace fs = std::filesystem;

namespace {

const std::string corpus = std::string(BRRR_FUZZ_CORPUS) + "/idx/";

struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() / ("brrr_idx_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

using Bytes = std::vector<unsigned char>;

Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Bytes gzip(const Bytes& plain) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&z, plain.size()) + 32);
  z.next_in = const_cast<Bytef*>(plain.data());
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

/// An IDX header: magic 0 0 type ndim, then big-endian dims.
Bytes header(unsigned char type, const std::vector<std::uint32_t>& dims) {
  Bytes b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
  return b;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// read_idx(bytes written to a file, plain and gzip) must throw Error(io) naming the file and `problem`.
void expect_idx_error(const TempDir& tmp, const Bytes& bytes, const std::string& problem, bool also_gzip = true) {
  for (bool gz : {false, true}) {
    if (gz && !also_gzip) continue;
    const std::string path = tmp.file(gz ? "bad.gz" : "bad");
    write_file(path, gz ? gzip(bytes) : bytes);
    INFO((gz ? "gzip" : "plain") << " file, expecting: " << problem);
    bool threw = false;
    try {
      (void)data::read_idx(path);
    } catch (const Error& e) {
      threw = true;
      const std::string msg = e.what();
      INFO(msg);
      CHECK(e.kind() == ErrorKind::io);
      CHECK(msg.find(path) != std::string::npos);
      CHECK(msg.find(problem) != std::string::npos);
    }
    CHECK(threw);
  }
}

}  // namespace

TEST_CASE("read_idx: Fashion-MNIST cut small, plain and gzip give the same tensors") {
  for (const std::string stem : {"train-images-idx3-ubyte-cut", "t10k-images-idx3-ubyte-cut",
                                 "train-labels-idx1-ubyte-cut", "t10k-labels-idx1-ubyte-cut"}) {
    INFO(stem);
    const Bytes raw = read_file(corpus + stem);
    Tensor plain = data::read_idx(corpus + stem), gz = data::read_idx(corpus + stem + ".gz");
    CHECK(plain.shape() == gz.shape());
    const bool labels = stem.find("labels") != std::string::npos;
    const std::size_t start = labels ? 8 : 16;
    REQUIRE(raw.size() > start);
    CHECK(plain.numel() == static_cast<std::int64_t>(raw.size() - start));
    if (labels) {
      CHECK(plain.dim() == 1);
      CHECK(plain.to_host<std::int64_t>() == gz.to_host<std::int64_t>());
      std::vector<std::int64_t> v = plain.to_host<std::int64_t>();
      for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == raw[start + i]);
      for (std::int64_t c : v) CHECK((c >= 0 && c < 10));
    } else {
      CHECK(plain.shape() == Shape{plain.size(0), 28, 28});
      CHECK(plain.to_host<float>() == gz.to_host<float>());
      std::vector<float> v = plain.to_host<float>();
      for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == static_cast<float>(raw[start + i]) / 255.0f);
    }
  }
  Tensor four = data::read_idx(corpus + "four_dims");
  CHECK(four.shape() == Shape{2, 1, 2, 3});
  CHECK(four.to_host<float>()[11] == 11.0f / 255.0f);
}

TEST_CASE("read_idx: hostile files are Error(io) naming the path and the problem") {
  TempDir tmp;
  SUBCASE("missing file, a folder") {
    CHECK_THROWS_AS(data::read_idx(tmp.file("missing")), Error);
    CHECK_THROWS_AS(data::read_idx(tmp.dir.string()), Error);
  }
  SUBCASE("magic, type, dimensions") {
    expect_idx_error(tmp, {}, "truncated: the file ends inside the magic number");
    expect_idx_error(tmp, {0, 0, 8}, "truncated: the file ends inside the magic number");
    expect_idx_error(tmp, cat({1, 0, 8, 1, 0, 0, 0, 1}, {5}), "bad magic number");
    expect_idx_error(tmp, cat(header(0x0D, {1}), {0, 0, 0, 0}), "unsupported IDX element type 0x0d");
    expect_idx_error(tmp, cat(header(0x09, {1}), {5}), "unsupported IDX element type 0x09");
    expect_idx_error(tmp, header(8, {}), "unsupported number of dimensions 0");
    expect_idx_error(tmp, header(8, {1, 1, 1, 1, 1}), "unsupported number of dimensions 5");
    expect_idx_error(tmp, header(8, {3, 0}), "implausible dimension 0");
    expect_idx_error(tmp, header(8, {0xFFFFFFFF}), "implausible dimension 4294967295");
    expect_idx_error(tmp, header(8, {1 << 20, 1 << 20}), "more than 16 GiB");
    expect_idx_error(tmp, {0, 0, 8, 2, 0, 0}, "the file ends inside the dimensions");
  }
  SUBCASE("lengths that do not match the dimensions") {
    // Plain files are sized before anything is read or allocated.
    expect_idx_error(tmp, cat(header(8, {4}), {1, 2, 3}), "the file has 11 bytes but its dimensions [4] need 12 (truncated)",
                     false);
    expect_idx_error(tmp, cat(header(8, {2}), {1, 2, 3}), "the file has 11 bytes but its dimensions [2] need 10 (trailing data)",
                     false);
    expect_idx_error(tmp, header(8, {1 << 28, 60}), "the file has 12 bytes but its dimensions [268435456, 60] need 16106127372 (truncated)",
                     false);
    // Compressed files fail as the stream runs out (read in chunks of 1 MiB: a lying header
    // costs at most what the stream holds).
    Bytes short_gz = gzip(cat(header(8, {4}), {1, 2, 3}));
    write_file(tmp.file("short.gz"), short_gz);
    CHECK_THROWS_WITH_AS(data::read_idx(tmp.file("short.gz")), doctest::Contains("truncated: the file ends inside the data"),
                         Error);
    write_file(tmp.file("huge.gz"), gzip(cat(header(8, {1 << 28, 60}), Bytes(1000, 7))));
    CHECK_THROWS_WITH_AS(data::read_idx(tmp.file("huge.gz")), doctest::Contains("truncated"), Error);
    write_file(tmp.file("long.gz"), gzip(cat(header(8, {2}), {1, 2, 3})));
    CHECK_THROWS_WITH_AS(data::read_idx(tmp.file("long.gz")), doctest::Contains("trailing data"), Error);
  }
  SUBCASE("corrupt gzip streams") {
    const Bytes good = read_file(corpus + "train-images-idx3-ubyte-cut.gz");
    REQUIRE(good.size() > 40);
    int errors = 0;
    // Every truncation, and a flipped byte in the deflate data and in the CRC-32 trailer.
    for (std::size_t len = 0; len < good.size(); ++len) {
      write_file(tmp.file("cut.gz"), Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len)));
      INFO("truncated to " << len << " of " << good.size() << " bytes");
      CHECK_THROWS_AS(data::read_idx(tmp.file("cut.gz")), Error);
      ++errors;
    }
    for (std::size_t at : {std::size_t{20}, good.size() / 2, good.size() - 6}) {
      Bytes b = good;
      b[at] ^= 0x55;
      write_file(tmp.file("flip.gz"), b);
      INFO("flipped byte " << at);
      CHECK_THROWS_AS(data::read_idx(tmp.file("flip.gz")), Error);
    }
    CHECK(errors == static_cast<int>(good.size()));
  }
}
