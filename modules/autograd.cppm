// brrr.autograd — the backward engine and gradient checking. Graph nodes, saved tensors
// and grad mode are part of brrr.tensor (every tensor carries them); ops record nodes.
module;
#include <cstdint>
#include <functional>
#include <vector>
export module brrr.autograd;
import brrr.tensor;

export namespace brrr::autograd {

/// Runs backward from `outputs` with `grad_outputs` (undefined entries: ones for scalar
/// outputs, else Error(autograd)), accumulating into leaves' grad(). An iterative
/// topological walk (no recursion limit) over the nodes reachable from the outputs; the
/// graph's saved tensors are freed unless retain_graph; create_graph records the backward
/// pass itself (higher-order gradients).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

/// Runs fn once the backward pass now running on this thread has finished walking the graph
/// (PyTorch's Engine::queue_callback; DDP finishes its gradient all-reduces here). Callbacks
/// run in the order queued, before backward() returns; an exception from one propagates out
/// of backward(). Error(autograd) when no backward pass is running.
void queue_callback(std::function<void()> fn);

/// Gradients of `outputs` with respect to `inputs` (which must require grad), returned
/// instead of accumulated into .grad(). allow_unused: an input not reached gets an undefined
/// tensor instead of Error(autograd). retain_graph defaults to create_graph.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

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
