// NCCL for CUDA tensors (placeholder until the NCCL path lands).
module;
#include <memory>
#include <string>
module brrr.dist;
import brrr.tensor;

namespace brrr::dist::detail {

std::unique_ptr<Comm> make_nccl(GroupState& group, int device) {
  throw Error(ErrorKind::device, group.name + ": CUDA tensors need NCCL, which this build of brrr does not have");
}

}  // namespace brrr::dist::detail
