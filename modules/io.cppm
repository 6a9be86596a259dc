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
/// layout) to `path` atomically: "<path>.tmp.<pid>" in the same folder, fsync, rename, fsync
/// of the folder, so `path` holds the old file or the whole new one, never a partial one (a
/// writer killed mid-write leaves only its temporary file). dtypes: F32 F64 BF16 F16 I32 I64
/// BOOL. Adds a CRC-32 per tensor (over name, dtype, shape and bytes) and one over `metadata`
/// as the "__metadata__" strings "brrr.crc32" and "brrr.crc32.record" (the record's own CRC;
/// other readers ignore both). Throws Error(io) naming the path on failure (no space left,
/// no permission, ...), removing the temporary file; those two metadata keys are reserved.
/// A symbolic link at `path` is followed to the end of its chain, and the file is written next
/// to and renamed over that target, so the link survives and shows the new file (as Python's
/// open(path, "wb") writes through it); a dangling link's target is created. Before anything is
/// written, Error(io) refuses a path ending in '/', a link loop, and a path (or link target)
/// that exists but is not a regular file ("is a directory", "is not a regular file (a FIFO)",
/// device nodes such as /dev/null): nothing is created or replaced then.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file into CPU tensors. Throws Error(io) naming the path and the
/// problem for a missing, truncated or corrupt file, a header larger than 100 MB or than the
/// file, offsets out of range or overlapping, or an unsupported dtype — never a crash and
/// never an allocation sized by untrusted input before it was checked against the file.
/// A file with brrr's checksums ("brrr.crc32", see save_safetensors) is verified: a changed
/// byte in a tensor's bytes or header entry is Error(io) naming the file and the tensor.
TensorMap load_safetensors(const std::string& path);

/// The "__metadata__" strings of a safetensors file, without brrr's checksum record (whose
/// own CRC and metadata checksum are verified).
std::map<std::string, std::string> safetensors_metadata(const std::string& path);

}  // namespace brrr::io
