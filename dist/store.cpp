// TCPStore: the rendezvous key-value store (PyTorch's TCPStore semantics) and its server.
//
// The server is one thread with a poll() loop over the listening socket, its clients and a
// wake-up pipe. Requests on one connection are answered in order; a wait() whose keys are
// missing parks its connection until the keys are set or the wait's own deadline passes
// (the server then answers timed_out, so a client never waits on a reply that will not come).
// Clients are blocking sockets with a deadline on every send and receive.
module;
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dist/listen_socket.hpp"
#include "dist/store_protocol.hpp"
module brrr.dist;
import brrr.tensor;

namespace brrr::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

[[noreturn]] void store_error(const std::string& message) { throw Error(ErrorKind::distributed, "TCPStore: " + message); }

std::string errno_text() { return std::strerror(errno); }

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s = "[";
  for (std::size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : "") + keys[i];
  return s + "]";
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

// poll() on one fd until `events` arrive or `deadline` passes: true when they arrived. A
// signal that interrupts the wait (a profiler's SIGPROF, libFuzzer's SIGALRM, SIGCHLD) is not
// a timeout: the wait resumes with the time that is left.
bool poll_until(int fd, short events, Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    int ready = poll(&p, 1, static_cast<int>(std::clamp<long>(left, 0, 1 << 30)));
    if (ready == 1) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

int listen_on(int port) {
  int asked = port;
  int fd = listen_on_any(port);
  if (fd < 0)
    store_error("cannot serve on port " + std::to_string(asked) + ": " + errno_text() +
                (errno == EADDRINUSE ? " (another program holds it: choose another MASTER_PORT)" : ""));
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

struct TCPStore::Server {
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  int port = 0;
  std::thread thread;

  struct Client {
    int fd = -1;
    std::string in, out;
    bool greeted = false;
    bool parked = false;  // a wait() is pending: later requests wait their turn
    bool closing = false; // close once `out` is written (after a protocol error)
  };
  struct Waiter {
    Client* client;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };
  std::list<Client> clients;
  std::list<Waiter> waiters;
  std::unordered_map<std::string, std::string> data;

  explicit Server(int port_or_zero, int adopted_fd) {
    listen_fd = adopted_fd >= 0 ? adopted_fd : listen_on(port_or_zero);
    fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
    set_nonblocking(listen_fd);
    port = local_port(listen_fd);
    if (adopted_fd >= 0 && port_or_zero != 0 && port != port_or_zero)
      store_error("the listening socket handed over (BRRR_STORE_LISTEN_FD) is on port " + std::to_string(port) +
                  ", not MASTER_PORT " + std::to_string(port_or_zero));
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) store_error("pipe: " + errno_text());
    thread = std::thread([this] { loop(); });
  }
  ~Server() {
    char c = 'q';
    (void)!write(wake[1], &c, 1);
    thread.join();
    for (Client& c2 : clients) close(c2.fd);
    close(listen_fd);
    close(wake[0]);
    close(wake[1]);
  }

  void reply(Client& c, const wire::Reply& r) { c.out += wire::encode(r); }
  void reply_status(Client& c, wire::Status s) { reply(c, wire::Reply{.status = s}); }

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }

  // Answers every parked wait whose keys are all set now. What their clients queued behind
  // the wait is served by serve_ready() (not from here: a request served here could wake or
  // expire waits while this loop walks them).
  void wake_waiters() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (has_all(it->keys)) {
        reply_status(*it->client, wire::Status::ready);
        it->client->parked = false;
        it = waiters.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Serves every client that is not parked on a wait, until none has a whole request left
  // (serving one client's set may unpark another, whose queued requests are then served).
  void serve_ready() {
    for (bool again = true; again;) {
      again = false;
      for (Client& c : clients) {
        if (c.parked || c.closing || c.in.empty()) continue;
        std::size_t before = c.in.size();
        serve(c);
        again = again || c.in.size() != before;
      }
    }
  }

  void handle(Client& c, wire::Request& q) {
    using wire::Command;
    using wire::Status;
    if (!c.greeted) {
      if (q.command != Command::hello || q.number != wire::magic || q.version != wire::version) {
        reply(c, {.status = Status::error, .value = "expected a hello of protocol version " +
                                                    std::to_string(wire::version)});
        c.closing = true;
        return;
      }
      c.greeted = true;
      reply_status(c, Status::ok);
      return;
    }
    const std::string& key = q.keys.empty() ? std::string() : q.keys[0];
    switch (q.command) {
      case Command::hello: reply_status(c, Status::ok); return;
      case Command::set:
        data[key] = std::move(q.value);
        reply_status(c, Status::ok);
        wake_waiters();
        return;
      case Command::get: {
        auto it = data.find(key);
        if (it == data.end()) reply_status(c, Status::not_found);
        else reply(c, {.status = Status::value, .value = it->second});
        return;
      }
      case Command::add: {
        std::int64_t v = 0;
        auto it = data.find(key);
        if (it != data.end()) {
          const std::string& s = it->second;
          auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
          if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
            reply(c, {.status = Status::error, .value = "add: key " + key + " holds a value that is not an integer"});
            return;
          }
        }
        if (__builtin_add_overflow(v, q.number, &v)) {
          reply(c, {.status = Status::error, .value = "add: key " + key + " would overflow int64"});
          return;
        }
        data[key] = std::to_string(v);
        reply(c, {.status = Status::number, .number = v});
        wake_waiters();
        return;
      }
      case Command::check: reply(c, {.status = Status::boolean, .number = has_all(q.keys) ? 1 : 0}); return;
      case Command::wait:
        if (has_all(q.keys)) {
          reply_status(c, Status::ready);
        } else {
          c.parked = true;
          // The wire allows any positive int64 of milliseconds: bounded so that the deadline
          // cannot overflow the clock (2^40 ms is 35 years).
          waiters.push_back({&c, std::move(q.keys), Clock::now() + milliseconds(std::min<std::int64_t>(q.number, std::int64_t{1} << 40))});
        }
        return;
      case Command::delete_key: reply(c, {.status = Status::boolean, .number = data.erase(key) ? 1 : 0}); return;
      case Command::compare_set: {
        auto it = data.find(key);
        bool absent = it == data.end();
        if (absent ? q.value.empty() : it->second == q.value) {
          data[key] = q.desired;
          reply(c, {.status = Status::value, .value = q.desired});
          wake_waiters();
        } else {
          reply(c, {.status = Status::value, .value = absent ? std::string() : it->second});
        }
        return;
      }
    }
  }

  // Parses and answers the whole requests in c.in (stopping at a parked wait).
  void serve(Client& c) {
    std::size_t used = 0;
    while (!c.parked && !c.closing) {
      auto r = wire::parse_request(reinterpret_cast<const std::uint8_t*>(c.in.data()) + used, c.in.size() - used);
      if (r.status == wire::Parse::incomplete) break;
      if (r.status == wire::Parse::invalid) {
        reply(c, {.status = wire::Status::error, .value = "malformed request: " + r.error});
        c.closing = true;
        break;
      }
      used += r.consumed;
      handle(c, r.message);
    }
    c.in.erase(0, used);
  }

  void drop(std::list<Client>::iterator it) {
    waiters.remove_if([&](const Waiter& w) { return w.client == &*it; });
    close(it->fd);
    clients.erase(it);
  }

  void loop() {
    char buf[65536];
    while (true) {
      // Expired waits answer timed_out; then the requests queued behind them (and behind
      // waits a set woke) are served.
      auto now = Clock::now();
      for (auto it = waiters.begin(); it != waiters.end();) {
        if (it->deadline <= now) {
          reply_status(*it->client, wire::Status::timed_out);
          it->client->parked = false;
          it = waiters.erase(it);
        } else {
          ++it;
        }
      }
      serve_ready();
      now = Clock::now();
      int timeout_ms = -1;
      for (const Waiter& w : waiters) {
        auto left = std::chrono::duration_cast<milliseconds>(w.deadline - now).count() + 1;
        auto ms = static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
        if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = ms;
      }
      std::vector<pollfd> fds{{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      std::vector<std::list<Client>::iterator> owners;
      for (auto it = clients.begin(); it != clients.end(); ++it) {
        fds.push_back({it->fd, static_cast<short>(POLLIN | (it->out.empty() ? 0 : POLLOUT)), 0});
        owners.push_back(it);
      }
      if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;  // shutting down
      if (fds[1].revents & POLLIN) {
        while (true) {
          int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          set_nodelay(fd);
          clients.push_back(Client{.fd = fd});
        }
      }
      for (std::size_t k = 0; k < owners.size(); ++k) {
        auto it = owners[k];
        Client& c = *it;
        short ev = fds[k + 2].revents;
        bool dead = false;
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
          ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
          if (n > 0) {
            c.in.append(buf, static_cast<std::size_t>(n));
            serve(c);
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            dead = true;
          }
        }
        if (!dead && !c.out.empty()) {
          ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (n > 0) c.out.erase(0, static_cast<std::size_t>(n));
          else if (n < 0 && errno != EAGAIN && errno != EINTR) dead = true;
        }
        if (dead || (c.closing && c.out.empty())) drop(it);
      }
    }
  }
};

// ---------------------------------------------------------------------------------------
// Client connection
// ---------------------------------------------------------------------------------------

struct TCPStore::Connection {
  std::string host;
  int port = 0;
  milliseconds timeout;
  int fd = -1;
  std::mutex mutex;
  std::string in;

  Connection(std::string h, int p, milliseconds t) : host(std::move(h)), port(p), timeout(t) { connect(); }
  ~Connection() {
    if (fd >= 0) close(fd);
  }

  std::string where() const { return host + ":" + std::to_string(port); }

  // Connects, retrying refused or unreachable attempts until the timeout: the server may not
  // be up yet. The message says what was tried and the last error.
  void connect() {
    auto deadline = Clock::now() + timeout;
    std::string last = "no attempt";
    auto pause = milliseconds(10);
    while (true) {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      if (rc != 0) {
        last = std::string("cannot resolve the host: ") + gai_strerror(rc);
      } else {
        for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
          int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
          if (s < 0) continue;
          int r = ::connect(s, a->ai_addr, a->ai_addrlen);
          if (r != 0 && errno == EINPROGRESS) {
            bool ready = poll_until(s, POLLOUT, std::min(deadline, Clock::now() + milliseconds(1000)));
            int err = 0;
            socklen_t len = sizeof err;
            if (ready && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) r = 0;
            else errno = ready ? err : ETIMEDOUT;
          }
          if (r == 0) {
            fd = s;
          } else {
            last = errno_text();
            close(s);
          }
        }
        freeaddrinfo(found);
      }
      if (fd >= 0) break;
      if (Clock::now() + pause >= deadline)
        store_error("could not connect to the store at " + where() + " within " + std::to_string(timeout.count()) +
                    " ms (last error: " + last + "); is rank 0 running, and do all ranks have the same MASTER_ADDR "
                    "and MASTER_PORT?");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, milliseconds(500));
    }
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    set_nodelay(fd);
    wire::Reply r = call({.command = wire::Command::hello, .number = wire::magic, .version = wire::version}, timeout);
    if (r.status != wire::Status::ok) store_error("the server at " + where() + " refused the connection: " + r.value);
  }

  // One request and its reply; `wait` bounds the time until the reply starts arriving.
  wire::Reply call(const wire::Request& q, milliseconds wait) {
    std::string bytes = wire::encode(q);
    auto deadline = Clock::now() + wait;
    const char* what = wire::to_string(q.command);
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      if (!poll_until(fd, POLLOUT, deadline))
        store_error(std::string(what) + ": could not send to the store at " + where() + " within " +
                    std::to_string(wait.count()) + " ms");
      ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EINTR && errno != EAGAIN)
        store_error(std::string(what) + ": lost the connection to the store at " + where() + " (" + errno_text() +
                    "); the rank hosting it (rank 0) has probably exited");
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    char buf[65536];
    while (true) {
      auto r = wire::parse_reply(reinterpret_cast<const std::uint8_t*>(in.data()), in.size());
      if (r.status == wire::Parse::complete) {
        in.erase(0, r.consumed);
        if (r.message.status == wire::Status::error)
          store_error(std::string(what) + ": the server at " + where() + " says: " + r.message.value);
        return r.message;
      }
      if (r.status == wire::Parse::invalid)
        store_error(std::string(what) + ": malformed reply from the store at " + where() + ": " + r.error);
      if (!poll_until(fd, POLLIN, deadline))
        store_error(std::string(what) + ": no reply from the store at " + where() + " within " +
                    std::to_string(wait.count()) + " ms");
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
        store_error(std::string(what) + ": the store at " + where() +
                    " closed the connection; the rank hosting it (rank 0) has probably exited");
      if (n > 0) in.append(buf, static_cast<std::size_t>(n));
    }
  }
};

