// The rendezvous store in one process: a server and clients on threads; every command, the
// timeouts and their messages, a master that never appears, a server that goes away; and the
// wire parsers on truncated, oversized, trailing and random bytes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "dist/store_protocol.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace std::chrono_literals;
namespace wire = brrr::dist::wire;

namespace {

dist::TCPStore server(std::chrono::milliseconds timeout = 5s) {
  return dist::TCPStore("127.0.0.1", 0, {.is_server = true, .timeout = timeout});
}
dist::TCPStore client_of(const dist::TCPStore& s, std::chrono::milliseconds timeout = 5s) {
  return dist::TCPStore("127.0.0.1", s.port(), {.timeout = timeout});
}

// A port nobody listens on: bound by a server that is then destroyed.
int dead_port() {
  int port = 0;
  {
    dist::TCPStore s = server();
    port = s.port();
  }
  return port;
}

}  // namespace

TEST_CASE("store: set, get, add, check, delete_key, compare_set across two clients") {
  dist::TCPStore s = server();
  CHECK(s.is_server());
  CHECK(s.port() > 0);
  dist::TCPStore c = client_of(s);
  CHECK_FALSE(c.is_server());

  s.set("a", "hello");
  CHECK(c.get("a") == "hello");
  std::string binary("\0\x01\xff zero", 8);
  c.set("bin", binary);
  CHECK(s.get("bin") == binary);
  c.set("empty", "");
  CHECK(s.get("empty").empty());

  CHECK(c.add("n", 5) == 5);
  CHECK(s.add("n", -7) == -2);
  CHECK(c.get("n") == "-2");
  CHECK_BRRR_ERROR(c.add("a", 1), ErrorKind::distributed, "add", "key a", "not an integer");

  CHECK(c.check({"a", "n"}));
  CHECK_FALSE(c.check({"a", "missing"}));
  CHECK(c.delete_key("a"));
  CHECK_FALSE(c.delete_key("a"));
  CHECK_FALSE(s.check({"a"}));

  CHECK(c.compare_set("cs", "", "first") == "first");   // absent + expected empty: set
  CHECK(c.compare_set("cs", "wrong", "x") == "first");  // mismatch: unchanged
  CHECK(s.compare_set("cs", "first", "second") == "second");
  CHECK(c.compare_set("absent", "x", "y").empty());
  CHECK_FALSE(c.check({"absent"}));
}

TEST_CASE("store: wait and get block until another client sets the keys") {
  dist::TCPStore s = server();
  dist::TCPStore c = client_of(s);
  std::thread setter([port = s.port()] {
    dist::TCPStore t("127.0.0.1", port, {.timeout = 5s});
    std::this_thread::sleep_for(50ms);
    t.set("k1", "v1");
    std::this_thread::sleep_for(20ms);
    t.add("k2", 3);
  });
  auto t0 = std::chrono::steady_clock::now();
  c.wait({"k1", "k2"});
  CHECK(std::chrono::steady_clock::now() - t0 >= 60ms);
  CHECK(c.get("k2") == "3");
  setter.join();

  std::thread late([port = s.port()] {
    dist::TCPStore t("127.0.0.1", port, {.timeout = 5s});
    std::this_thread::sleep_for(50ms);
    t.set("late", "here");
  });
  CHECK(c.get("late") == "here");  // get waits for the key
  late.join();
}

