#pragma once
// Full scale: ViT-B/16 from a timm or torchvision safetensors checkpoint on ImageNet-C (+ R, Sketch,
// A, val), the classical / potpourri / potpourri+ streams (data::setting_domains decides which folders
// each needs), normalised per checkpoint (--normalize), printed as the paper's Table-1 row.

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ttmoe/data/datasets.hpp>
#include <ttmoe/data/datasets_transform.hpp>
#include <ttmoe/data/streams.hpp>
#include <ttmoe/nn/checkpoint.hpp>

#include "args.hpp"
#include "experiment.hpp"

namespace moetta_example {

/// The key-name layout of a ViT-B/16 safetensors checkpoint.
enum class CheckpointLayout { timm, torchvision };

/// timm or torchvision, decided by which class-token key the file has.
inline CheckpointLayout detect_layout(const io::SafetensorsFile& f) {
  if (f.contains("cls_token")) return CheckpointLayout::timm;
  if (f.contains("class_token")) return CheckpointLayout::torchvision;
  throw std::runtime_error(f.path() + ": neither a timm (cls_token) nor a torchvision (class_token) ViT checkpoint");
}

/// timm or torchvision key names, by the checkpoint's layout.
inline io::NameMap detect_names(const io::SafetensorsFile& f) {
  return detect_layout(f) == CheckpointLayout::timm ? io::timm_names() : io::torchvision_vit_names();
}

/// The input normalisation for `layout` under --normalize `choice` (auto | imagenet | half), and why.
/// auto: timm key names -> mean = std = 0.5 (the augreg ViT-B/16 the paper uses; a DeiT-style timm
/// checkpoint trained with ImageNet statistics needs --normalize imagenet), torchvision -> the ImageNet
/// statistics its vit_b_16 weights were trained with.
inline std::pair<data::Normalization, std::string> choose_normalization(CheckpointLayout layout, const std::string& choice) {
  const std::string kind = layout == CheckpointLayout::timm ? "timm key names" : "torchvision vit_b_16 key names";
  if (choice != "auto") return {data::normalization_by_name(choice), "--normalize " + choice + ", checkpoint has " + kind};
  if (layout == CheckpointLayout::timm)
    return {data::half_normalization(), "auto: " + kind + " (augreg ViT-B/16); --normalize imagenet overrides"};
  return {data::imagenet_normalization(), "auto: " + kind + "; --normalize half overrides"};
}

/// A fresh ViT-B/16 with the checkpoint's weights.
inline Model load_vit_b16(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) throw std::runtime_error("--checkpoint: file " + path.string() + " does not exist");
  io::SafetensorsFile f(path);
  Model m = [] {
    nn::SkipInit no_draws;  // the strict load below reads every parameter
    return Model(models::vit_base_patch16(), 0);
  }();
  nn::load_state(m, f, detect_names(f));
  return m;
}

