// brrr.io safetensors: round trips of every dtype and layout, metadata, the reference fixture
// written by the Python/Rust implementation (tests/io/make_fixtures.py), atomic writes, and
// hostile files (truncated, oversized or inconsistent headers) that must give Error(io).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
namespace fs = std::filesystem;

namespace {

const std::vector<DType> all_dtypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::boolean};

/// A fresh empty folder per test case, removed at the end.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("brrr_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<unsigned char> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

void check_same(const Tensor& got, const Tensor& want) {
  CHECK(got.device().is_cpu());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  CHECK(got.is_contiguous());
  CHECK(bytes_of(got) == bytes_of(want));
}

/// Random values of `dtype` (integers in a wide range, bools both ways).
Tensor random_tensor(Shape shape, DType dtype) {
  switch (dtype) {
    case DType::i32: return randint(-1000000, 1000000, shape, {.dtype = DType::i32});
    case DType::i64: return randint(-4000000000LL, 4000000000LL, shape, {.dtype = DType::i64});
    case DType::boolean: return randint(0, 2, shape, {.dtype = DType::i64}).to(DType::boolean);
    default: return randn(shape, {.dtype = DType::f64}).to(dtype);
  }
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void put_u64(std::vector<unsigned char>& out, std::uint64_t n) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(n >> (8 * i)));
}

/// A safetensors file from a header text (not padded) and a data buffer.
std::vector<unsigned char> make_file(const std::string& header, const std::vector<unsigned char>& data) {
  std::vector<unsigned char> out;
  put_u64(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// Loading `bytes` must throw Error(io) whose message names the file and contains `problem`.
void expect_io_error(const TempDir& tmp, const std::vector<unsigned char>& bytes, const std::string& problem) {
  const std::string path = tmp.file("bad.safetensors");
  write_file(path, bytes);
  bool threw = false;
  try {
    (void)io::load_safetensors(path);
  } catch (const Error& e) {
    threw = true;
    const std::string msg = e.what();
    INFO(msg);
    CHECK(e.kind() == ErrorKind::io);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
  }
  CHECK_MESSAGE(threw, "expected Error(io) containing: " << problem);
  // The metadata reader validates the same header.
  bool meta_threw = false;
  try {
    (void)io::safetensors_metadata(path);
  } catch (const Error& e) {
    meta_threw = e.kind() == ErrorKind::io;
  } 
  // A problem only in the data (e.g. a BOOL byte) is invisible to the metadata reader.
  if (problem.find("BOOL") == std::string::npos) CHECK(meta_threw);
}

const std::vector<unsigned char> eight_bytes = {1, 2, 3, 4, 5, 6, 7, 8};

/// With BRRR_IO_KEEP=DIR set, copies a file brrr wrote into DIR, for a manual check with the
/// Python reference: python3 tests/io/make_fixtures.py --check DIR/all.safetensors
void keep_for_python(const std::string& path) {
  if (const char* keep = std::getenv("BRRR_IO_KEEP"))
    fs::copy_file(path, fs::path(keep) / fs::path(path).filename(), fs::copy_options::overwrite_existing);
}

}  // namespace

TEST_CASE("safetensors round trip: every dtype, contiguous and not, 0-d and zero-size") {
  manual_seed(20261130);
  TempDir tmp;
  io::TensorMap in;
  for (DType d : all_dtypes) {
    const std::string n = to_string(d);
    in[n + "_contig"] = random_tensor({3, 5}, d);
    in[n + "_transposed"] = random_tensor({4, 6}, d).t();
    in[n + "_strided"] = random_tensor({5, 8}, d).slice(1, 1, 8, 3);
    in[n + "_expanded"] = random_tensor({1, 3}, d).expand({4, 3});
    in[n + "_scalar"] = random_tensor({}, d);
    in[n + "_empty"] = random_tensor({0, 4}, d);
    in[n + "_empty1"] = random_tensor({0}, d);
  }
  // A tensor that requires grad is saved by value.
  Tensor w = randn({2, 2});
  w.requires_grad_(true);
  in["weight"] = w;
  const std::string path = tmp.file("all.safetensors");
  io::save_safetensors(path, in);
  io::TensorMap out = io::load_safetensors(path);
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) {
    INFO(name);
    REQUIRE(out.count(name) == 1);
    check_same(out.at(name), t);
    CHECK_FALSE(out.at(name).requires_grad());
  }
  CHECK(io::safetensors_metadata(path).empty());
  keep_for_python(path);

  // Header layout: 8-byte length, multiple of 8, JSON starting with '{'.
  std::vector<unsigned char> raw = read_file(path);
  REQUIRE(raw.size() >= 9);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | raw[static_cast<std::size_t>(i)];
  CHECK(n % 8 == 0);
  CHECK(raw[8] == '{');
}

