// A child process for tests/io/test_faults.cpp: does one checkpoint write in a state a test
// cannot put its own process in, and reports on stdout. Modes:
//   save PATH VALUE MIB      nn::save of a module holding MIB MiB of f32 VALUE, then exit 0
//                            (the test kills it with SIGKILL in the middle of the write);
//   fsize PATH MIB LIMIT     the same under RLIMIT_FSIZE = LIMIT bytes (SIGXFSZ ignored): the
//                            write fails with EFBIG; prints the Error and exits 0, or exits 2
//                            if nothing was thrown;
//   tmpfs DIR KIB MIB        in a private mount namespace, mounts a tmpfs of KIB KiB on DIR,
//                            saves a small checkpoint DIR/model.safetensors, then tries to
//                            replace it with MIB MiB: a real ENOSPC. Prints the Error and checks
//                            that the old file still loads whole and no temporary is left; exit
//                            0 on success, 1 on a failed check, 77 when mounting is not allowed
//                            (not root).
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
import brrr;

using namespace brrr;

namespace {

/// One parameter, "weight": `mib` MiB of `value`.
class Blob final : public nn::ModuleImpl {
public:
  Blob(double mib, double value) {
    register_parameter("weight", full({static_cast<std::int64_t>(mib * 1024 * 1024 / 4)}, value));
  }
  std::string name() const override { return "Blob"; }
};

nn::Module blob(double mib, double value) { return nn::Module(std::make_shared<Blob>(mib, value)); }

int usage() {
  std::fprintf(stderr, "usage: fault_child save PATH VALUE MIB | fsize PATH MIB LIMIT | tmpfs DIR KIB MIB\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return usage();
  const std::string mode = argv[1], path = argv[2];
  try {
    if (mode == "save") {
      nn::Module m = blob(std::atof(argv[4]), std::atof(argv[3]));
      std::printf("saving\n");
      std::fflush(stdout);
      nn::save(m, path);
      return 0;
    }
    if (mode == "fsize") {
      nn::Module m = blob(std::atof(argv[3]), 3.0);
      std::signal(SIGXFSZ, SIG_IGN);  // so write() fails with EFBIG instead of killing us
      const rlimit limit{static_cast<rlim_t>(std::atoll(argv[4])), static_cast<rlim_t>(std::atoll(argv[4]))};
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
      try {
        nn::save(m, path);
      } catch (const Error& e) {
        std::printf("%s\n", e.what());
        return 0;
      }
      return 2;
    }
    if (mode == "tmpfs") {
      namespace fs = std::filesystem;
      if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        std::printf("cannot make a private mount namespace: %s\n", std::strerror(errno));
        return 77;
      }
      const std::string options = "size=" + std::string(argv[3]) + "k";
      if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) != 0) {
        std::printf("cannot mount a tmpfs on %s: %s\n", path.c_str(), std::strerror(errno));
        return 77;
      }
      const std::string file = path + "/model.safetensors";
      nn::save(blob(1.0 / 64, 1.0), file);  // 16 KiB: fits
      int rc = 2;
      try {
        nn::save(blob(std::atof(argv[4]), 2.0), file);
      } catch (const Error& e) {
        std::printf("%s\n", e.what());
        rc = 0;
      }
      // The old checkpoint is whole, and the failed write left nothing behind.
      nn::Module old = blob(1.0 / 64, 0.0);
      nn::load(old, file);
      for (float v : old.state_dict().at("weight").to_host<float>())
        if (v != 1.0f) {
          std::printf("the old checkpoint changed\n");
          rc = 1;
          break;
        }
      for (const auto& e : fs::directory_iterator(path))
        if (e.path().filename() != "model.safetensors") {
          std::printf("left behind: %s\n", e.path().c_str());
          rc = 1;
        }
      ::umount(path.c_str());
      return rc;
    }
  } catch (const Error& e) {
    std::printf("unexpected error: %s\n", e.what());
    return 1;
  }
  return usage();
}
