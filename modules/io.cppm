// brrr.io — tensors to and from files. safetensors: the format of Hugging Face's
// `safetensors` (an 8-byte little-endian header length, a JSON header of
// {name: {dtype, shape, data_offsets}} plus optional "__metadata__", then the raw
// little-endian bytes), interoperable with the Python reference implementation.
module;
#include <map>
#include <string>
export module brrr.io;
import brrr.tensor;

export namespace brrr::io {

/// Tensors by name (sorted, as safetensors stores them).
using TensorMap = std::map<std::string, Tensor>;

/// Writes `tensors` (any devices: copied to the host, a sync point for CUDA tensors; any
/// layout) to `path` atomically (a temporary file in the same folder, then rename). dtypes:
/// F32 F64 BF16 F16 I32 I64 BOOL. Throws Error(io) naming the path on failure.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file into CPU tensors. Throws Error(io) naming the path and the
/// problem for a missing, truncated or corrupt file, a header larger than 100 MB or than the
/// file, offsets out of range or overlapping, or an unsupported dtype — never a crash and
/// never an allocation sized by untrusted input before it was checked against the file.
TensorMap load_safetensors(const std::string& path);

/// The "__metadata__" strings of a safetensors file.
std::map<std::string, std::string> safetensors_metadata(const std::string& path);

}  // namespace brrr::io