TEST_CASE("safetensors: empty map and metadata round trip") {
  TempDir tmp;
  const std::string path = tmp.file("meta.safetensors");
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcødé \"quoted\"\n"}, {"", "empty key"}};
  io::save_safetensors(path, {{"x", Tensor::from_vector(std::vector<float>{1.5f, -2.0f})}}, meta);
  CHECK(io::safetensors_metadata(path) == meta);
  io::TensorMap out = io::load_safetensors(path);
  REQUIRE(out.size() == 1);
  CHECK(out.at("x").to_host<float>() == std::vector<float>{1.5f, -2.0f});

  const std::string empty_path = tmp.file("empty.safetensors");
  io::save_safetensors(empty_path, {});
  CHECK(io::load_safetensors(empty_path).empty());
  CHECK(io::safetensors_metadata(empty_path).empty());
}

TEST_CASE("safetensors: the reference fixture (written by the Python/Rust implementation)") {
  const std::string path = std::string(BRRR_TEST_DATA) + "/reference.safetensors";
  CHECK(io::safetensors_metadata(path) == std::map<std::string, std::string>{{"format", "pt"}});
  io::TensorMap t = io::load_safetensors(path);
  CHECK(t.size() == 9);

  REQUIRE(t.count("f32") == 1);
  CHECK(t.at("f32").shape() == Shape{2, 3});
  CHECK(t.at("f32").to_host<float>() == std::vector<float>{0.0f, -1.5f, 2.25f, 1024.0f, 0.1f, -3.0e-8f});

  REQUIRE(t.count("f64") == 1);
  CHECK(t.at("f64").shape() == Shape{3});
  CHECK(t.at("f64").to_host<double>() == std::vector<double>{0.1, -2.5, 1e300});

  REQUIRE(t.count("bf16") == 1);
  CHECK(t.at("bf16").shape() == Shape{2, 2});
  std::vector<std::uint16_t> bf;
  for (bfloat16 v : t.at("bf16").to_host<bfloat16>()) bf.push_back(v.bits);
  CHECK(bf == std::vector<std::uint16_t>{0x3F80, 0xC000, 0x3F00, 0x4049});  // 1 -2 0.5 3.140625

  REQUIRE(t.count("f16") == 1);
  CHECK(t.at("f16").shape() == Shape{4});
  std::vector<std::uint16_t> hf;
  for (half v : t.at("f16").to_host<half>()) hf.push_back(v.bits);
  CHECK(hf == std::vector<std::uint16_t>{0x3C00, 0xB800, 0x7BFF, 0x0400});  // 1 -0.5 65504 2^-14

  REQUIRE(t.count("i32") == 1);
  CHECK(t.at("i32").shape() == Shape{2, 2});
  CHECK(t.at("i32").to_host<std::int32_t>() == std::vector<std::int32_t>{1, -2, 2147483647, -2147483647 - 1});

  REQUIRE(t.count("i64") == 1);
  CHECK(t.at("i64").to_host<std::int64_t>() ==
        std::vector<std::int64_t>{0, INT64_MIN, INT64_MAX});

  REQUIRE(t.count("bool") == 1);
  CHECK(t.at("bool").to_host<bool>() == std::vector<bool>{true, false, true, true, false});

  REQUIRE(t.count("empty") == 1);
  CHECK(t.at("empty").shape() == Shape{0, 3});
  CHECK(t.at("empty").dtype() == DType::f32);

  REQUIRE(t.count("scalar") == 1);
  CHECK(t.at("scalar").shape() == Shape{});
  CHECK(t.at("scalar").item<double>() == 2.5);

  // Re-saving what we read gives a file with the same tensors and metadata.
  TempDir tmp;
  io::save_safetensors(tmp.file("again.safetensors"), t, {{"format", "pt"}});
  io::TensorMap again = io::load_safetensors(tmp.file("again.safetensors"));
  for (const auto& [name, x] : t) check_same(again.at(name), x);
  keep_for_python(tmp.file("again.safetensors"));
}