// ---------------------------------------------------------------------------------------
// TCPStore
// ---------------------------------------------------------------------------------------

namespace {
void check_key(const char* op, const std::string& key) {
  if (key.empty() || key.size() > wire::max_key)
    throw Error(ErrorKind::value, std::string("TCPStore.") + op + ": keys must have 1 to " +
                                      std::to_string(wire::max_key) + " bytes, this one has " +
                                      std::to_string(key.size()));
}
void check_keys(const char* op, const std::vector<std::string>& keys) {
  if (keys.empty() || keys.size() > wire::max_keys)
    throw Error(ErrorKind::value, std::string("TCPStore.") + op + ": 1 to " + std::to_string(wire::max_keys) +
                                      " keys, not " + std::to_string(keys.size()));
  for (const auto& k : keys) check_key(op, k);
}
void check_value(const char* op, const std::string& v) {
  if (v.size() > wire::max_payload - wire::max_key - 64)
    throw Error(ErrorKind::value, std::string("TCPStore.") + op + ": a value of " + std::to_string(v.size()) +
                                      " bytes is over the limit");
}
// Slack for a reply to a server-side wait beyond the wait itself.
constexpr milliseconds reply_slack{10000};
}  // namespace

TCPStore::TCPStore(std::string host, int port, TCPStoreOptions options) {
  if (port < 0 || port > 65535)
    throw Error(ErrorKind::value, "TCPStore: port " + std::to_string(port) + " is outside [0, 65535]");
  if (options.timeout.count() <= 0)
    throw Error(ErrorKind::value, "TCPStore: the timeout must be positive, not " +
                                      std::to_string(options.timeout.count()) + " ms");
  if (options.is_server) {
    server_ = std::make_shared<Server>(port, options.listen_fd);
    port = server_->port;
  } else if (port == 0) {
    throw Error(ErrorKind::value, "TCPStore: a client needs the server's port (0 only for a server)");
  }
  connection_ = std::make_shared<Connection>(std::move(host), port, options.timeout);
}