namespace {
std::atomic<int> interruptions{0};
void count_interruption(int) { interruptions.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

// A signal handled without SA_RESTART makes a blocked poll() return EINTR: a profiler's
// SIGPROF, libFuzzer's SIGALRM (the fuzzer found it: "no reply within 10000 ms" after a few
// ms). The client must resume its wait, not report a timeout.
TEST_CASE("store: signals interrupting a client's wait are not timeouts") {
  struct sigaction quiet{}, saved{};
  quiet.sa_handler = count_interruption;
  sigemptyset(&quiet.sa_mask);
  quiet.sa_flags = 0;  // no SA_RESTART: poll() and recv() return EINTR
  REQUIRE(sigaction(SIGUSR2, &quiet, &saved) == 0);
  interruptions = 0;

  dist::TCPStore s = server();
  dist::TCPStore c = client_of(s);
  std::atomic<bool> done{false};
  pthread_t target = pthread_self();
  std::thread pester([&] {
    while (!done) {
      pthread_kill(target, SIGUSR2);
      std::this_thread::sleep_for(200us);
    }
  });
  std::thread setter([port = s.port()] {
    dist::TCPStore t("127.0.0.1", port, {.timeout = 5s});
    std::this_thread::sleep_for(100ms);
    t.set("interrupted/key", "v");
  });
  std::string got;
  bool threw = false;
  try {
    got = c.get("interrupted/key");  // parks ~100 ms under a signal every 200 us
    for (int i = 0; i < 200; ++i) c.set("interrupted/n", std::to_string(i));
    got += c.get("interrupted/n");
  } catch (const Error& e) {
    threw = true;
    MESSAGE(e.what());
  }
  done = true;
  pester.join();
  setter.join();
  sigaction(SIGUSR2, &saved, nullptr);
  CHECK_FALSE(threw);
  CHECK(got == "v199");
  CHECK(interruptions.load() > 10);
}

TEST_CASE("store: timeouts are errors naming the missing keys, and the connection stays usable") {
  dist::TCPStore s = server();
  dist::TCPStore c = client_of(s, 300ms);
  s.set("present", "1");
  auto t0 = std::chrono::steady_clock::now();
  CHECK_BRRR_ERROR(c.wait({"present", "missing"}), ErrorKind::distributed, "TCPStore.wait", "[missing]",
                   "300 ms", "127.0.0.1:" + std::to_string(s.port()));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 290ms);
  CHECK(took < 3s);
  CHECK_BRRR_ERROR(c.get("nothing"), ErrorKind::distributed, "[nothing]", "not set within 300 ms");
  CHECK_BRRR_ERROR(c.wait({"missing"}, 100ms), ErrorKind::distributed, "not set within 100 ms");
  // The same connection still answers after the timed-out waits.
  c.set("after", "ok");
  CHECK(s.get("after") == "ok");
}

TEST_CASE("store: a master that never appears is an error within the timeout naming host:port") {
  int port = dead_port();
  auto t0 = std::chrono::steady_clock::now();
  CHECK_BRRR_ERROR(dist::TCPStore("127.0.0.1", port, {.timeout = 400ms}), ErrorKind::distributed,
                   "could not connect to the store at 127.0.0.1:" + std::to_string(port), "within 400 ms",
                   "MASTER_ADDR", "rank 0");
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 300ms);
  CHECK(took < 3s);
  CHECK_BRRR_ERROR(dist::TCPStore("no-such-host.invalid", 1234, {.timeout = 200ms}), ErrorKind::distributed,
                   "no-such-host.invalid:1234", "cannot resolve");
}

TEST_CASE("store: a client that connects before the server starts gets in once it is up") {
  int port = dead_port();
  std::atomic<bool> ok{false};
  std::thread early([&] {
    dist::TCPStore c("127.0.0.1", port, {.timeout = 5s});
    ok = c.get("hello") == "world";
  });
  std::this_thread::sleep_for(150ms);
  dist::TCPStore s("127.0.0.1", port, {.is_server = true, .timeout = 5s});
  s.set("hello", "world");
  early.join();
  CHECK(ok);
}

TEST_CASE("store: a server that goes away is an error, not a hang") {
  std::optional<dist::TCPStore> s(server());
  dist::TCPStore c = client_of(*s, 5s);
  c.set("x", "1");
  s.reset();  // the server thread stops and its sockets close
  auto t0 = std::chrono::steady_clock::now();
  CHECK_BRRR_ERROR(c.wait({"never"}), ErrorKind::distributed, "closed the connection", "rank 0");
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
}

TEST_CASE("store: clone() opens another connection and keeps a hosted server alive") {
  std::optional<dist::TCPStore> s(server());
  dist::TCPStore other = s->clone();
  CHECK(other.is_server());
  s->set("k", "v");
  s.reset();
  CHECK(other.get("k") == "v");
}

