// brrr-run — starts one process per rank with torchrun's environment variables, prefixes
// their output with the rank, forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT, and when one rank fails
// stops the others and exits with that rank's status, saying which rank failed and how.
//
//   brrr-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//            [--no-prefix] [--grace-period S] prog args...
//
// A plain C++ program (no brrr library, Linux only): fork/exec per rank, one poll() loop over
// the ranks' output pipes and a signalfd. Each rank runs in its own process group, so a
// forwarded signal reaches what the rank started too, and a terminal's Ctrl-C reaches the
// ranks only through this launcher (once). With PR_SET_PDEATHSIG a rank dies with the
// launcher, so a killed launcher leaves nothing behind.
//
// Rendezvous is not the launcher's business: rank 0 hosts the store (dist/store.cpp) at
// MASTER_ADDR:MASTER_PORT, as a program started by hand or by mpirun with the same variables
// would. When the port is left to brrr-run (--master-port 0, the default on one node) the
// launcher binds a free port itself and hands the listening socket to rank 0
// (BRRR_STORE_LISTEN_FD), so no other program can take the port in between.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dist/listen_socket.hpp"

namespace {

const char* usage =
    "usage: brrr-run [options] PROGRAM [ARGS...]\n"
    "Starts PROGRAM once per rank with torchrun's variables RANK, LOCAL_RANK, WORLD_SIZE,\n"
    "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and GROUP_RANK = the node rank).\n"
    "options:\n"
    "  --nproc-per-node N   ranks on this node (default 1)\n"
    "  --nnodes M           nodes, each with its own brrr-run (default 1)\n"
    "  --node-rank R        this node's index in [0, M) (default 0)\n"
    "  --master-addr A      address of the node of rank 0, which hosts the store (default 127.0.0.1)\n"
    "  --master-port P      its port; 0 picks a free one (default 0 on one node, 29500 on several)\n"
    "  --no-prefix          do not prefix output lines with \"[rank N] \" (default: prefix)\n"
    "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping ranks (default 5)\n"
    "When a rank fails (non-zero exit or a signal) the others on this node get SIGTERM, then\n"
    "SIGKILL after the grace period, and brrr-run exits with the failed rank's code (128 + the\n"
    "signal number for a signal). SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to every rank.\n";

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "brrr-run: %s\n", message.c_str());
  std::exit(2);
}

// Parses a whole decimal integer in [lo, hi] or fails naming the option.
long parse_int(const std::string& option, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    fail(option + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text +
         "'");
  return v;
}

struct Config {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;  // -1: the default (0 on one node, 29500 on several)
  bool prefix = true;
  double grace_s = 5;
  std::vector<std::string> program;
};

Config parse_args(int argc, char** argv) {
  Config c;
  int i = 1;
  // "--opt value" or "--opt=value"; torchrun's underscore spellings are accepted too.
  auto value = [&](std::string& arg, std::string& out) {
    auto eq = arg.find('=');
    if (eq != std::string::npos) {
      out = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      return;
    }
    if (i + 1 >= argc) fail(arg + " needs a value");
    out = argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;
    for (auto& ch : arg)
      if (ch == '_') ch = '-';
    std::string name = arg.substr(0, arg.find('='));
    std::string v;
    if (name == "--help" || name == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    } else if (name == "--no-prefix") {
      c.prefix = false;
    } else if (name == "--prefix") {
      c.prefix = true;
    } else if (name == "--nproc-per-node") {
      value(arg, v);
      c.nproc_per_node = static_cast<int>(parse_int(name, v, 1, 4096));
    } else if (name == "--nnodes") {
      value(arg, v);
      c.nnodes = static_cast<int>(parse_int(name, v, 1, 65536));
    } else if (name == "--node-rank") {
      value(arg, v);
      c.node_rank = static_cast<int>(parse_int(name, v, 0, 65535));
    } else if (name == "--master-addr") {
      value(arg, v);
      if (v.empty()) fail("--master-addr is empty");
      c.master_addr = v;
    } else if (name == "--master-port") {
      value(arg, v);
      c.master_port = static_cast<int>(parse_int(name, v, 0, 65535));
    } else if (name == "--grace-period") {
      value(arg, v);
      c.grace_s = static_cast<double>(parse_int(name, v, 0, 3600));
    } else {
      fail("unknown option " + name + " (--help lists them)");
    }
  }
  for (; i < argc; ++i) c.program.emplace_back(argv[i]);
  if (c.program.empty()) fail("no program to run (--help for usage)");
  if (c.node_rank >= c.nnodes)
    fail("--node-rank " + std::to_string(c.node_rank) + " is outside [0, " + std::to_string(c.nnodes) + ")");
  if (c.master_port < 0) c.master_port = c.nnodes == 1 ? 0 : 29500;
  if (c.master_port == 0 && c.nnodes > 1)
    fail("--master-port 0 (a free port) works on one node only: with --nnodes " + std::to_string(c.nnodes) +
         " every node must be given the same port");
  return c;
}