TCPStore::TCPStore(std::shared_ptr<Server> server, std::shared_ptr<Connection> connection)
    : server_(std::move(server)), connection_(std::move(connection)) {}

TCPStore::~TCPStore() = default;

TCPStore TCPStore::clone() const {
  return TCPStore(server_, std::make_shared<Connection>(connection_->host, connection_->port, connection_->timeout));
}

void TCPStore::set(const std::string& key, const std::string& value) {
  check_key("set", key);
  check_value("set", value);
  std::lock_guard lock(connection_->mutex);
  connection_->call({.command = wire::Command::set, .keys = {key}, .value = value}, connection_->timeout);
}

std::string TCPStore::get(const std::string& key) {
  check_key("get", key);
  wait({key});
  std::lock_guard lock(connection_->mutex);
  wire::Reply r = connection_->call({.command = wire::Command::get, .keys = {key}}, connection_->timeout);
  if (r.status != wire::Status::value)
    throw Error(ErrorKind::distributed, "TCPStore.get: key " + key + " was deleted while being read");
  return r.value;
}

std::int64_t TCPStore::add(const std::string& key, std::int64_t delta) {
  check_key("add", key);
  std::lock_guard lock(connection_->mutex);
  return connection_->call({.command = wire::Command::add, .keys = {key}, .number = delta}, connection_->timeout).number;
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  check_keys("check", keys);
  std::lock_guard lock(connection_->mutex);
  return connection_->call({.command = wire::Command::check, .keys = keys}, connection_->timeout).number != 0;
}