TEST_CASE("store: bad arguments are Error(value)") {
  dist::TCPStore s = server();
  CHECK_BRRR_ERROR(s.set("", "v"), ErrorKind::value, "TCPStore.set", "1 to 4096");
  CHECK_BRRR_ERROR(s.get(std::string(5000, 'k')), ErrorKind::value, "has 5000");
  CHECK_BRRR_ERROR(s.wait({}), ErrorKind::value, "TCPStore.wait");
  CHECK_BRRR_ERROR(s.wait({"k"}, 0ms), ErrorKind::value, "positive");
  CHECK_BRRR_ERROR(dist::TCPStore("127.0.0.1", 0, {}), ErrorKind::value, "client needs the server's port");
  CHECK_BRRR_ERROR(dist::TCPStore("127.0.0.1", 70000, {}), ErrorKind::value, "70000");
  int busy = s.port();
  CHECK_BRRR_ERROR(dist::TCPStore("127.0.0.1", busy, {.is_server = true}), ErrorKind::distributed,
                   "port " + std::to_string(busy), "MASTER_PORT");
}

// ---------------------------------------------------------------------------------------
// The wire format
// ---------------------------------------------------------------------------------------

namespace {
wire::ParseResult<wire::Request> parse(const std::string& bytes) {
  return wire::parse_request(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}
std::string frame_of(const std::string& payload) {
  std::string f;
  auto n = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>(n >> (8 * i) & 0xff));
  return f + payload;
}
}  // namespace