// The store's listening socket on `port` (0: any free one); sets `port` to the bound one.
int bind_store_socket(int& port) {
  int asked = port;
  int fd = brrr::dist::listen_on_any(port);
  if (fd < 0)
    fail("cannot bind the store's port " + std::to_string(asked) + ": " + std::strerror(errno) +
         (errno == EADDRINUSE ? " (another program or an earlier run holds it; choose another --master-port)" : ""));
  return fd;
}

struct Stream {
  int fd = -1;          // read end of the rank's pipe; -1 once closed
  std::string partial;  // bytes after the last newline
};

struct Rank {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
};

void write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // our own stdout is gone: nothing better to do than drop output
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Writes the complete lines of `s` (each prefixed) to `to`; keeps the rest for later.
// A line longer than 64 KiB is written in pieces rather than buffered without bound.
void emit(Stream& s, const std::string& prefix, int to, bool flush) {
  std::size_t start = 0;
  while (true) {
    std::size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = prefix + s.partial.substr(start, nl - start + 1);
    write_all(to, line.data(), line.size());
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if ((flush || s.partial.size() > 65536) && !s.partial.empty()) {
    std::string line = prefix + s.partial + (flush ? "\n" : "");
    write_all(to, line.data(), line.size());
    s.partial.clear();
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "") +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

int main(int argc, char** argv) {
  Config cfg = parse_args(argc, argv);
  const int world = cfg.nproc_per_node * cfg.nnodes;
  if (static_cast<long>(cfg.nproc_per_node) * cfg.nnodes > 1 << 20) fail("too many ranks");

  // Node 0 binds the store's port up front: a busy port is reported here, before any rank
  // starts, and a free port chosen with 0 cannot be taken by anyone else before rank 0 has it.
  int store_fd = -1;
  if (cfg.node_rank == 0) store_fd = bind_store_socket(cfg.master_port);

  // Signals arrive through a signalfd, read by the poll loop; children restore the mask.
  sigset_t handled, previous;
  sigemptyset(&handled);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&handled, s);
  sigprocmask(SIG_BLOCK, &handled, &previous);
  int sig_fd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sig_fd < 0) fail(std::string("signalfd: ") + std::strerror(errno));
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher while ranks run

  std::vector<Rank> ranks(static_cast<std::size_t>(cfg.nproc_per_node));
  for (int local = 0; local < cfg.nproc_per_node; ++local) {
    Rank& r = ranks[static_cast<std::size_t>(local)];
    r.local_rank = local;
    r.rank = cfg.node_rank * cfg.nproc_per_node + local;
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (cfg.prefix && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0))
      fail(std::string("pipe: ") + std::strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) fail(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the launcher died before prctl took effect
      if (cfg.prefix) {
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
      }
      int devnull = open("/dev/null", O_RDONLY);  // ranks are not in the terminal's foreground
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
      auto set = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(r.rank));
      set("LOCAL_RANK", std::to_string(local));
      set("WORLD_SIZE", std::to_string(world));
      set("LOCAL_WORLD_SIZE", std::to_string(cfg.nproc_per_node));
      set("GROUP_RANK", std::to_string(cfg.node_rank));
      set("MASTER_ADDR", cfg.master_addr);
      set("MASTER_PORT", std::to_string(cfg.master_port));
      unsetenv("BRRR_STORE_LISTEN_FD");
      if (store_fd >= 0) {
        if (r.rank == 0) {
          // The only descriptor a rank inherits on purpose (everything else is CLOEXEC).
          int fd = dup(store_fd);  // dup clears FD_CLOEXEC
          set("BRRR_STORE_LISTEN_FD", std::to_string(fd));
        }
        close(store_fd);
      }
      sigprocmask(SIG_SETMASK, &previous, nullptr);
      signal(SIGPIPE, SIG_DFL);
      std::vector<char*> args;
      for (auto& a : cfg.program) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "brrr-run: cannot run %s: %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);  // also here, so that a signal sent right after fork reaches the group
    r.pid = pid;
    r.running = true;
    if (cfg.prefix) {
      close(out_pipe[1]);
      close(err_pipe[1]);
      r.out.fd = out_pipe[0];
      r.err.fd = err_pipe[0];
    }
  }
  if (store_fd >= 0) close(store_fd);

  using Clock = std::chrono::steady_clock;
  int running = cfg.nproc_per_node;
  int exit_code = 0;
  const Rank* failed_rank = nullptr;
  bool stopping = false;
  // Once every rank has ended, output still in flight is read for up to 2 s more (a
  // process a rank left behind may hold its pipe open).
  std::optional<Clock::time_point> drain_until;
  Clock::time_point kill_at{};
  auto signal_all = [&](int sig) {
    for (Rank& r : ranks)
      if (r.running) kill(-r.pid, sig);
  };
  auto stop_others = [&](const std::string& why) {
    if (stopping) return;
    stopping = true;
    int others = 0;
    for (Rank& r : ranks) others += r.running;
    if (others > 0)
      std::fprintf(stderr, "brrr-run: %s; stopping the %d other rank%s on this node (SIGTERM, SIGKILL after %gs)\n",
                   why.c_str(), others, others == 1 ? "" : "s", cfg.grace_s);
    signal_all(SIGTERM);
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(cfg.grace_s * 1000));
  };

  char buf[65536];
  while (true) {
    bool pipes_open = false;
    for (Rank& r : ranks) pipes_open = pipes_open || r.out.fd >= 0 || r.err.fd >= 0;
    if (running == 0 && !pipes_open) break;
    if (running == 0 && !drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
    if (drain_until && Clock::now() >= *drain_until) break;

    std::vector<pollfd> fds{{sig_fd, POLLIN, 0}};
    std::vector<std::pair<Rank*, Stream*>> owners{{nullptr, nullptr}};
    for (Rank& r : ranks)
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&r, s);
        }
    int timeout_ms = -1;
    auto until = [&](Clock::time_point t) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
      return left > 0 ? static_cast<int>(left) : 0;
    };
    if (stopping && running > 0) timeout_ms = until(kill_at);
    if (drain_until) timeout_ms = until(*drain_until);
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) fail(std::string("poll: ") + std::strerror(errno));
    if (stopping && running > 0 && Clock::now() >= kill_at) {
      signal_all(SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(1);
    }

    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [r, s] = owners[k];
      ssize_t got = read(s->fd, buf, sizeof buf);
      std::string prefix = "[rank " + std::to_string(r->rank) + "] ";
      int to = s == &r->out ? STDOUT_FILENO : STDERR_FILENO;
      if (got > 0) {
        s->partial.append(buf, static_cast<std::size_t>(got));
        emit(*s, prefix, to, false);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit(*s, prefix, to, true);
        close(s->fd);
        s->fd = -1;
      }
    }

    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(sig_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        if (!stopping) {
          const char* name = sigabbrev_np(sig);
          std::fprintf(stderr, "brrr-run: received SIG%s; forwarding it to every rank\n", name ? name : "?");
          signal_all(sig);
          stopping = true;
          kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(cfg.grace_s * 1000));
          if (exit_code == 0) exit_code = 128 + sig;
        } else {
          signal_all(SIGKILL);  // a second signal: no more patience
        }
        break;
      }
    }

    // Reap every rank that ended.
    while (true) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (Rank& r : ranks) {
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        r.status = status;
        --running;
        if (failed(status) && exit_code == 0) {
          exit_code = exit_code_of(status);
          failed_rank = &r;
          std::string how = "rank " + std::to_string(r.rank) + " (local rank " + std::to_string(r.local_rank) +
                            ", pid " + std::to_string(pid) + ") " + describe_status(status);
          std::fprintf(stderr, "brrr-run: %s\n", how.c_str());
          stop_others("rank " + std::to_string(r.rank) + " failed");
        }
      }
    }
  }
  if (failed_rank)
    std::fprintf(stderr, "brrr-run: exit code %d: rank %d %s\n", exit_code, failed_rank->rank,
                 describe_status(failed_rank->status).c_str());
  else if (exit_code != 0)
    std::fprintf(stderr, "brrr-run: exit code %d (after forwarding a signal to the ranks)\n", exit_code);
  return exit_code;
}