void TCPStore::wait(const std::vector<std::string>& keys) { wait(keys, connection_->timeout); }

void TCPStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  check_keys("wait", keys);
  if (timeout.count() <= 0)
    throw Error(ErrorKind::value, "TCPStore.wait: the timeout must be positive, not " +
                                      std::to_string(timeout.count()) + " ms");
  wire::Reply r;
  {
    std::lock_guard lock(connection_->mutex);
    r = connection_->call({.command = wire::Command::wait, .keys = keys, .number = timeout.count()},
                          timeout + reply_slack);
  }
  if (r.status == wire::Status::ready) return;
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!check({k})) missing.push_back(k);
  throw Error(ErrorKind::distributed, "TCPStore.wait: " + join_keys(missing.empty() ? keys : missing) +
                                          " not set within " + std::to_string(timeout.count()) + " ms (store at " +
                                          connection_->where() + ")");
}

bool TCPStore::delete_key(const std::string& key) {
  check_key("delete_key", key);
  std::lock_guard lock(connection_->mutex);
  return connection_->call({.command = wire::Command::delete_key, .keys = {key}}, connection_->timeout).number != 0;
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  check_key("compare_set", key);
  check_value("compare_set", expected);
  check_value("compare_set", desired);
  std::lock_guard lock(connection_->mutex);
  return connection_
      ->call({.command = wire::Command::compare_set, .keys = {key}, .value = expected, .desired = desired},
             connection_->timeout)
      .value;
}

int TCPStore::port() const { return connection_->port; }
const std::string& TCPStore::host() const { return connection_->host; }
milliseconds TCPStore::timeout() const { return connection_->timeout; }
void TCPStore::set_timeout(milliseconds timeout) {
  if (timeout.count() <= 0)
    throw Error(ErrorKind::value, "TCPStore.set_timeout: the timeout must be positive, not " +
                                      std::to_string(timeout.count()) + " ms");
  std::lock_guard lock(connection_->mutex);
  connection_->timeout = timeout;
}
bool TCPStore::is_server() const { return server_ != nullptr; }

}  // namespace brrr::dist
