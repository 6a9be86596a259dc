// Faults a checkpoint survives (docs/reliability.md): a writer killed with SIGKILL in the
// middle of nn::save (a real child process, tests/io/fault_child.cpp, killed while its
// temporary file grows), a full disk (a real tmpfs when running as root, and RLIMIT_FSIZE
// everywhere), and a corrupted byte anywhere in a checkpoint (brrr's CRC-32s).
#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
import brrr;

using namespace brrr;
namespace fs = std::filesystem;

extern char** environ;

namespace {

struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() /
          ("brrr_faults_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

/// A running fault_child with its stdout on a pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;
  explicit Child(std::vector<std::string> args) {
    args.insert(args.begin(), BRRR_FAULT_CHILD);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    REQUIRE(::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out = fds[0];
  }
  ~Child() {
    if (out >= 0) ::close(out);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  /// Reads one line of the child's stdout (blocking).
  std::string line() {
    std::string s;
    char c;
    while (::read(out, &c, 1) == 1 && c != '\n') s += c;
    return s;
  }
  /// Everything left on stdout, then the wait status.
  std::pair<std::string, int> finish() {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = ::read(out, buf, sizeof buf)) > 0;) s.append(buf, static_cast<std::size_t>(n));
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return {s, status};
  }
};

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::int64_t>(st.st_size) : -1;
}

/// The one f32 tensor "weight" of a fault_child checkpoint: its value (all elements equal)
/// and element count; throws when the file is not whole.
std::pair<float, std::int64_t> blob_in(const std::string& path) {
  io::TensorMap t = io::load_safetensors(path);
  REQUIRE(t.size() == 1);
  std::vector<float> v = t.at("weight").to_host<float>();
  REQUIRE(!v.empty());
  for (float x : v) REQUIRE(x == v[0]);
  return {v[0], static_cast<std::int64_t>(v.size())};
}

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("kill -9 in the middle of nn::save never leaves a truncated file under the final name") {
  TempDir tmp;
  const std::string path = tmp.file("model.safetensors");
  constexpr std::int64_t old_numel = 1024 * 1024 / 4, new_mib = 64, new_numel = new_mib * 1024 * 1024 / 4;
  {
    Child c({"save", path, "1", "1"});
    auto [out, status] = c.finish();
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
  }
  REQUIRE(blob_in(path) == std::pair<float, std::int64_t>{1.0f, old_numel});
  const std::int64_t full_size = new_numel * 4 + 128;  // about: the header is small

  // Kill when the temporary file has reached these fractions of its final size (the last:
  // written, being flushed or renamed).
  int mid_write = 0;
  for (double fraction : {0.0, 0.25, 0.5, 0.9, 0.999}) {
    INFO("kill at " << fraction << " of the write");
    Child c({"save", path, "2", std::to_string(new_mib)});
    REQUIRE(c.line() == "saving");
    const std::string temp = path + ".tmp." + std::to_string(c.pid);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::int64_t seen = -1;
    while (std::chrono::steady_clock::now() < deadline) {
      seen = file_size(temp);
      if (seen > static_cast<std::int64_t>(fraction * static_cast<double>(full_size))) break;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {  // finished before we could kill it
        c.pid = -1;
        break;
      }
    }
    if (c.pid > 0) ::kill(c.pid, SIGKILL);
    auto [out, status] = c.finish();
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const bool temp_left = fs::exists(temp);
    // Whatever happened, the final name holds a whole checkpoint: the old one, or the new one.
    auto [value, numel] = blob_in(path);
    CHECK(((value == 1.0f && numel == old_numel) || (value == 2.0f && numel == new_numel)));
    if (killed && temp_left) {
      ++mid_write;
      CHECK(value == 1.0f);  // killed before the rename: the old file is untouched
      MESSAGE("killed with the temporary at " << file_size(temp) << " of ~" << full_size << " bytes; "
              << path << " still holds the old checkpoint");
      fs::remove(temp);  // a killed writer cannot clean up after itself
    }
  }
  // The write is large enough that the kills land inside it (not after the rename).
  CHECK(mid_write >= 4);
}

