// libFuzzer target: the rendezvous store's wire protocol (dist/store_protocol.hpp) and the
// server that parses it (dist/store.cpp, a thread of rank 0 that any process able to reach
// MASTER_PORT can talk to). Each input is a byte stream, used twice:
//   1. parsed frame by frame by wire::parse_request and wire::parse_reply. Oracles: a parser
//      never reads past `size` (ASan) and never throws; a complete message re-encodes to
//      exactly the bytes it was parsed from (the format has one encoding per message) and
//      every proper prefix of them is incomplete; a complete request has 1..max_keys keys of
//      1..max_key bytes and a positive wait timeout; an invalid one says why and consumes
//      nothing; an incomplete one really is short of its frame;
//   2. sent, after a proper hello, on a raw TCP connection to a TCPStore server in this
//      process (one per 1000 inputs); once the replies stop coming (5 ms: a wait is parked)
//      the connection is shut for writing. Oracles: the server answers the hello with ok; every reply it sends is a
//      well-formed reply frame, one per request at most; it closes the connection within
//      10 s (a parked wait() ends with the connection); it keeps serving a proper client
//      afterwards.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "dist/store_protocol.hpp"
#include "tests/fuzz/fuzz_input.hpp"
import brrr;

using namespace brrr;
namespace wire = brrr::dist::wire;

