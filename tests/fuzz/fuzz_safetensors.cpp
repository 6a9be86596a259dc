// libFuzzer target: brrr::io's safetensors reader on arbitrary bytes (the 8-byte length, the
// JSON header with its dtypes, shapes, offsets and "__metadata__", brrr's checksum record,
// the data buffer). Oracles beyond "no crash, no sanitizer report, only brrr::Error":
//   - safetensors_metadata and load_safetensors agree on the header: if the file loads, its
//     metadata reads; if the metadata does not read, the file does not load;
//   - a file that loads round-trips: saved again and reloaded, every tensor has the same
//     dtype, shape and bytes, and the metadata is the same.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
import brrr;

using namespace brrr;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.nbytes() != b.nbytes()) return false;
  return a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemFile input("safetensors");
  const std::string& path = input.write(data, size);

  bool metadata_ok = false;
  std::map<std::string, std::string> metadata;
  try {
    metadata = io::safetensors_metadata(path);
    metadata_ok = true;
  } catch (const Error&) {
  }
  io::TensorMap tensors;
  try {
    tensors = io::load_safetensors(path);
  } catch (const Error&) {
    return 0;
  }
  if (!metadata_ok) fuzz::violated("load_safetensors accepted a file whose header safetensors_metadata rejected");

  const std::string again = (fuzz::scratch_dir() / "again.safetensors").string();
  io::save_safetensors(again, tensors, metadata);  // a loaded file must be writable again
  io::TensorMap back = io::load_safetensors(again);
  if (io::safetensors_metadata(again) != metadata) fuzz::violated("metadata changed in a round trip");
  if (back.size() != tensors.size()) fuzz::violated("tensor count changed in a round trip");
  for (const auto& [name, t] : tensors) {
    auto it = back.find(name);
    if (it == back.end() || !same_bytes(t, it->second)) fuzz::violated("tensor \"" + name + "\" changed in a round trip");
  }
  return 0;
}