TEST_CASE("wire: every request round-trips, and every proper prefix is incomplete") {
  std::vector<wire::Request> all = {
      {.command = wire::Command::hello, .number = wire::magic, .version = wire::version},
      {.command = wire::Command::set, .keys = {"key"}, .value = std::string("v\0al", 4)},
      {.command = wire::Command::get, .keys = {"g"}},
      {.command = wire::Command::add, .keys = {"n"}, .number = -42},
      {.command = wire::Command::check, .keys = {"a", "bb", "ccc"}},
      {.command = wire::Command::wait, .keys = {"w"}, .number = 1500},
      {.command = wire::Command::delete_key, .keys = {"d"}},
      {.command = wire::Command::compare_set, .keys = {"c"}, .value = "old", .desired = "new"},
  };
  for (const auto& q : all) {
    CAPTURE(wire::to_string(q.command));
    std::string bytes = wire::encode(q);
    auto r = parse(bytes + "extra");  // a second message may follow
    REQUIRE(r.status == wire::Parse::complete);
    CHECK(r.consumed == bytes.size());
    CHECK(r.message.command == q.command);
    CHECK((r.message.keys == q.keys));
    CHECK(r.message.value == q.value);
    CHECK(r.message.desired == q.desired);
    CHECK(r.message.number == q.number);
    for (std::size_t n = 0; n < bytes.size(); ++n) CHECK(parse(bytes.substr(0, n)).status == wire::Parse::incomplete);
  }
  std::vector<wire::Reply> replies = {{.status = wire::Status::ok},
                                      {.status = wire::Status::value, .value = "xyz"},
                                      {.status = wire::Status::number, .number = -5},
                                      {.status = wire::Status::boolean, .number = 1},
                                      {.status = wire::Status::timed_out},
                                      {.status = wire::Status::error, .value = "bad"}};
  for (const auto& m : replies) {
    std::string bytes = wire::encode(m);
    auto r = wire::parse_reply(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    REQUIRE(r.status == wire::Parse::complete);
    CHECK(r.message.status == m.status);
    CHECK(r.message.value == m.value);
    CHECK(r.message.number == m.number);
  }
}

TEST_CASE("wire: malformed frames are invalid with a reason") {
  auto invalid = [](const std::string& bytes, const std::string& reason) {
    auto r = parse(bytes);
    CHECK(r.status == wire::Parse::invalid);
    CHECK_MESSAGE(r.error.find(reason) != std::string::npos, r.error);
    CHECK(r.consumed == 0);
  };
  invalid(std::string(4, '\0'), "empty payload");
  invalid(std::string("\xff\xff\xff\x7f", 4), "over the limit");  // claims 2 GiB: rejected before reading it
  invalid(frame_of("\x63"), "unknown command");
  invalid(frame_of(std::string("\x03\x01\0\0\0g!", 7)), "trailing bytes");
  invalid(frame_of(std::string("\x03\0\0\0\0", 5)), "key is empty");
  invalid(frame_of(std::string("\x03\x09\0\0\0ab", 7)), "runs past the payload");
  invalid(frame_of(std::string("\x03\x01\x10\0\0", 5)), "longer than the limit");
  invalid(frame_of(std::string("\x05\xff\xff\xff\xff", 5)), "more keys than the limit");
  invalid(frame_of(std::string("\x05\x00\x10\0\0", 5)), "more keys than the payload can hold");
  invalid(frame_of(std::string("\x06\0\0\0\0\0\0\0\0\x01\0\0\0\x01\0\0\0k", 18)), "timeout must be positive");
  invalid(frame_of(std::string("\x04\x01\0\0\0n\x01", 7)), "ends inside a field");
  auto bad_bool = frame_of(std::string("\x03\x02", 2));
  auto r = wire::parse_reply(reinterpret_cast<const std::uint8_t*>(bad_bool.data()), bad_bool.size());
  CHECK(r.status == wire::Parse::invalid);
  CHECK(r.error.find("neither 0 nor 1") != std::string::npos);
}

TEST_CASE("wire: random and mutated bytes never crash the parsers") {
  std::mt19937_64 rng(test::fresh_seed());
  std::vector<std::string> seeds;
  for (auto c : {wire::Command::set, wire::Command::wait, wire::Command::compare_set, wire::Command::check})
    seeds.push_back(wire::encode(wire::Request{.command = c, .keys = {"ab", "c"}, .value = "vv", .number = 9}));
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    if (i % 2) {
      bytes = seeds[rng() % seeds.size()];
      for (int m = 0; m < 3; ++m) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      bytes.resize(rng() % (bytes.size() + 1));
    } else {
      bytes.resize(rng() % 64);
      for (auto& ch : bytes) ch = static_cast<char>(rng());
      if (bytes.size() >= 4) bytes[2] = bytes[3] = 0;  // plausible lengths
    }
    auto q = parse(bytes);
    auto r = wire::parse_reply(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    CHECK(q.consumed <= bytes.size());
    CHECK(r.consumed <= bytes.size());
    if (q.status == wire::Parse::complete) {
      CHECK(q.consumed >= 5);
      for (const auto& k : q.message.keys) CHECK(!k.empty());
    }
  }
}

namespace {
// Sends `bytes` on a raw connection to the server at `port` (then shuts it for writing when
// `shut`), and returns every byte received until the server closes it (or 5 s pass).
std::string raw_exchange(int port, const std::string& bytes, bool shut = false) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  if (shut) shutdown(fd, SHUT_WR);
  std::string got;
  char buf[4096];
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;  // closed by the server (or 5 s passed)
    got.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return got;
}
wire::ParseResult<wire::Reply> first_reply(const std::string& got) {
  return wire::parse_reply(reinterpret_cast<const std::uint8_t*>(got.data()), got.size());
}
const std::string hello_bytes =
    wire::encode(wire::Request{.command = wire::Command::hello, .number = wire::magic, .version = wire::version});
}  // namespace

TEST_CASE("store: the server closes a connection that sends garbage and keeps serving the others") {
  dist::TCPStore s = server();
  // No hello first.
  auto r1 = first_reply(raw_exchange(s.port(), wire::encode(wire::Request{.command = wire::Command::get, .keys = {"k"}})));
  REQUIRE(r1.status == wire::Parse::complete);
  CHECK(r1.message.status == wire::Status::error);
  CHECK(r1.message.value.find("hello") != std::string::npos);
  // A hello, then a malformed frame.
  auto r2 = first_reply(raw_exchange(s.port(), hello_bytes + frame_of("\x63")));
  CHECK(r2.status == wire::Parse::complete);  // the hello's ok; then the error and the close
  // The store still serves proper clients.
  dist::TCPStore c = client_of(s);
  c.set("still", "here");
  CHECK(s.get("still") == "here");
}