TEST_CASE("safetensors: atomic write replaces an existing file and leaves no temporary") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  write_file(path, std::vector<unsigned char>(1000, 0xAB));
  io::save_safetensors(path, {{"a", arange(6, {.dtype = DType::i64})}});
  io::TensorMap out = io::load_safetensors(path);
  CHECK(out.at("a").to_host<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
  io::save_safetensors(path, {{"b", ones({2})}});
  out = io::load_safetensors(path);
  CHECK(out.count("a") == 0);
  CHECK(out.at("b").to_host<float>() == std::vector<float>{1.0f, 1.0f});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.dir)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("safetensors: write failures are Error(io) naming the path, leaving nothing behind") {
  TempDir tmp;
  const std::string missing_dir = tmp.file("no/such/dir/x.safetensors");
  try {
    io::save_safetensors(missing_dir, {{"a", ones({2})}});
    FAIL("expected Error(io)");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
    CHECK(std::string(e.what()).find(missing_dir) != std::string::npos);
  }
  // The target is a directory: refused before anything is written.
  fs::create_directories(tmp.dir / "adir");
  fs::create_directories(tmp.dir / "adir" / "sub");
  const std::string dir_target = tmp.file("adir");
  CHECK_THROWS_AS(io::save_safetensors(dir_target, {{"a", ones({2})}}), Error);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.dir)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"adir"});
  // Reserved and undefined names.
  CHECK_THROWS_AS(io::save_safetensors(tmp.file("r.safetensors"), {{"__metadata__", ones({1})}}), Error);
  CHECK_THROWS_AS(io::save_safetensors(tmp.file("u.safetensors"), {{"u", Tensor()}}), Error);
  CHECK_FALSE(fs::exists(tmp.dir / "r.safetensors"));
  CHECK_FALSE(fs::exists(tmp.dir / "u.safetensors"));
}