namespace {

std::uint32_t frame_length(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void check_request(const wire::Request& q) {
  if (q.keys.size() > wire::max_keys) fuzz::violated("a request with more keys than the limit was accepted");
  for (const auto& k : q.keys)
    if (k.empty() || k.size() > wire::max_key) fuzz::violated("a key outside 1..max_key bytes was accepted");
  bool one_key = q.command == wire::Command::set || q.command == wire::Command::get ||
                 q.command == wire::Command::add || q.command == wire::Command::delete_key ||
                 q.command == wire::Command::compare_set;
  if (one_key && q.keys.size() != 1) fuzz::violated("a one-key command parsed with another number of keys");
  if ((q.command == wire::Command::check || q.command == wire::Command::wait) && q.keys.empty())
    fuzz::violated("a check or wait without keys was accepted");
  if (q.command == wire::Command::wait && q.number <= 0) fuzz::violated("a wait with a timeout <= 0 was accepted");
}
void check_message(const wire::Request& q) { check_request(q); }
void check_message(const wire::Reply& r) {
  if (r.status == wire::Status::boolean && r.number != 0 && r.number != 1)
    fuzz::violated("a boolean reply other than 0 or 1 was accepted");
}

// Parses data[0, size) frame by frame with `parse`, checking the oracles of part 1.
template <class Parser> void check_parser(Parser parse, const std::uint8_t* data, std::size_t size) {
  std::size_t off = 0;
  while (true) {
    const std::uint8_t* p = data + off;
    const std::size_t left = size - off;
    auto r = parse(p, left);
    if (r.consumed > left) fuzz::violated("a parser consumed more bytes than it was given");
    if (r.status == wire::Parse::incomplete) {
      if (r.consumed != 0) fuzz::violated("an incomplete parse consumed bytes");
      if (left >= 4) {
        std::uint32_t n = frame_length(p);
        if (n == 0 || n > wire::max_payload) fuzz::violated("a frame of a bad length is called incomplete");
        if (left - 4 >= n) fuzz::violated("a whole frame is called incomplete");
      }
      return;
    }
    if (r.status == wire::Parse::invalid) {
      if (r.consumed != 0 || r.error.empty()) fuzz::violated("an invalid parse consumed bytes or gave no reason");
      return;
    }
    if (left < 5 || r.consumed != 4 + std::size_t{frame_length(p)})
      fuzz::violated("a complete parse did not consume exactly its frame");
    check_message(r.message);
    std::string again = wire::encode(r.message);
    if (std::string_view(reinterpret_cast<const char*>(p), r.consumed) != again)
      fuzz::violated("a parsed message does not re-encode to its bytes");
    if (parse(p, r.consumed - 1).status != wire::Parse::incomplete || parse(p, 3).status != wire::Parse::incomplete)
      fuzz::violated("a proper prefix of a complete frame is not incomplete");
    off += r.consumed;
  }
}

void send_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed early (after a malformed request): not an error
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// The server under test and a proper client of it. One server serves 1000 inputs and is then
// replaced, so that the keys inputs set stay few; each connection to a new server would
// otherwise leave a TIME_WAIT socket per input and run out of local ports.
struct Server {
  dist::TCPStore store{"127.0.0.1", 0, {.is_server = true, .timeout = std::chrono::seconds(10)}};
  dist::TCPStore client{"127.0.0.1", store.port(), {.timeout = std::chrono::seconds(10)}};
  int inputs = 0;
};
std::unique_ptr<Server> server;

// Part 2: the bytes to the server, after a hello.
void check_server(const std::uint8_t* data, std::size_t size) {
  if (!server || server->inputs++ >= 1000) {
    server.reset();
    server = std::make_unique<Server>();
  }
  dist::TCPStore& store = server->store;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(store.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // A connection refused for want of local ports (a busy machine's TIME_WAIT sockets) is the
  // host's, not the server's: retried for up to a second.
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fuzz::violated(std::string("socket(): ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    int err = errno;
    ::close(fd);
    fd = -1;
    if (attempt == 100) fuzz::violated(std::string("cannot connect to the server: ") + std::strerror(err));
    ::usleep(10000);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  linger no_time_wait{1, 0};  // close with a reset: no TIME_WAIT socket per input
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &no_time_wait, sizeof no_time_wait);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  std::string hello = wire::encode(wire::Request{.command = wire::Command::hello, .number = wire::magic,
                                                 .version = wire::version});
  send_all(fd, hello.data(), hello.size());
  send_all(fd, data, size);

  // Each request gets one reply; after a malformed one, an error and the close. Wait for them
  // all while replies keep coming (a parked wait with a short timeout then times out with the
  // connection open, so the server serves what was queued behind it), then end the connection.
  std::size_t expected = 1;
  for (std::size_t off = 0;;) {
    auto q = wire::parse_request(data + off, size - off);
    if (q.status == wire::Parse::invalid) ++expected;
    if (q.status != wire::Parse::complete) break;
    ++expected;
    off += q.consumed;
  }
  std::string got;
  char buf[65536];
  std::size_t answered = 0, parsed_to = 0;
  auto count_replies = [&] {
    while (true) {
      auto r = wire::parse_reply(reinterpret_cast<const std::uint8_t*>(got.data()) + parsed_to, got.size() - parsed_to);
      if (r.status == wire::Parse::invalid) fuzz::violated("the server sent a malformed reply: " + r.error);
      if (r.status == wire::Parse::incomplete) return;
      if (answered == 0 && r.message.status != wire::Status::ok) fuzz::violated("the server did not answer the hello with ok");
      ++answered;
      parsed_to += r.consumed;
    }
  };
  bool closed = false;
  while (answered < expected) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, 5);
    if (ready < 0 && errno == EINTR) continue;  // libFuzzer's SIGALRM, not a parked wait
    if (ready != 1) break;                      // 5 ms without a reply: a wait is parked
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      closed = true;
      break;
    }
    got.append(buf, static_cast<std::size_t>(n));
    count_replies();
  }
  ::shutdown(fd, SHUT_WR);
  while (!closed) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) fuzz::violated("the server kept the connection open for 10 s");
      break;  // reset by the server: also a close
    }
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  count_replies();  // the last reply may be cut where the server dropped the connection
  if (answered > expected) fuzz::violated("the server sent more replies than there were requests");

  // Still serving: a proper client's set and get.
  server->client.set("fuzz/alive", std::to_string(server->inputs));
  if (store.get("fuzz/alive") != std::to_string(server->inputs))
    fuzz::violated("the server did not keep a proper client's key after the fuzzed connection");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_parser(wire::parse_request, data, size);
  check_parser(wire::parse_reply, data, size);
  try {
    check_server(data, size);
  } catch (const Error& e) {
    fuzz::violated(std::string("a proper client failed after the fuzzed connection: ") + e.what());
  }
  return 0;
}
