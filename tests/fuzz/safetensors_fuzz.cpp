// libFuzzer target for the safetensors reader: arbitrary bytes must either open cleanly or fail
// with SafetensorsError, and an opened file must be fully readable without any out-of-bounds
// access (AddressSanitizer watches the exact end of the input, which the reader borrows).
//
// Beyond "no crash" it checks invariants the reader promises, trapping when one breaks:
//  - every listed tensor is found by name and its byte span matches numel * dtype_size;
//  - floating tensors convert to float and double, integer ones to int64 (the only allowed
//    failure is OutOfRange for integers, which int64 never hits);
//  - re-writing the parsed tensors with SafetensorsWriter gives a file that parses back to the
//    same names, dtypes, shapes, bytes and metadata.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "ttmoe/io/safetensors.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void exercise(const ttmoe::io::SafetensorsFile& f) {
  using namespace ttmoe::io;
  for (const TensorInfo& t : f.tensors()) {
    require(f.contains(t.name) && &f.info(t.name) == &t);
    require(t.bytes.size() == t.numel() * dtype_size(t.dtype));
    require(t.end - t.begin == t.bytes.size());
    std::vector<float> as_float(t.numel());
    try {
      f.read_as<float>(t.name, std::span<float>(as_float));
      require(is_floating_dtype(t.dtype));
      std::vector<double> as_double(t.numel());
      f.read_as<double>(t.name, std::span<double>(as_double));
    } catch (const SafetensorsError& e) {
      require(e.kind() == ErrorKind::DTypeMismatch && !is_floating_dtype(t.dtype));
      std::vector<std::int64_t> as_int(t.numel());
      f.read_as<std::int64_t>(t.name, std::span<std::int64_t>(as_int));
    }
  }
}

void rewrite_and_compare(const ttmoe::io::SafetensorsFile& f) {
  using namespace ttmoe::io;
  SafetensorsWriter w;
  for (const TensorInfo& t : f.tensors()) w.add(t.name, t.dtype, t.shape, t.bytes.data());
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  const std::vector<std::byte> bytes = w.to_bytes();
  const SafetensorsFile g = SafetensorsFile::borrow_bytes(bytes, "rewritten");
  require(g.size() == f.size() && g.metadata() == f.metadata());
  for (const TensorInfo& t : f.tensors()) {
    const TensorInfo& u = g.info(t.name);
    require(u.dtype == t.dtype && u.shape == t.shape && u.bytes.size() == t.bytes.size());
    require(t.bytes.empty() || std::memcmp(u.bytes.data(), t.bytes.data(), t.bytes.size()) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ttmoe::io;
  try {
    const auto f = SafetensorsFile::borrow_bytes(std::as_bytes(std::span<const std::uint8_t>(data, size)), "fuzz");
    exercise(f);
    try {
      rewrite_and_compare(f);
    } catch (const SafetensorsError&) {
      __builtin_trap();  // a file we accepted must be writable again
    }
  } catch (const SafetensorsError&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
