#pragma once
// A four-domain digit set built on this machine from Debian packages, deterministic from a seed:
// ten classes, 28x28 gray, digits light on dark like MNIST, each glyph normalised by its ink bounding box
// into a 20 px box centred in the frame, then given a small random affine jitter (glyph_frame.hpp).
//
//   handwritten  the 5,000 real handwritten digits of OpenCV's samples/data/digits.png (package
//                opencv-doc): a 2000x1000 sheet of 20x20 cells, 100 per row, five rows per digit 0..9
//   serif        book faces: DejaVu Serif, Liberation Serif, FreeSerif, Nimbus Roman, C059, P052, Caladea
//   script       handwriting-style and script faces: Dancing Script, Kaushan Script, Kristi, Comic Neue,
//                Humor Sans, Z003
//   display      machine and display faces: DSEG7 and DSEG14 (segment displays), IBM 3270, JetBrains
//                Mono, Hack, Inconsolata, Courier Prime, Nimbus Mono PS
// Packages and licences: docs/data.md. Fonts are rendered with FreeType (glyph_render.hpp).
//
// The set is written to disk in DomainBed's layout (ROOT/digits4/<domain>/<digit>/<nnnnn>.png) rather
// than only served from memory, so the one DomainBed loader, split and transform code path reads it like
// PACS, and a person can look at the images. ensure_digit_dataset() builds it once into a cache folder
// and rebuilds only when the recipe (seed, counts, jitter, version) changes.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "ttmoe/data/datasets.hpp"
#include "ttmoe/data/glyph_frame.hpp"
#include "ttmoe/data/glyph_render.hpp"
#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/data/seed_mix.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// A font file and the Debian package that installs it (named in the error when it is missing).
struct DigitFont {
  std::string package;
  std::filesystem::path file;
};

/// One domain of the set: its folder name and its fonts (none: the handwritten sheet).
struct DigitDomainSpec {
  std::string name;
  std::vector<DigitFont> fonts;
};

/// Where Debian puts opencv-doc's digits.png.
inline const std::filesystem::path opencv_digits_png{"/usr/share/doc/opencv-doc/examples/data/digits.png"};

/// The four domains in DomainBed (sorted) order: display, handwritten, script, serif.
inline std::vector<DigitDomainSpec> default_digit_domains() {
  const std::filesystem::path tt = "/usr/share/fonts/truetype", ot = "/usr/share/fonts/opentype";
  const std::filesystem::path urw = ot / "urw-base35";
  return {
      {"display",
       {{"fonts-dseg", tt / "dseg/DSEG7Classic-Regular.ttf"},
        {"fonts-dseg", tt / "dseg/DSEG7Classic-BoldItalic.ttf"},
        {"fonts-dseg", tt / "dseg/DSEG14Classic-Regular.ttf"},
        {"fonts-3270", tt / "3270/3270-Regular.ttf"},
        {"fonts-jetbrains-mono", tt / "jetbrains-mono/JetBrainsMono-Regular.ttf"},
        {"fonts-jetbrains-mono", tt / "jetbrains-mono/JetBrainsMono-ExtraBold.ttf"},
        {"fonts-hack", tt / "hack/Hack-Regular.ttf"},
        {"fonts-inconsolata", tt / "inconsolata/Inconsolata.otf"},
        {"fonts-courier-prime", ot / "courier-prime/Courier Prime.otf"},
        {"fonts-urw-base35", urw / "NimbusMonoPS-Regular.otf"}}},
      {"handwritten", {}},
      {"script",
       {{"fonts-dancingscript", ot / "dancingscript/DancingScript-Regular.otf"},
        {"fonts-dancingscript", ot / "dancingscript/DancingScript-Bold.otf"},
        {"fonts-kaushanscript", ot / "kaushanscript/KaushanScript-Regular.otf"},
        {"fonts-kristi", tt / "kristi/Kristi.ttf"},
        {"fonts-comic-neue", ot / "comic-neue/ComicNeue-Regular.otf"},
        {"fonts-comic-neue", ot / "comic-neue/ComicNeue-BoldItalic.otf"},
        {"fonts-humor-sans", tt / "humor-sans/Humor-Sans.ttf"},
        {"fonts-urw-base35", urw / "Z003-MediumItalic.otf"}}},
      {"serif",
       {{"fonts-dejavu-core", tt / "dejavu/DejaVuSerif.ttf"},
        {"fonts-dejavu-core", tt / "dejavu/DejaVuSerif-Bold.ttf"},
        {"fonts-liberation2", tt / "liberation2/LiberationSerif-Regular.ttf"},
        {"fonts-liberation2", tt / "liberation2/LiberationSerif-Italic.ttf"},
        {"fonts-freefont-ttf", tt / "freefont/FreeSerif.ttf"},
        {"fonts-urw-base35", urw / "NimbusRoman-Regular.otf"},
        {"fonts-urw-base35", urw / "C059-Roman.otf"},
        {"fonts-urw-base35", urw / "P052-Bold.otf"},
        {"fonts-crosextra-caladea", tt / "crosextra/Caladea-Regular.ttf"}}},
  };
}

