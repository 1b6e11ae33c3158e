#pragma once
// Reader for the IDX format of (Fashion-)MNIST, plain or gzip-compressed (zlib's gzread reads both),
// and the Fashion-MNIST dataset as shipped by Debian's dataset-fashion-mnist package.
// Needs zlib (link ZLIB::ZLIB).

#include <zlib.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace ttmoe::io {

/// A malformed or unreadable IDX file; the message names the file and the problem.
class IdxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An IDX array of unsigned bytes: dims (big-endian in the file) and row-major data.
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

/// Reads an IDX file of type 0x08 (unsigned byte), gzip or plain. Validates the magic, rank and
/// that the payload has exactly prod(dims) bytes.
inline IdxArray read_idx_u8(const std::filesystem::path& path) {
  const std::string name = path.string();
  gzFile f = gzopen(name.c_str(), "rb");
  if (!f) throw IdxError(name + ": cannot open");
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  auto read_exact = [&](void* dst, unsigned n, const char* what) {
    const int got = gzread(f, dst, n);
    if (got < 0 || static_cast<unsigned>(got) != n) throw IdxError(name + ": truncated while reading " + what);
  };
  std::array<std::uint8_t, 4> magic{};
  read_exact(magic.data(), 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08)
    throw IdxError(name + ": not an unsigned-byte IDX file (magic " + std::to_string(magic[2]) + ")");
  const int rank = magic[3];
  if (rank < 1 || rank > 4) throw IdxError(name + ": unsupported rank " + std::to_string(rank));
  IdxArray a;
  std::uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    std::array<std::uint8_t, 4> b{};
    read_exact(b.data(), 4, "the dimensions");
    const std::uint32_t d = (std::uint32_t(b[0]) << 24) | (std::uint32_t(b[1]) << 16) | (std::uint32_t(b[2]) << 8) | b[3];
    a.dims.push_back(d);
    total *= d;
  }
  if (total > (std::uint64_t(1) << 32)) throw IdxError(name + ": implausibly large (" + std::to_string(total) + " bytes)");
  a.data.resize(total);
  std::uint64_t off = 0;
  while (off < total) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::uint64_t>(total - off, 1u << 30));
    read_exact(a.data.data() + off, chunk, "the payload");
    off += chunk;
  }
  char extra;
  if (gzread(f, &extra, 1) != 0) throw IdxError(name + ": trailing bytes after the payload");
  return a;
}

/// Images (N x 28 x 28 bytes) and labels (N) of one Fashion-MNIST split.
struct FashionMnistSplit {
  std::size_t count = 0, height = 0, width = 0;
  std::vector<std::uint8_t> pixels;  ///< row-major N x H x W
  std::vector<std::uint8_t> labels;  ///< class indices 0..9
};

/// Default location of Debian's dataset-fashion-mnist.
inline std::filesystem::path default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

/// The class names, in label order.
inline const std::array<const char*, 10>& fashion_mnist_classes() {
  static const std::array<const char*, 10> names{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

/// Loads the "train" or "t10k" split from `dir`; checks that images and labels agree.
inline FashionMnistSplit load_fashion_mnist(const std::string& split,
                                            const std::filesystem::path& dir = default_fashion_mnist_dir()) {
  if (split != "train" && split != "t10k") throw IdxError("fashion-mnist: unknown split '" + split + "' (train or t10k)");
  const auto images = read_idx_u8(dir / (split + "-images-idx3-ubyte.gz"));
  const auto labels = read_idx_u8(dir / (split + "-labels-idx1-ubyte.gz"));
  if (images.dims.size() != 3 || labels.dims.size() != 1 || images.dims[0] != labels.dims[0])
    throw IdxError((dir / split).string() + ": images and labels disagree in shape");
  FashionMnistSplit s;
  s.count = images.dims[0];
  s.height = images.dims[1];
  s.width = images.dims[2];
  s.pixels = std::move(images.data);
  s.labels = std::move(labels.data);
  for (auto l : s.labels)
    if (l > 9) throw IdxError((dir / split).string() + ": label " + std::to_string(l) + " out of range");
  return s;
}

}  // namespace ttmoe::io
