#pragma once
// Full scale: ViT-B/16 from a timm or torchvision safetensors checkpoint on ImageNet-C (+ R, Sketch,
// A, val), the classical / potpourri / potpourri+ streams, printed as the paper's Table-1 row.

#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include <ttmoe/io/checkpoint.hpp>
#include <ttmoe/io/datasets.hpp>
#include <ttmoe/io/datasets_transform.hpp>
#include <ttmoe/io/streams.hpp>

#include "args.hpp"
#include "experiment.hpp"

namespace moetta_example {

/// timm or torchvision key names, decided by which class-token key the file has.
inline io::NameMap detect_names(const io::SafetensorsFile& f) {
  if (f.contains("cls_token")) return io::timm_names();
  if (f.contains("class_token")) return io::torchvision_vit_names();
  throw std::runtime_error(f.path() + ": neither a timm (cls_token) nor a torchvision (class_token) ViT checkpoint");
}

/// A fresh ViT-B/16 with the checkpoint's weights.
inline Model load_vit_b16(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("--checkpoint: file " + path.string() + " does not exist");
  io::SafetensorsFile f(path);
  Model m(models::vit_base_patch16(), 0);
  io::load_state(m, f, detect_names(f));
  return m;
}

/// Runs the full-scale benchmark and prints per-domain accuracy and the Table-1 row.
inline int run_imagenet(const Options& o) {
  if (!std::filesystem::exists(*o.checkpoint))  // fail before the (slow) folder scans
    throw std::runtime_error("--checkpoint: file " + *o.checkpoint + " does not exist");
  if (!o.imagenet_c) throw std::runtime_error("--checkpoint needs --imagenet-c DIR");
  const auto setting = io::parse_setting(o.setting);
  const auto methods = selected_methods(o);
  // Domains: files table + per-domain preprocessing.
  std::vector<std::filesystem::path> files;
  std::vector<io::DomainItems> domains;
  std::vector<int> domain_is_c;
  auto add = [&](const std::string& name, const io::ClassFolderDataset& ds, bool is_c) {
    io::DomainItems d{name, {}};
    for (const auto& f : ds.files) {
      d.items.push_back({files.size(), f.label, 0});
      files.push_back(f.path);
    }
    d.items = io::subsample(d.items, o.limit, 7 + domains.size());  // same subset for every seed
    domains.push_back(std::move(d));
    domain_is_c.push_back(is_c);
  };
  std::vector<std::string> corr;
  for (auto c : all_corruptions) corr.emplace_back(corruption_name(c));
  corr = io::discover_imagenet_c(*o.imagenet_c, o.severity, corr);
  for (const auto& c : corr)
    add(c, io::scan_class_folders(io::imagenet_c_folder(*o.imagenet_c, c, o.severity), {}, "--imagenet-c " + c), true);
  if (setting != io::Setting::classical) {
    if (!o.imagenet_r || !o.imagenet_sketch || !o.imagenet_a)
      throw std::runtime_error("--setting " + o.setting + " needs --imagenet-r, --imagenet-sketch and --imagenet-a");
    io::ClassListSources src;
    if (o.imagenet_classes) src.classes_file = *o.imagenet_classes;
    if (o.imagenet_val) src.full_class_dirs.push_back(*o.imagenet_val);
    src.full_class_dirs.push_back(io::imagenet_c_folder(*o.imagenet_c, corr.front(), o.severity));
    const auto classes = io::imagenet_class_list(src);
    add("imagenet-r", io::scan_class_folders(*o.imagenet_r, classes, "--imagenet-r"), false);
    add("imagenet-sketch", io::scan_class_folders(*o.imagenet_sketch, classes, "--imagenet-sketch"), false);
    add("imagenet-a", io::scan_class_folders(*o.imagenet_a, classes, "--imagenet-a"), false);
  }
  std::vector<Images> fisher;
  if (setting == io::Setting::potpourri_plus || o.imagenet_val) {
    if (!o.imagenet_val) throw std::runtime_error("--setting potpourri+ needs --imagenet-val");
    const auto val = io::scan_class_folders(*o.imagenet_val, {}, "--imagenet-val");
    if (setting == io::Setting::potpourri_plus) add("imagenet-val", val, false);
    // EATA's Fisher: 2000 clean validation images (a fixed random subset).
    std::vector<io::StreamItem> all;
    for (std::size_t i = 0; i < val.files.size(); ++i) all.push_back({i, val.files[i].label, 0});
    const auto pick = io::subsample(all, 2000, 99);
    const auto pre = io::imagenet_preprocess();
    for (std::size_t b0 = 0; b0 < pick.size(); b0 += std::size_t(o.batch_size)) {
      const std::size_t n = std::min(pick.size() - b0, std::size_t(o.batch_size));
      Images x(DynShape<4>(index_t(n), 3, 224, 224));
      for (std::size_t k = 0; k < n; ++k)
        io::load_preprocessed(val.files[pick[b0 + k].ref].path, pre,
                              std::span<float>(x.data() + k * pre.image_floats(), pre.image_floats()));
      fisher.push_back(x);
    }
  } else if (std::find(methods.begin(), methods.end(), "eata") != methods.end()) {
    fmt::print(stderr, "note: no --imagenet-val: EATA runs without its Fisher regulariser (ETA)\n");
  }
  const auto pre_c = io::imagenet_c_preprocess(), pre_n = io::imagenet_preprocess();
  const Geometry geo{3, 224, 224};
  auto fill = [&](const io::StreamItem& it, float* out) {
    io::load_preprocessed(files[it.ref], domain_is_c[std::size_t(it.domain)] ? pre_c : pre_n,
                          std::span<float>(out, geo.floats()));
  };
  Results res;
  for (const auto seed : o.seeds) {
    const auto stream = io::mix_domains(domains, seed);
    const std::size_t nb = (stream.items.size() + std::size_t(o.batch_size) - 1) / std::size_t(o.batch_size);
    fmt::print("seed {}: {} images in {} domains, {} batches\n", seed, stream.items.size(), domains.size(), nb);
    for (const auto& m : methods) {
      Model model = load_vit_b16(*o.checkpoint);
      auto src = loader_source(stream, o.batch_size, geo, fill);
      res[m].push_back(run_method(m, model, src, nb, fisher, seed, display_name(m) + " seed " + std::to_string(seed)));
    }
  }
  std::vector<std::string> names;
  for (const auto& d : domains) names.push_back(d.name);
  fmt::print("\nPer-domain accuracy (%, mean over seeds)\n{}\n", domain_table(methods, res, names));
  fmt::print("{}\n", summary_table(methods, res, o.seeds.size()));
  // Table 1 layout: Model | Setting | Noadapt | Tent | EATA | SAR | Ours, "mean +- std" over seeds.
  std::string head = fmt::format("| {:<9} | {:<10} |", "Model", "Setting"), row = fmt::format("| {:<9} | {:<10} |", "ViT-B/16", o.setting);
  for (const auto& m : methods) {
    std::vector<double> acc;
    for (const auto& r : res[m]) acc.push_back(100 * r.accuracy);
    const auto a = mean_std(acc);
    head += fmt::format(" {:>13} |", display_name(m));
    row += fmt::format(" {:>13} |", fmt::format("{:.2f} +- {:.2f}", a.mean, a.std));
  }
  fmt::print("Table 1 row (accuracy %, mean +- std over {} seeds)\n{}\n{}\n", o.seeds.size(), head, row);
  return 0;
}

}  // namespace moetta_example