namespace {

/// The sorted names in `dir` (what a refused save must leave unchanged).
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// Saving to `path` must throw Error(io) naming the op, the path and `problem`.
void expect_save_refused(const std::string& path, const std::string& problem) {
  INFO("path: ", path);
  try {
    io::save_safetensors(path, {{"a", ones({2})}});
    FAIL("expected Error(io) containing: " << problem);
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(e.kind() == ErrorKind::io);
    CHECK(msg.find("save_safetensors") != std::string::npos);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(problem) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors: save through a symbolic link writes its target and keeps the link") {
  FRESH_SEED();
  TempDir tmp;
  fs::create_directories(tmp.dir / "sub");
  const std::string real = tmp.file("sub/real.safetensors");
  io::save_safetensors(real, {{"old", ones({3})}});
  // A chain: top (absolute) -> link (relative to its folder) -> sub/real.safetensors.
  fs::create_symlink("sub/real.safetensors", tmp.dir / "link");
  fs::create_symlink(tmp.dir / "link", tmp.dir / "top");
  const io::TensorMap in = {{"w", randn({3, 4})}, {"i", randint(-1000, 1000, {5}, {.dtype = DType::i64})}};
  for (const char* via : {"link", "top"}) {
    INFO("saved through ", via);
    io::save_safetensors(tmp.file(via), in, {{"via", via}});
    CHECK(fs::is_symlink(tmp.dir / "link"));
    CHECK(fs::read_symlink(tmp.dir / "link") == fs::path("sub/real.safetensors"));
    CHECK(fs::is_symlink(tmp.dir / "top"));
    CHECK(fs::is_regular_file(fs::symlink_status(real)));
    const io::TensorMap out = io::load_safetensors(real);
    REQUIRE(out.size() == in.size());  // "old" is gone: the target was replaced
    for (const auto& [name, t] : in) check_same(out.at(name), t);
    CHECK(io::safetensors_metadata(real).at("via") == via);
    CHECK(io::safetensors_metadata(tmp.file(via)).at("via") == via);  // read through the link too
    // The temporary went next to the target and was renamed away.
    CHECK(listing(tmp.dir) == std::vector<std::string>{"link", "sub", "top"});
    CHECK(listing(tmp.dir / "sub") == std::vector<std::string>{"real.safetensors"});
  }
  // A dangling link whose target's folder exists: the target is created, the link kept.
  fs::create_symlink("sub/new.safetensors", tmp.dir / "dangling");
  io::save_safetensors(tmp.file("dangling"), in);
  CHECK(fs::is_symlink(tmp.dir / "dangling"));
  const io::TensorMap out = io::load_safetensors(tmp.file("sub/new.safetensors"));
  REQUIRE(out.size() == in.size());
  for (const auto& [name, t] : in) check_same(out.at(name), t);
  // A dangling link into a missing folder: Error(io) naming the path, nothing created.
  fs::create_symlink("nowhere/x.safetensors", tmp.dir / "lost");
  expect_save_refused(tmp.file("lost"), "No such file or directory");
  CHECK(fs::is_symlink(tmp.dir / "lost"));
  CHECK(listing(tmp.dir) == std::vector<std::string>{"dangling", "link", "lost", "sub", "top"});
}

TEST_CASE("safetensors: save refuses a folder, a FIFO, a trailing '/' and link loops, changing nothing") {
  TempDir tmp;
  fs::create_directories(tmp.dir / "adir");
  write_file(tmp.file("adir/inside"), {1, 2, 3});
  REQUIRE(::mkfifo(tmp.file("fifo").c_str(), 0600) == 0);
  fs::create_symlink("adir", tmp.dir / "to_dir");
  fs::create_symlink("fifo", tmp.dir / "to_fifo");
  fs::create_symlink("loop_b", tmp.dir / "loop_a");
  fs::create_symlink("loop_a", tmp.dir / "loop_b");
  fs::create_symlink("self", tmp.dir / "self");
  const std::vector<std::string> before = listing(tmp.dir);

  expect_save_refused(tmp.file("adir"), "is a directory");
  expect_save_refused(tmp.file("fifo"), "is not a regular file");
  expect_save_refused(tmp.file("to_dir"), "is a directory");
  expect_save_refused(tmp.file("to_fifo"), "is not a regular file");
  expect_save_refused(tmp.file("adir") + "/", "ends in '/'");
  expect_save_refused(tmp.file("new_dir") + "/", "ends in '/'");  // missing: still refused
  expect_save_refused(tmp.file("loop_a"), "symbolic links");
  expect_save_refused(tmp.file("self"), "symbolic links");
  // A loop among the folders and a name too long: the kernel's errors, as Error(io).
  expect_save_refused(tmp.file("self/x.safetensors"), "symbolic links");
  expect_save_refused(tmp.file(std::string(300, 'n')), "File name too long");

  CHECK(listing(tmp.dir) == before);
  CHECK(listing(tmp.dir / "adir") == std::vector<std::string>{"inside"});
  CHECK(read_file(tmp.file("adir/inside")) == std::vector<unsigned char>{1, 2, 3});
  CHECK(fs::is_fifo(fs::symlink_status(tmp.dir / "fifo")));
  for (const char* link : {"to_dir", "to_fifo", "loop_a", "loop_b", "self"}) {
    INFO(link);
    CHECK(fs::is_symlink(tmp.dir / link));
  }
  CHECK(fs::read_symlink(tmp.dir / "to_fifo") == fs::path("fifo"));
}

TEST_CASE("safetensors: missing file and every truncation of a valid file") {
  TempDir tmp;
  const std::string missing = tmp.file("missing.safetensors");
  try {
    (void)io::load_safetensors(missing);
    FAIL("expected Error(io)");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::io);
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
    CHECK(std::string(e.what()).find("No such file") != std::string::npos);
  }
  CHECK_THROWS_AS(io::safetensors_metadata(missing), Error);
  CHECK_THROWS_AS(io::load_safetensors(tmp.dir.string()), Error);  // a directory

  const std::string good = tmp.file("good.safetensors");
  io::save_safetensors(good,
                       {{"a", Tensor::from_vector(std::vector<float>{1, 2, 3})},
                        {"b", Tensor::from_vector(std::vector<std::int64_t>{7, 8})},
                        {"c", Tensor::from_vector(std::vector<bool>{true, false})}},
                       {{"k", "v"}});
  const std::vector<unsigned char> full = read_file(good);
  REQUIRE(full.size() > 8);
  for (std::size_t len = 0; len < full.size(); ++len) {
    INFO("prefix length " << len);
    std::vector<unsigned char> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    const std::string path = tmp.file("trunc.safetensors");
    write_file(path, prefix);
    bool threw = false;
    try {
      (void)io::load_safetensors(path);
    } catch (const Error& e) {
      threw = e.kind() == ErrorKind::io && std::string(e.what()).find(path) != std::string::npos;
    }
    CHECK(threw);
  }
  // And a trailing byte too many.
  std::vector<unsigned char> longer = full;
  longer.push_back(0);
  expect_io_error(tmp, longer, "data buffer has");
}

TEST_CASE("safetensors: hostile headers are Error(io) with the path and the problem") {
  TempDir tmp;
  const std::string f32_2 = R"("dtype":"F32","shape":[2])";

  SUBCASE("header length 2^62") {
    std::vector<unsigned char> b;
    put_u64(b, std::uint64_t{1} << 62);
    b.insert(b.end(), {'{', '}'});
    expect_io_error(tmp, b, "exceeds the limit");
  }
  SUBCASE("header length just above 100 MB") {
    std::vector<unsigned char> b;
    put_u64(b, 100'000'001);
    b.insert(b.end(), {'{', '}'});
    expect_io_error(tmp, b, "exceeds the limit");
  }
  SUBCASE("header longer than the file") {
    std::vector<unsigned char> b;
    put_u64(b, 64);
    b.insert(b.end(), {'{', '}'});
    expect_io_error(tmp, b, "exceeds the file");
  }
  SUBCASE("empty header") { expect_io_error(tmp, make_file("", {}), "does not start with '{'"); }
  SUBCASE("invalid JSON") {
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "F32",)", {}), "invalid JSON");
    expect_io_error(tmp, make_file("{\"a\xff\": 1}", {}), "invalid JSON");  // bad UTF-8
    expect_io_error(tmp, make_file(R"({} trailing)", {}), "invalid JSON");
  }
  SUBCASE("deep nesting") {
    std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
    expect_io_error(tmp, make_file(deep, {}), "nested deeper");
  }
  SUBCASE("wrong JSON types") {
    expect_io_error(tmp, make_file(R"({"a": 3})", {}), "not a JSON object");
    expect_io_error(tmp, make_file(R"({"a": {"dtype": 1, "shape": [2], "data_offsets": [0, 8]}})", eight_bytes),
                    "\"dtype\" missing");
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}})", eight_bytes),
                    "\"shape\" missing");
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", eight_bytes),
                    "is not an integer");
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(}})", eight_bytes), "\"data_offsets\" missing");
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8, 8]}})", eight_bytes),
                    "\"data_offsets\" missing");
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": ["0", "8"]}})", eight_bytes),
                    "not non-negative integers");
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [-8, 0]}})", eight_bytes),
                    "not non-negative integers");
    expect_io_error(tmp, make_file(R"({"__metadata__": {"k": 1}})", {}), "is not a string");
    expect_io_error(tmp, make_file(R"({"__metadata__": ["k"]})", {}), "\"__metadata__\" is not a JSON object");
    expect_io_error(tmp, make_file(R"([1, 2])", {}), "does not start with '{'");
  }
  SUBCASE("offsets out of range") {
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [8, 16]}})", eight_bytes),
                    "out of range");
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [8, 0]}})", eight_bytes),
                    "out of range");
    expect_io_error(tmp,
                    make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [18446744073709551615, 18446744073709551615]}})",
                              eight_bytes),
                    "out of range");
  }
  SUBCASE("overlapping offsets") {
    std::vector<unsigned char> data(12, 0);
    expect_io_error(tmp,
                    make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8]}, "b": {)" + f32_2 +
                                  R"(, "data_offsets": [4, 12]}})",
                              data),
                    "overlaps");
    expect_io_error(tmp,
                    make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8]}, "b": {)" + f32_2 +
                                  R"(, "data_offsets": [0, 8]}})",
                              eight_bytes),
                    "overlaps");
  }
  SUBCASE("gaps and trailing bytes") {
    std::vector<unsigned char> data(12, 0);
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [4, 12]}})", data), "gap");
    expect_io_error(tmp, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8]}})", data), "data buffer has");
    expect_io_error(tmp, make_file(R"({})", eight_bytes), "data buffer has");
  }
  SUBCASE("size mismatch") {
    std::vector<unsigned char> data(12, 0);
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", data),
                    "need 12");
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}})", eight_bytes),
                    "need 16");
  }
  SUBCASE("overflowing shapes") {
    expect_io_error(tmp,
                    make_file(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
                              eight_bytes),
                    "too large");
    expect_io_error(tmp,
                    make_file(R"({"a": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 8]}})",
                              eight_bytes),
                    "too large");
    expect_io_error(tmp,
                    make_file(R"({"a": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 8]}})",
                              eight_bytes),
                    "too large");
    // A zero dim with huge others: numel 0 but strides would overflow.
    expect_io_error(tmp,
                    make_file(R"({"a": {"dtype": "F32", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]}})",
                              {}),
                    "too large");
  }
  SUBCASE("unsupported dtype") {
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})", eight_bytes),
                    "unsupported dtype U8");
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}})", eight_bytes),
                    "unsupported dtype f32");
  }
  SUBCASE("negative shape") {
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", eight_bytes),
                    "negative shape");
  }
  SUBCASE("duplicate keys") {
    // nlohmann keeps a repeated key's last value: a tensor listed twice lost its first entry
    // (reported as a "gap", or loaded silently when both had the same offsets) and a repeated
    // "dtype" took the last one. Both are malformed headers now, named as such.
    std::vector<unsigned char> data(16, 0);
    expect_io_error(tmp,
                    make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8]}, "a": {)" + f32_2 +
                                  R"(, "data_offsets": [8, 16]}})",
                              data),
                    "the key \"a\" appears twice in the header");
    expect_io_error(tmp,
                    make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8]}, "a": {)" + f32_2 +
                                  R"(, "data_offsets": [0, 8]}})",
                              eight_bytes),
                    "the key \"a\" appears twice");
    expect_io_error(tmp,
                    make_file(R"({"a": {"dtype": "F32", "dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                              eight_bytes),
                    "the key \"dtype\" appears twice in one JSON object");
    expect_io_error(tmp, make_file(R"({"__metadata__": {"k": "1"}, "__metadata__": {"k": "2"}})", {}),
                    "the key \"__metadata__\" appears twice");
    expect_io_error(tmp, make_file(R"({"__metadata__": {"k": "1", "k": "2"}})", {}), "the key \"k\" appears twice");
    // The same name in two different objects is no repetition.
    const std::string path = tmp.file("same_names.safetensors");
    write_file(path, make_file(R"({"a": {)" + f32_2 + R"(, "data_offsets": [0, 8]}, "__metadata__": {"a": "x"}})",
                               eight_bytes));
    CHECK(io::load_safetensors(path).count("a") == 1);
    CHECK(io::safetensors_metadata(path).at("a") == "x");
  }
  SUBCASE("BOOL bytes other than 0 and 1") {
    expect_io_error(tmp, make_file(R"({"a": {"dtype": "BOOL", "shape": [8], "data_offsets": [0, 8]}})", eight_bytes),
                    "BOOL tensor \"a\" holds byte 2");
  }
  SUBCASE("a valid hand-written file with padding loads") {
    std::string h = R"({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})";
    h.append((8 - h.size() % 8) % 8, ' ');
    const std::string path = tmp.file("hand.safetensors");
    write_file(path, make_file(h, eight_bytes));
    io::TensorMap t = io::load_safetensors(path);
    CHECK(t.at("a").to_host<std::int32_t>() == std::vector<std::int32_t>{0x04030201, 0x08070605});
  }
}

