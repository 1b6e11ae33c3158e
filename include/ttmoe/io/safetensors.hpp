// safetensors reading and writing for ttmoe, independent of any tensor type.
//
//   ttmoe::io::SafetensorsFile f("model.safetensors");          // mmap + full header validation
//   std::vector<float> w(768);
//   f.read_into<float>("blocks.0.norm1.weight", {768}, w);       // converts F16/BF16/F64 -> float
//
//   ttmoe::io::SafetensorsWriter out;
//   out.add("blocks.0.norm1.weight", std::span<const float>(w), {768}, ttmoe::io::DType::BF16);
//   out.set_metadata("format", "pt");
//   out.write("model.safetensors");                              // atomic: .tmp + rename
//
// Every failure is a ttmoe::io::SafetensorsError with a kind() and the file's path in what().
// Needs nlohmann-json (CMake target nlohmann_json::nlohmann_json) and a POSIX system (mmap).
#pragma once

#include "ttmoe/io/safetensors_dtype.hpp"    // DType, dtype_size, dtype_name, parse_dtype
#include "ttmoe/io/safetensors_error.hpp"    // SafetensorsError, ErrorKind
#include "ttmoe/io/safetensors_file.hpp"     // SafetensorsFile, TensorInfo (reader)
#include "ttmoe/io/safetensors_float16.hpp"  // F16 / BF16 <-> float conversions
#include "ttmoe/io/safetensors_sharded.hpp"  // ShardedSafetensors (HF model.safetensors.index.json)
#include "ttmoe/io/safetensors_writer.hpp"   // SafetensorsWriter
