#pragma once
// A uniquely named temporary folder removed at scope exit (the data tests build folder trees).

#include <atomic>
#include <filesystem>
#include <random>
#include <string>

#include <ttmoe/io/image.hpp>

/// Creates a fresh folder under the system temp dir; removes it recursively on destruction.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("ttmoe_data_test_" + std::to_string(std::random_device{}()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// Writes a tiny w x h RGB image whose pixels encode `value` (as PNG or JPEG by extension).
inline void write_tiny_image(const std::filesystem::path& p, float value, int w = 8, int h = 6) {
  std::filesystem::create_directories(p.parent_path());
  ttmoe::io::Image im = ttmoe::io::make_image(h, w, 3, value);
  if (p.extension() == ".png") ttmoe::io::save_png(im, p);
  else ttmoe::io::save_jpeg(im, p, 95);
}