/// How the set is made. Everything that changes a pixel is here, and in recipe().
struct DigitSetOptions {
  std::uint64_t seed = 0;
  std::size_t per_class = 500;  ///< images per class and domain (the handwritten sheet has 500)
  GlyphJitter jitter{};
  int render_px = 96;           ///< FreeType em size the glyphs are rendered at before framing
  std::filesystem::path handwriting_sheet = opencv_digits_png;
  std::vector<DigitDomainSpec> domains = default_digit_domains();
  /// A one-line description of the options; the cache is rebuilt when it changes.
  std::string recipe() const {
    std::ostringstream s;
    s << "ttmoe digits4 v1 seed=" << seed << " per_class=" << per_class << " jitter=" << jitter.rotate_degrees << ","
      << jitter.scale << "," << jitter.shear << "," << jitter.shift << " render_px=" << render_px
      << " sheet=" << handwriting_sheet.string();
    for (const auto& d : domains) {
      s << " " << d.name << ":";
      for (const auto& f : d.fonts) s << f.file.filename().string() << ";";
    }
    return s.str();
  }
};

/// One built domain: 28x28 1-channel images and their digit labels, class by class.
struct DigitDomain {
  std::string name;
  std::vector<io::Image> images;
  std::vector<std::int64_t> labels;
};

/// The 5,000 cells of OpenCV's digits.png as 20x20 1-channel images, row by row; the label of cell i is
/// i / 500 (five 100-cell rows per digit). Errors name the file and what is wrong with it.
inline std::vector<io::Image> opencv_handwritten_cells(const std::filesystem::path& sheet_path) {
  std::error_code ec;
  if (!std::filesystem::exists(sheet_path, ec))
    throw DatasetError("handwritten digits: " + sheet_path.string() +
                       " does not exist (install the Debian package opencv-doc: scripts/install-deps.sh)");
  const io::Image sheet = io::load_image(sheet_path, 1);
  if (sheet.width != 2000 || sheet.height != 1000)
    throw DatasetError("handwritten digits: " + sheet_path.string() + " is " + std::to_string(sheet.width) + "x" +
                       std::to_string(sheet.height) + ", expected OpenCV's 2000x1000 sheet of 20x20 digits");
  std::vector<io::Image> cells;
  cells.reserve(5000);
  for (int r = 0; r < 50; ++r)
    for (int c = 0; c < 100; ++c) cells.push_back(crop(sheet, r * 20, c * 20, 20, 20));
  return cells;
}