namespace {
std::vector<wire::Reply> replies_of(const std::string& got) {
  std::vector<wire::Reply> all;
  std::size_t off = 0;
  while (off < got.size()) {
    auto r = wire::parse_reply(reinterpret_cast<const std::uint8_t*>(got.data()) + off, got.size() - off);
    REQUIRE(r.status == wire::Parse::complete);
    all.push_back(r.message);
    off += r.consumed;
  }
  return all;
}
std::string request(wire::Command c, std::vector<std::string> keys, std::int64_t number = 0, std::string value = {}) {
  return wire::encode(wire::Request{.command = c, .keys = std::move(keys), .value = std::move(value), .number = number});
}
// A malformed frame last: the server answers it with an error and closes the connection, so
// raw_exchange returns as soon as everything before it was answered.
const std::string closing_frame = frame_of("\x63");
}  // namespace

TEST_CASE("store: requests queued behind a wait are answered when it times out or is woken") {
  using wire::Command;
  using wire::Status;
  dist::TCPStore s = server();
  // Timed out, then the queued set of the waited-for key and a get (the set used to wake the
  // expired wait while the server walked its waits: a double erase).
  auto a = replies_of(raw_exchange(s.port(), hello_bytes + request(Command::wait, {"q1"}, 50) +
                                                 request(Command::set, {"q1"}, 0, "v") +
                                                 request(Command::get, {"q1"}) + closing_frame));
  REQUIRE(a.size() == 5);
  CHECK(a[0].status == Status::ok);
  CHECK(a[1].status == Status::timed_out);
  CHECK(a[2].status == Status::ok);
  CHECK(a[3].status == Status::value);
  CHECK(a[3].value == "v");
  CHECK(a[4].status == Status::error);
  // Woken by another client, then the queued get (it used to wait for the client's next bytes).
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    dist::TCPStore c = client_of(s);
    c.set("q2", "w");
  });
  auto b = replies_of(raw_exchange(s.port(), hello_bytes + request(Command::wait, {"q2"}, 60000) +
                                                 request(Command::get, {"q2"}) + closing_frame));
  setter.join();
  REQUIRE(b.size() == 4);
  CHECK(b[1].status == Status::ready);
  CHECK(b[2].status == Status::value);
  CHECK(b[2].value == "w");
  CHECK(b[3].status == Status::error);
}

TEST_CASE("store: a wait with the largest timeout the wire allows parks, wakes on set, and does not overflow the clock") {
  // The server used to add the wire's int64 milliseconds to its clock unchecked (a signed
  // overflow) and to cut the poll timeout from 64 to 32 bits.
  using wire::Command;
  using wire::Status;
  dist::TCPStore s = server();
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    s.set("late", "1");
  });
  auto r = replies_of(raw_exchange(s.port(), hello_bytes + request(Command::wait, {"late"}, INT64_MAX) +
                                                 request(Command::check, {"late"}) + closing_frame));
  setter.join();
  REQUIRE(r.size() == 4);
  CHECK(r[1].status == Status::ready);
  CHECK(r[2].status == Status::boolean);
  CHECK(r[2].number == 1);
  // A parked wait whose connection ends is dropped without a reply, and the server goes on.
  auto dropped = replies_of(raw_exchange(s.port(), hello_bytes + request(Command::wait, {"never"}, INT64_MAX), /*shut=*/true));
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].status == Status::ok);
  CHECK(s.check({"late"}));
}

TEST_CASE("wire: the fuzzer's seed corpus (tests/fuzz/corpus/store) parses and re-encodes exactly") {
  // The seeds are encoded by make_store_seeds.py, a second implementation of the format.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BRRR_FUZZ_CORPUS "/store")) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CAPTURE(entry.path().filename().string());
    const bool replies = entry.path().filename() == "replies";
    std::size_t off = 0;
    int messages = 0;
    while (off < bytes.size()) {
      const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data()) + off;
      std::size_t left = bytes.size() - off;
      std::string again;
      std::size_t used = 0;
      if (replies) {
        auto r = wire::parse_reply(p, left);
        REQUIRE(r.status == wire::Parse::complete);
        again = wire::encode(r.message);
        used = r.consumed;
      } else {
        auto r = wire::parse_request(p, left);
        REQUIRE(r.status == wire::Parse::complete);
        again = wire::encode(r.message);
        used = r.consumed;
      }
      CHECK(again == bytes.substr(off, used));
      off += used;
      ++messages;
    }
    CHECK(messages >= 3);
    ++files;
  }
  CHECK(files == 8);
}
