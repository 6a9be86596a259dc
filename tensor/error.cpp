// Error, its constructors of the recurring kinds, the one number formatter of messages, and
// the terminate handler that makes an uncaught Error readable.
module;
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
module brrr.tensor;

namespace brrr {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::shape: return "shape";
    case ErrorKind::dtype: return "dtype";
    case ErrorKind::device: return "device";
    case ErrorKind::index: return "index";
    case ErrorKind::value: return "value";
    case ErrorKind::io: return "io";
    case ErrorKind::cuda: return "cuda";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::sync: return "sync";
    case ErrorKind::autograd: return "autograd";
    case ErrorKind::stream: return "stream";
    case ErrorKind::distributed: return "distributed";
  }
  return "?";
}

Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}

namespace {
// An uncaught brrr::Error would otherwise be reported by libstdc++'s handler under its
// mangled module-attached name (N4brrrW4brrrW6tensor5ErrorE): print its kind and message,
// then abort as std::terminate does. Other exceptions go to the previous handler. Installed
// by this unit's static initialisation (every program that can throw an Error links it); a
// handler the program sets later replaces it.
std::terminate_handler previous_handler = nullptr;

[[noreturn]] void report_uncaught() {
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      std::fprintf(stderr, "terminate called after throwing a brrr::Error (kind %s):\n  %s\n",
                   to_string(error.kind()), error.what());
      std::fflush(stderr);
      std::abort();
    } catch (...) {
    }
  }
  if (previous_handler) previous_handler();
  std::abort();
}

const bool terminate_handler_installed = [] {
  previous_handler = std::set_terminate(report_uncaught);
  return true;
}();
}  // namespace

Error Error::dim_out_of_range(std::string_view op, std::int64_t dim, std::int64_t ndim, const Shape& shape) {
  const std::int64_t n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dim 0 / -1, as in PyTorch
  return Error(ErrorKind::index, std::string(op) + ": dim " + std::to_string(dim) + " out of range for a " +
                                     std::to_string(shape.size()) + "-d tensor of shape " + to_string(shape) +
                                     " (expected in [" + std::to_string(-n) + ", " + std::to_string(n - 1) + "])");
}

Error Error::dtype_not_supported(std::string_view op, std::string_view expected, const Tensor& t,
                                 std::string_view hint) {
  std::string m = std::string(op) + ": " + std::string(expected) + ", got " + describe(t);
  if (!hint.empty()) m += " (" + std::string(hint) + ")";
  return Error(ErrorKind::dtype, m);
}

Error Error::shape_mismatch(std::string_view op, const Shape& a, const Shape& b, std::string_view why) {
  return Error(ErrorKind::shape,
               std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) + " " + std::string(why));
}

Error Error::bad_value(std::string_view op, std::string_view name, double value, std::string_view expected) {
  return Error(ErrorKind::value, std::string(op) + ": " + std::string(name) + " must be " + std::string(expected) +
                                     ", got " + number_text(value));
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace brrr
