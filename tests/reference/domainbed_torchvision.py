"""DomainBed split and torchvision transform references for tests/data/test_domainbed_parity.cpp.

Writes <out>/parity/domainbed_torchvision.safetensors with
  * split_<trial>_<env>_<n>_{in,out}: DomainBed's in/out split of an environment of n items
    (misc.seed_hash = md5 of str((trial, env)) mod 2**31; np.random.RandomState(seed).shuffle of the
    keys; the first int(n * 0.2) are `out`), and seed_<trial>_<env> the seed itself;
  * colour_src and colour_<op>: torchvision.transforms.functional's float-tensor colour operations
    (adjust_brightness / contrast / saturation / hue, rgb_to_grayscale) on one fixed image;
  * eval_src (uint8 HWC) and eval_out: DomainBed's evaluation transform Resize((24, 24)), ToTensor,
    Normalize(ImageNet) through PIL;
  * rrc_*: statistics of 20,000 RandomResizedCrop.get_params draws (scale 0.7-1) on a 90x160 image;
  * metadata imagefolder_samples: torchvision ImageFolder's samples for each environment of a probe tree
    of empty files written to <out>/domainbed_tree/toy (DomainBed's environments: sorted sub-folders);
  * aug_*: per-channel means of DomainBed's full training Compose (at 32 px, on the float tensor) over 2000
    draws of one image.
Runs with the pinned reference environment (torchvision 0.29.2, numpy, Pillow); about a second.
"""
import argparse
import hashlib
import math
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms
import torchvision.transforms.functional as TF

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def seed_hash(*args):
    return int(hashlib.md5(str(args).encode("utf-8")).hexdigest(), 16) % (2 ** 31)


def split(n, trial, env, holdout=0.2):
    keys = list(range(n))
    np.random.RandomState(seed_hash(trial, env)).shuffle(keys)
    k = int(n * holdout)
    return keys[k:], keys[:k]


def smooth_image(h, w, seed):
    """A colourful, smooth uint8 RGB image (resizing it is meaningful, not noise)."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        a, b, p = rng.uniform(0.05, 0.3, 3)
        img[..., c] = 0.5 + 0.45 * np.sin(a * x + b * y + 6 * p)
    return np.round(img * 255).astype(np.uint8)


def imagefolder_tree(out_dir):
    """A DomainBed-layout tree of empty files whose names probe the ordering rules (case, spaces, non-ASCII,
    nested folders, extensions in any case, files ImageFolder ignores), and DomainBed's reading of it:
    environments = sorted sub-folders, each an ImageFolder. Returns {env: [[relative path, target], ...]}."""
    import json
    from torchvision.datasets import ImageFolder
    root = os.path.join(out_dir, "domainbed_tree", "toy")
    files = ["img10.jpg", "img2.JPG", "Z.png", "a b.jpeg", "notes.txt", "sub/dir/1.jpeg", "sub 2/0.webp",
             "sub-a/3.bmp", "Sub/4.pgm", "\u00e9t\u00e9.PNG", "x.tiff", "y.gif"]
    for env in ["Real World", "art", "Clipart"]:
        for cls in ["b", "a", "A_x", "\u00fcn\u00ef"]:
            for f in files:
                p = os.path.join(root, env, cls, f)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "wb").close()
    result = {}
    for env in sorted(e.name for e in os.scandir(root) if e.is_dir()):
        ds = ImageFolder(os.path.join(root, env))
        result[env] = [[os.path.relpath(path, root), target] for path, target in ds.samples]
    return json.dumps(result, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the test-data folder (the fixture goes to its parity/)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t = {}
    meta = {"component": "domainbed_torchvision", "torchvision_version": __import__("torchvision").__version__,
            "numpy_version": np.__version__}
    meta["imagefolder_samples"] = imagefolder_tree(a.out)
    cases = [(0, 0, 100), (0, 3, 1000), (2, 1, 37), (1, 2, 9991), (5, 5, 4)]
    meta["split_cases"] = ";".join(f"{tr},{e},{n}" for tr, e, n in cases)
    for tr, e, n in cases:
        i, o = split(n, tr, e)
        t[f"split_{tr}_{e}_{n}_in"] = np.array(i, dtype=np.int64)
        t[f"split_{tr}_{e}_{n}_out"] = np.array(o, dtype=np.int64)
        t[f"seed_{tr}_{e}"] = np.array([seed_hash(tr, e)], dtype=np.int64)

    g = torch.Generator().manual_seed(0)
    src = torch.rand(3, 16, 20, generator=g, dtype=torch.float32)
    src[:, 0, 0] = torch.tensor([0.5, 0.5, 0.5])  # a gray pixel (hue undefined)
    src[:, 0, 1] = torch.tensor([0.9, 0.9, 0.1])  # a tie between red and green
    t["colour_src"] = src
    t["colour_brightness_1.2"] = TF.adjust_brightness(src, 1.2)
    t["colour_contrast_0.75"] = TF.adjust_contrast(src, 0.75)
    t["colour_saturation_1.3"] = TF.adjust_saturation(src, 1.3)
    t["colour_hue_0.2"] = TF.adjust_hue(src, 0.2)
    t["colour_hue_-0.27"] = TF.adjust_hue(src, -0.27)
    t["colour_gray"] = TF.rgb_to_grayscale(src, num_output_channels=3)
    t["colour_contrast_1ch_1.25"] = TF.adjust_contrast(src[:1], 1.25)  # one channel: blend with its own mean

    ev = smooth_image(37, 53, 1)
    t["eval_src"] = ev
    eval_tf = transforms.Compose([transforms.Resize((24, 24)), transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    t["eval_out"] = eval_tf(Image.fromarray(ev))

    torch.manual_seed(0)
    rrc = transforms.RandomResizedCrop(224, scale=(0.7, 1.0))
    frac, logr = [], []
    probe = Image.new("RGB", (160, 90))
    for _ in range(20000):
        i, j, h, w = rrc.get_params(probe, rrc.scale, rrc.ratio)
        frac.append(h * w / (90 * 160))
        logr.append(math.log(w / h))
    frac, logr = np.array(frac), np.array(logr)
    t["rrc_frac_stats"] = np.array([frac.mean(), frac.std(), frac.min(), frac.max()])
    t["rrc_logratio_stats"] = np.array([logr.mean(), logr.std(), logr.min(), logr.max()])

    au = smooth_image(48, 64, 2)
    t["aug_src"] = au
    # On a float tensor (ToTensor done first), the path ttmoe implements: through PIL every colour step
    # would truncate to 8 bits (Image.blend casts down), which darkens by about 0.5/255 per step.
    train_tf = transforms.Compose([
        transforms.RandomResizedCrop(32, scale=(0.7, 1.0), antialias=True), transforms.RandomHorizontalFlip(),
        transforms.ColorJitter(0.3, 0.3, 0.3, 0.3), transforms.RandomGrayscale(), transforms.Normalize(MEAN, STD)])
    x = TF.to_tensor(Image.fromarray(au))
    means = torch.stack([train_tf(x).mean(dim=(1, 2)) for _ in range(2000)])  # [2000, 3]
    t["aug_channel_means"] = means
    os.makedirs(os.path.join(a.out, "parity"), exist_ok=True)
    st.save(os.path.join(a.out, "parity", "domainbed_torchvision.safetensors"),
            {k: (v.detach().numpy() if torch.is_tensor(v) else v) for k, v in t.items()}, meta)


if __name__ == "__main__":
    main()