/// Builds domain `spec` (its index `domain_index` feeds the seed): per_class framed, jittered digits per
/// class. Sample i of a class uses font i mod (number of fonts), or the i-th handwritten cell of that
/// class (so a smaller per_class takes the first cells of each digit's five rows).
inline DigitDomain build_digit_domain(const DigitDomainSpec& spec, std::size_t domain_index, const DigitSetOptions& o) {
  DigitDomain d{spec.name, {}, {}};
  std::vector<std::vector<io::Image>> sources(10);  // per digit: the glyphs samples cycle through
  if (spec.fonts.empty()) {
    if (o.per_class > 500)
      throw std::invalid_argument("digit set: the handwritten sheet has 500 digits per class, asked for " +
                                  std::to_string(o.per_class));
    const auto cells = opencv_handwritten_cells(o.handwriting_sheet);
    for (std::size_t i = 0; i < cells.size(); ++i)
      if (i % 500 < o.per_class) sources[i / 500].push_back(cells[i]);
  } else {
    for (const auto& f : spec.fonts) {
      std::error_code ec;
      if (!std::filesystem::exists(f.file, ec))
        throw FontError("digit set, domain '" + spec.name + "': font " + f.file.string() + " is missing (install the Debian package " +
                        f.package + ": scripts/install-deps.sh)");
      const FontFace face(f.file);
      for (int digit = 0; digit < 10; ++digit) sources[std::size_t(digit)].push_back(face.render(char32_t(U'0' + digit), o.render_px));
    }
  }
  for (std::size_t digit = 0; digit < 10; ++digit)
    for (std::size_t i = 0; i < o.per_class; ++i) {
      std::mt19937_64 rng(seed_mix(seed_mix(seed_mix(o.seed, domain_index), digit), i));
      const auto& src = sources[digit][i % sources[digit].size()];
      d.images.push_back(frame_glyph(src, rng, o.jitter, 28, 20,
                                     spec.name + " digit " + std::to_string(digit) + " sample " + std::to_string(i)));
      d.labels.push_back(std::int64_t(digit));
    }
  return d;
}

/// Every domain of `o`, in the order given (default: sorted, DomainBed's environment order).
inline std::vector<DigitDomain> build_digit_set(const DigitSetOptions& o = {}) {
  std::vector<DigitDomain> out;
  for (std::size_t k = 0; k < o.domains.size(); ++k) out.push_back(build_digit_domain(o.domains[k], k, o));
  return out;
}

/// Name of the dataset folder the set is written to under a data root.
inline const std::string digit_dataset_folder = "digits4";

/// Writes `domains` as 8-bit PNGs in DomainBed's layout: dataset_dir/<domain>/<digit>/<nnnnn>.png, the
/// number counting samples within the class (zero-padded, so file order = build order).
inline void write_digit_set(const std::vector<DigitDomain>& domains, const std::filesystem::path& dataset_dir) {
  for (const auto& d : domains) {
    std::vector<std::size_t> count(10, 0);
    for (std::size_t i = 0; i < d.images.size(); ++i) {
      const auto label = std::size_t(d.labels[i]);
      const auto dir = dataset_dir / d.name / std::to_string(label);
      if (count[label] == 0) std::filesystem::create_directories(dir);
      char name[32];
      std::snprintf(name, sizeof name, "%05zu.png", count[label]++);
      io::save_png(d.images[i], dir / name);
    }
  }
}

/// Whether `dataset_dir` holds a complete build whose RECIPE.txt says `recipe`.
inline bool digit_dataset_matches(const std::filesystem::path& dataset_dir, const std::string& recipe) {
  std::ifstream in(dataset_dir / "RECIPE.txt");
  std::string line;
  return in && std::getline(in, line) && line == recipe;
}

/// The data root holding `digit_dataset_folder` built with `o`, under `cache_dir`: built unless a complete
/// build with the same recipe is already there. The build goes to a folder of its own
/// (digits4.partial-<random>) renamed into place when complete, so an interrupted build is never read and
/// two processes building at once do not mix files. Pass the returned root and digit_dataset_folder to
/// scan_domainbed.
inline std::filesystem::path ensure_digit_dataset(const std::filesystem::path& cache_dir, const DigitSetOptions& o = {}) {
  const auto target = cache_dir / digit_dataset_folder;
  const std::string recipe = o.recipe();
  if (digit_dataset_matches(target, recipe)) return cache_dir;
  const auto tmp = cache_dir / (digit_dataset_folder + ".partial-" + std::to_string(std::random_device{}()));
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  write_digit_set(build_digit_set(o), tmp);
  {
    std::ofstream out(tmp / "RECIPE.txt");
    out << recipe << "\n";
    if (!out) throw DatasetError("digit set: cannot write " + (tmp / "RECIPE.txt").string());
  }
  if (digit_dataset_matches(target, recipe)) {  // another process finished the same build first
    std::filesystem::remove_all(tmp);
    return cache_dir;
  }
  std::filesystem::remove_all(target);
  std::filesystem::rename(tmp, target);
  return cache_dir;
}

}  // namespace ttmoe::data