// --- brrr's checksum record ("brrr.crc32" in "__metadata__", io/safetensors.cpp) ---------------

namespace {

/// The header text of a safetensors file (padding included).
std::string header_of(const std::vector<unsigned char>& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<std::size_t>(i)];
  return std::string(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
}

/// CRC-32 (zlib's) of a string, as 8 lowercase hex digits.
std::string crc_hex(const std::string& s) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08lx", crc32_z(0, reinterpret_cast<const Bytef*>(s.data()), s.size()));
  return buf;
}

/// A file with `tensors_json` entries whose "__metadata__" holds `record` as "brrr.crc32" and
/// `record_crc` (default: the record's right CRC) as "brrr.crc32.record".
std::vector<unsigned char> with_record(const std::string& tensors_json, const std::string& record,
                                       const std::vector<unsigned char>& data, std::string record_crc = "") {
  if (record_crc.empty()) record_crc = crc_hex(record);
  std::string escaped;
  for (char c : record) escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
  return make_file("{" + tensors_json + (tensors_json.empty() ? "" : ",") + R"("__metadata__":{"brrr.crc32":")" +
                       escaped + R"(","brrr.crc32.record":")" + record_crc + "\"}}",
                   data);
}

}  // namespace

TEST_CASE("safetensors checksums: written by save, verified by load, hidden from the metadata") {
  TempDir tmp;
  const std::string path = tmp.file("c.safetensors");
  io::save_safetensors(path, {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3})}}, {{"format", "pt"}});
  const std::string h = header_of(read_file(path));
  INFO(h);
  CHECK(h.find(R"("brrr.crc32":"{\"__metadata__\":\")") != std::string::npos);
  CHECK(h.find(R"(\"w\":\")") != std::string::npos);
  CHECK(io::safetensors_metadata(path) == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(io::load_safetensors(path).at("w").to_host<float>() == std::vector<float>{1, 2, 3});
  // The key is brrr's.
  CHECK_THROWS_WITH_AS(io::save_safetensors(tmp.file("r.safetensors"), {}, {{"brrr.crc32", "x"}}),
                       doctest::Contains("reserved"), Error);
  CHECK_THROWS_WITH_AS(io::save_safetensors(tmp.file("r.safetensors"), {}, {{"brrr.crc32.record", "x"}}),
                       doctest::Contains("reserved"), Error);
  CHECK_FALSE(fs::exists(tmp.dir / "r.safetensors"));
}

TEST_CASE("safetensors checksums: a record computed by Python (tests/fuzz/make_seeds.py) verifies") {
  const std::string dir = std::string(BRRR_FUZZ_CORPUS) + "/safetensors/";
  io::TensorMap t = io::load_safetensors(dir + "checksummed.safetensors");
  CHECK(t.at("weight").shape() == Shape{4, 3});
  CHECK(io::safetensors_metadata(dir + "checksummed.safetensors") == std::map<std::string, std::string>{{"format", "pt"}});
  // The same file with the record of other weights: the mismatch names the file and the tensor.
  const std::string bad = dir + "checksum_mismatch.safetensors";
  const std::string want = bad + ": tensor \"weight\": checksum mismatch";
  CHECK_THROWS_WITH_AS(io::load_safetensors(bad), doctest::Contains(want.c_str()), Error);
  CHECK_NOTHROW((void)io::safetensors_metadata(bad));  // the metadata itself is intact
}

TEST_CASE("safetensors checksums: a broken record is Error(io) naming the path and the problem") {
  TempDir tmp;
  const std::string a = R"("a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]})";
  // CRC-32s of the empty metadata (0) and of tensor "a" as I32 [2] with eight_bytes.
  io::save_safetensors(tmp.file("ref.safetensors"), {{"a", Tensor::from_vector(std::vector<std::int32_t>{0x04030201, 0x08070605})}});
  const std::string h = header_of(read_file(tmp.file("ref.safetensors")));
  const std::size_t at = h.find(R"(\"a\":\")");
  REQUIRE(at != std::string::npos);
  const std::string crc_a = h.substr(at + 8, 8);
  INFO("crc of a: " << crc_a);

  auto record = [&](const std::string& entries) { return with_record(a, "{" + entries + "}", eight_bytes); };
  const std::string meta_ok = R"("__metadata__":"00000000")", a_ok = R"("a":")" + crc_a + "\"";

  // A hand-made record that is right loads.
  const std::string path = tmp.file("hand.safetensors");
  write_file(path, record(meta_ok + "," + a_ok));
  CHECK(io::load_safetensors(path).at("a").to_host<std::int32_t>() == std::vector<std::int32_t>{0x04030201, 0x08070605});

  const std::string corrupt = "the checksum record \"brrr.crc32\" in \"__metadata__\" is corrupt";
  expect_io_error(tmp, with_record(a, "{" + meta_ok + "," + a_ok + "}", eight_bytes, "00000000"),
                  corrupt + " (its CRC-32 ");
  expect_io_error(tmp, with_record(a, "{" + meta_ok + "," + a_ok + "}", eight_bytes, "xyz"), corrupt + " (its CRC-32 ");
  expect_io_error(tmp, make_file("{" + a + R"(,"__metadata__":{"brrr.crc32":"{}"}})", eight_bytes),
                  "incomplete: \"brrr.crc32\" without \"brrr.crc32.record\"");
  expect_io_error(tmp, make_file("{" + a + R"(,"__metadata__":{"brrr.crc32.record":"00000000"}})", eight_bytes),
                  "incomplete: \"brrr.crc32.record\" without \"brrr.crc32\"");
  expect_io_error(tmp, with_record(a, "not json", eight_bytes), corrupt + " (not JSON)");
  expect_io_error(tmp, with_record(a, "[1]", eight_bytes), corrupt + " (not a JSON object)");
  expect_io_error(tmp, with_record(a, R"({"a":{"b":{}}})", eight_bytes), corrupt + " (nested JSON)");
  expect_io_error(tmp, record(meta_ok + R"(,"a":"ABCDEF01")"), corrupt + " (the value for \"a\" is not 8 lowercase hex");
  expect_io_error(tmp, record(meta_ok + R"(,"a":"123")"), "the value for \"a\" is not 8 lowercase hex");
  expect_io_error(tmp, record(meta_ok + R"(,"a":7)"), "the value for \"a\" is not 8 lowercase hex");
  expect_io_error(tmp, record(a_ok), corrupt + " (no checksum for \"__metadata__\")");
  expect_io_error(tmp, record(R"("__metadata__":"00000001",)" + a_ok), "checksum mismatch in \"__metadata__\"");
  expect_io_error(tmp, record(meta_ok), "tensor \"a\" has no checksum");
  expect_io_error(tmp, record(meta_ok + "," + a_ok + R"(,"b":"00000000")"), "checksum for tensor \"b\", which the file does not have");
  // A wrong tensor CRC is found when the data is read (load, not safetensors_metadata).
  const std::string flipped = crc_a.substr(0, 7) + (crc_a[7] == '0' ? "1" : "0");
  write_file(path, record(meta_ok + R"(,"a":")" + flipped + "\""));
  const std::string want = "tensor \"a\": checksum mismatch (stored " + flipped;
  CHECK_THROWS_WITH_AS(io::load_safetensors(path), doctest::Contains(want.c_str()), Error);
  CHECK_NOTHROW((void)io::safetensors_metadata(path));
}
