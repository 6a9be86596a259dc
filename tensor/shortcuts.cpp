// Tensor members that are shortcuts for ops and the engine: sum(), mean(), backward().
module;
#include <vector>
module brrr.tensor;
import brrr.ops;
import brrr.autograd;

namespace brrr {

Tensor Tensor::sum() const { return brrr::sum(*this); }
Tensor Tensor::mean() const { return brrr::mean(*this); }

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  checked("backward");
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

}  // namespace brrr