/// Runs the full-scale benchmark and prints per-domain accuracy and the Table-1 row.
inline int run_imagenet(const Options& o) {
  if (!std::filesystem::exists(*o.checkpoint))  // fail before the (slow) folder scans
    throw std::runtime_error("--checkpoint: file " + *o.checkpoint + " does not exist");
  const auto setting = data::parse_setting(o.setting);
  const auto methods = selected_methods(o);
  const auto chosen = [&] {
    io::SafetensorsFile f(*o.checkpoint);
    return choose_normalization(detect_layout(f), o.normalize);
  }();
  const data::Normalization& norm = chosen.first;
  fmt::print("normalisation: {} ({})\n", norm.describe(), chosen.second);
  // The setting's domains from the folders given (essential ones missing: an error; optional ones
  // missing: a warning on stderr).
  data::SettingFolders folders;
  auto as_path = [](const std::optional<std::string>& s) -> std::optional<std::filesystem::path> {
    if (!s) return std::nullopt;
    return std::filesystem::path(*s);
  };
  folders.imagenet_c = as_path(o.imagenet_c);
  folders.imagenet_r = as_path(o.imagenet_r);
  folders.imagenet_sketch = as_path(o.imagenet_sketch);
  folders.imagenet_a = as_path(o.imagenet_a);
  folders.imagenet_val = as_path(o.imagenet_val);
  std::vector<std::string> corr;
  for (auto c : data::corruptions::all_corruptions) corr.emplace_back(data::corruptions::corruption_name(c));
  const auto plan = data::setting_domains(setting, folders, corr, o.severity);
  for (const auto& w : plan.warnings) fmt::print(stderr, "warning: {}\n", w);
  // Domains: files table + per-domain preprocessing.
  std::vector<std::filesystem::path> files;
  std::vector<data::DomainItems> domains;
  std::vector<int> domain_is_c;
  std::optional<std::vector<std::string>> classes;  // the 1000 wnids, resolved on first need
  std::optional<data::ClassFolderDataset> val;         // the validation set, scanned once
  auto scan_val = [&]() -> const data::ClassFolderDataset& {
    if (!val) val = data::scan_class_folders(*o.imagenet_val, {}, "--imagenet-val");
    return *val;
  };
  for (const auto& spec : plan.domains) {
    const std::string what = spec.kind == data::DomainKind::corruption ? "--imagenet-c " + spec.name : "--" + spec.name;
    data::ClassFolderDataset ds;
    if (spec.kind == data::DomainKind::clean) {
      ds = scan_val();
    } else if (data::needs_class_list(spec.kind)) {
      if (!classes) {
        data::ClassListSources src;
        if (o.imagenet_classes) src.classes_file = *o.imagenet_classes;
        if (o.imagenet_val) src.full_class_dirs.push_back(*o.imagenet_val);
        src.full_class_dirs.push_back(plan.domains.front().folder);  // an ImageNet-C corruption: 1000 folders
        classes = data::imagenet_class_list(src);
      }
      ds = data::scan_class_folders(spec.folder, *classes, what);
    } else {
      ds = data::scan_class_folders(spec.folder, {}, what);
    }
    data::DomainItems d{spec.name, {}};
    for (const auto& f : ds.files) {
      d.items.push_back({files.size(), f.label, 0});
      files.push_back(f.path);
    }
    d.items = data::subsample(d.items, o.limit, 7 + domains.size());  // same subset for every seed
    domains.push_back(std::move(d));
    domain_is_c.push_back(spec.kind == data::DomainKind::corruption);
  }
  std::vector<Images> fisher;
  if (o.imagenet_val) {
    // EATA's Fisher: 2000 clean validation images (a fixed random subset).
    const auto& v = scan_val();
    std::vector<data::StreamItem> all;
    for (std::size_t i = 0; i < v.files.size(); ++i) all.push_back({i, v.files[i].label, 0});
    const auto pick = data::subsample(all, 2000, 99);
    const auto pre = data::imagenet_preprocess(norm);
    for (std::size_t b0 = 0; b0 < pick.size(); b0 += std::size_t(o.batch_size)) {
      const std::size_t n = std::min(pick.size() - b0, std::size_t(o.batch_size));
      Images x(DynShape<4>(index_t(n), 3, 224, 224));
      for (std::size_t k = 0; k < n; ++k)
        data::load_preprocessed(v.files[pick[b0 + k].ref].path, pre,
                                std::span<float>(x.data() + k * pre.image_floats(), pre.image_floats()));
      fisher.push_back(x);
    }
  } else if (std::any_of(methods.begin(), methods.end(), [](const std::string& m) { return tta::method_info(m).needs_fisher; })) {
    fmt::print(stderr, "note: no --imagenet-val: EATA runs without its Fisher regulariser (ETA)\n");
  }
  const auto pre_c = data::imagenet_c_preprocess(norm), pre_n = data::imagenet_preprocess(norm);
  const Geometry geo{3, 224, 224};
  auto fill = [&](const data::StreamItem& it, float* out) {
    data::load_preprocessed(files[it.ref], domain_is_c[std::size_t(it.domain)] ? pre_c : pre_n,
                            std::span<float>(out, geo.floats()));
  };
  Results res;
  const HyperSet paper = tta_common::paper_defaults();  // full scale: the papers' settings, unchanged
  for (const auto seed : o.seeds) {
    const auto stream = data::mix_domains(domains, seed);
    const std::size_t nb = (stream.items.size() + std::size_t(o.batch_size) - 1) / std::size_t(o.batch_size);
    fmt::print("seed {}: {} images in {} domains, {} batches\n", seed, stream.items.size(), domains.size(), nb);
    for (const auto& m : methods) {
      Model model = load_vit_b16(*o.checkpoint);
      auto src = loader_source(stream, o.batch_size, geo, fill);
      res[m].push_back(run_method(m, paper.at(m), model, src, nb, fisher, seed, display_name(m) + " seed " + std::to_string(seed)));
    }
  }
  std::vector<std::string> names;
  for (const auto& d : domains) names.push_back(d.name);
  fmt::print("\nPer-domain accuracy (%, mean over seeds)\n{}\n", domain_table(methods, res, names));
  fmt::print("{}\n", summary_table(methods, res, o.seeds.size()));
  // Table 1 layout: Model | Setting | Noadapt | Tent | EATA | SAR | Ours, "mean +- std" over seeds.
  fmt::print("Table 1 row (accuracy %, mean +- std over {} seeds)\n{}", o.seeds.size(),
             tta_common::paper_row(methods, res, {{"Model", "ViT-B/16", 9}, {"Setting", o.setting, 10}}));
  return 0;
}

}  // namespace moetta_example
