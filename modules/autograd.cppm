// brrr.autograd — gradient checking, over the op layer. The autograd core (graph nodes,
// saved tensors, grad mode, record(), the engine: autograd::backward and autograd::grad) is
// part of brrr.tensor (autograd/graph.cppm), since every tensor carries it.
module;
#include <cstdint>
#include <functional>
#include <vector>
export module brrr.autograd;
import brrr.tensor;

export namespace brrr::autograd {

/// Options of gradcheck.
struct GradcheckOptions {
  double eps = 1e-6;   ///< central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

/// Checks f's analytic gradients against central differences (f(x+eps)-f(x-eps))/(2 eps)
/// in f64 on the CPU. `inputs` are converted to f64 CPU leaves requiring grad (integer
/// inputs are passed through untouched); f must return one tensor (reduced with a random
/// projection when not scalar). Throws Error(autograd) naming the input, element, both values
/// and the tolerance on mismatch; returns true otherwise.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
               GradcheckOptions options = {});

}  // namespace brrr::autograd