TEST_CASE("a full disk is an Error naming the path and leaves the old checkpoint whole") {
  TempDir tmp;
  SUBCASE("RLIMIT_FSIZE: write() fails with EFBIG") {
    const std::string path = tmp.file("model.safetensors");
    {
      Child c({"save", path, "1", "0.0625"});
      REQUIRE(WEXITSTATUS(c.finish().second) == 0);
    }
    Child c({"fsize", path, "4", std::to_string(1024 * 1024)});
    auto [out, status] = c.finish();
    INFO(out);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(out.find(path) != std::string::npos);
    CHECK(out.find("File too large") != std::string::npos);
    CHECK(blob_in(path).first == 1.0f);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.dir)) names.push_back(e.path().filename().string());
    CHECK(names == std::vector<std::string>{"model.safetensors"});
  }
  SUBCASE("a 1 MiB tmpfs: write() fails with ENOSPC") {
    fs::create_directories(tmp.dir / "disk");
    Child c({"tmpfs", (tmp.dir / "disk").string(), "1024", "4"});
    auto [out, status] = c.finish();
    INFO(out);
    REQUIRE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
      // Needs root (CI and the developers' machines run as root); RLIMIT_FSIZE covers the rest.
      MESSAGE("tmpfs case not run: " << out);
    } else {
      CHECK(WEXITSTATUS(status) == 0);
      CHECK(out.find((tmp.dir / "disk" / "model.safetensors").string()) != std::string::npos);
      CHECK(out.find("No space left on device") != std::string::npos);
    }
  }
}

TEST_CASE("a corrupted byte anywhere in a checkpoint is an Error naming the file (and the tensor)") {
  TempDir tmp;
  manual_seed(21);
  nn::Sequential model{nn::Linear(3, 2), nn::ReLU(), nn::Linear(2, 2)};
  model.impl()->register_buffer("steps", full({}, 7, {.dtype = DType::i64}));
  const std::string good = tmp.file("good.safetensors");
  nn::save(model, good);
  const std::vector<unsigned char> bytes = read_file(good);
  const io::TensorMap original = io::load_safetensors(good);
  if (std::getenv("BRRR_DEBUG_KEEP")) fs::copy_file(good, std::getenv("BRRR_DEBUG_KEEP"), fs::copy_options::overwrite_existing);

  // Where each tensor's bytes lie in the file, and where its header entry is.
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  struct Span {
    std::string name;
    std::size_t begin, end;  // file offsets
  };
  std::vector<Span> data_spans, entry_spans;
  {
    std::size_t offset = 8 + n;
    for (const auto& [name, t] : original) {  // the writer lays tensors out in name order
      data_spans.push_back({name, offset, offset + t.nbytes()});
      offset += t.nbytes();
      const std::size_t at = header.find("\"" + name + "\":{");
      REQUIRE(at != std::string::npos);
      entry_spans.push_back({name, 8 + at, 8 + header.find('}', at) + 1});
    }
    REQUIRE(offset == bytes.size());
  }
  auto tensor_at = [](const std::vector<Span>& spans, std::size_t i) -> std::string {
    for (const Span& s : spans)
      if (i >= s.begin && i < s.end) return s.name;
    return "";
  };

  const std::string bad = tmp.file("bad.safetensors");
  int errors = 0, whitespace_only = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xFF, 0x2A}) {
      std::vector<unsigned char> b = bytes;
      b[i] ^= mask;
      write_file(bad, b);
      INFO("byte " << i << " ^ " << int(mask));
      try {
        io::TensorMap t = io::load_safetensors(bad);
        // Only a change JSON ignores (padding turned into other whitespace) may load, and then
        // the content is exactly the original.
        CHECK(i >= 8 + header.find_last_not_of(' ') + 1);
        CHECK(i < 8 + n);
        CHECK(std::isspace(b[i]));
        REQUIRE(t.size() == original.size());
        for (const auto& [name, x] : original) {
          CHECK(t.at(name).dtype() == x.dtype());
          CHECK(t.at(name).shape() == x.shape());
          CHECK(std::memcmp(t.at(name).data_ptr(), x.data_ptr(), x.nbytes()) == 0);
        }
        ++whitespace_only;
      } catch (const Error& e) {
        ++errors;
        const std::string msg = e.what();
        INFO(msg);
        CHECK(e.kind() == ErrorKind::io);
        CHECK(msg.find(bad) != std::string::npos);
        if (std::string name = tensor_at(data_spans, i); !name.empty())
          CHECK(msg.find("tensor \"" + name + "\": checksum mismatch") != std::string::npos);
        // In a tensor's header entry: the message names a tensor, or (for broken JSON) quotes
        // the header around the broken byte.
        if (std::string name = tensor_at(entry_spans, i); !name.empty())
          CHECK((msg.find("tensor \"") != std::string::npos || msg.find("near byte") != std::string::npos));
      }
    }
  }
  MESSAGE(bytes.size() << " bytes x 4 corruptions: " << errors << " errors, " << whitespace_only
                       << " whitespace-only changes that load the same content");
  CHECK(errors + whitespace_only == static_cast<int>(4 * bytes.size()));
}
