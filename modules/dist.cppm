// brrr.dist — ranks: one process per device, sharing nothing, cooperating through collectives.
// The rendezvous store (TCPStore), process groups over NCCL (CUDA tensors) and Gloo (CPU
// tensors), and the collectives. docs/ranks.md walks through it; docs/architecture.md, section
// "Ranks", has the design notes.
module;
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
export module brrr.dist;
import brrr.tensor;

export namespace brrr::dist {

// ---------------------------------------------------------------------------------------
// The rendezvous store
// ---------------------------------------------------------------------------------------

struct TCPStoreOptions {
  /// Host the store in this process (a thread serving every client), as rank 0 does.
  bool is_server = false;
  /// How long connecting, get() and wait() may take before Error(distributed).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  /// Server only: serve on this already-listening socket instead of binding `port` (brrr-run
  /// hands rank 0 the port it bound, in BRRR_STORE_LISTEN_FD). The store takes ownership.
  int listen_fd = -1;
};

/// A key-value store over TCP with PyTorch's TCPStore semantics: the server (one thread in
/// rank 0) keeps the keys; every rank is a client. Values are byte strings. Every call that
/// waits has a deadline: missing keys, a master that never appears and a server that went
/// away are Error(distributed) naming the keys or host:port, never a hang. A cheap handle:
/// copies share one connection (calls are serialised by a mutex); clone() opens another.
/// The wire format is dist/store_protocol.hpp.
class TCPStore {
public:
  /// Connects to host:port (retrying until the timeout: the server may start later), after
  /// starting the server first when options.is_server (port 0: any free port, see port()).
  TCPStore(std::string host, int port, TCPStoreOptions options = {});
  ~TCPStore();
  TCPStore(const TCPStore&) = default;
  TCPStore& operator=(const TCPStore&) = default;

  /// Sets key to value (waking every wait() for it).
  void set(const std::string& key, const std::string& value);
  /// The value of key, waiting up to the timeout for it to be set.
  std::string get(const std::string& key);
  /// Adds delta to the integer at key (absent: 0) and returns the sum. Error(distributed) if
  /// the key holds something else than a decimal integer.
  std::int64_t add(const std::string& key, std::int64_t delta);
  /// Whether every key is set; never waits.
  bool check(const std::vector<std::string>& keys);
  /// Waits until every key is set, up to the store's timeout (or `timeout`); the error names
  /// the keys still missing.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// Removes key; returns whether it existed.
  bool delete_key(const std::string& key);
  /// Sets key to desired if it holds expected (or is absent and expected is empty); returns
  /// the value afterwards (PyTorch's compare_set).
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);

  /// The server's port (the bound one when 0 was asked).
  int port() const;
  const std::string& host() const;
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);
  bool is_server() const;
  /// A second connection to the same server (for another thread); keeps a hosted server alive.
  TCPStore clone() const;

private:
  struct Server;
  struct Connection;
  TCPStore(std::shared_ptr<Server> server, std::shared_ptr<Connection> connection);
  std::shared_ptr<Server> server_;          // set when this process hosts the store
  std::shared_ptr<Connection> connection_;
};

}  // namespace brrr::dist
