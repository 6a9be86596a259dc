// The public face of the CPU backend's intra-op thread pool (ops/cpu/parallel.cpp).
module;
#include <cstdint>
module brrr.tensor;
import brrr.backend;

namespace brrr {

void set_num_threads(int n) { backend::set_num_threads(n); }
int get_num_threads() { return backend::get_num_threads(); }

}  // namespace brrr
