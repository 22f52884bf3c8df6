#!/usr/bin/env python3
"""A small YOLO-format detection set for the original's trainer where our CLI is not built yet (conv_algos.py
needs one batch of real images and boxes, not a data set to learn): coloured rectangles and ellipses on noise.

    python3 tiny_set.py OUT [images=20] [imgsz=640] [classes=8] [seed=0]

Layout as `libreyolo data synth`: OUT/images/{train,val}/NNNNN.jpg, OUT/labels/{train,val}/NNNNN.txt, OUT/data.yaml
(the last fifth of the images are val). Needs numpy and cv2 (both on the CUDA machine, for the original)."""
import os
import sys

import cv2
import numpy as np


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    kv = dict(a.split("=", 1) for a in sys.argv[2:])
    n, sz, nc, seed = (int(kv.get(k, d)) for k, d in (("images", 20), ("imgsz", 640), ("classes", 8), ("seed", 0)))
    rng = np.random.default_rng(seed)
    n_val = max(1, n // 5)
    for i in range(n):
        split = "val" if i >= n - n_val else "train"
        os.makedirs(f"{out}/images/{split}", exist_ok=True)
        os.makedirs(f"{out}/labels/{split}", exist_ok=True)
        img = rng.integers(0, 256, (sz, sz, 3), dtype=np.uint8)
        img = cv2.GaussianBlur(img, (0, 0), 3)
        lines = []
        for _ in range(int(rng.integers(1, 7))):
            c = int(rng.integers(0, nc))
            w, h = (int(v) for v in rng.integers(sz // 16, sz // 3, 2))
            x, y = int(rng.integers(0, sz - w)), int(rng.integers(0, sz - h))
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            if c % 2:
                cv2.ellipse(img, (x + w // 2, y + h // 2), (w // 2, h // 2), 0, 0, 360, colour, -1)
            else:
                cv2.rectangle(img, (x, y), (x + w, y + h), colour, -1)
            lines.append(f"{c} {(x + w / 2) / sz:.6f} {(y + h / 2) / sz:.6f} {w / sz:.6f} {h / sz:.6f}")
        cv2.imwrite(f"{out}/images/{split}/{i:05d}.jpg", img)
        with open(f"{out}/labels/{split}/{i:05d}.txt", "w") as f:
            f.write("\n".join(lines) + "\n")
    with open(f"{out}/data.yaml", "w") as f:
        f.write("train: images/train\nval: images/val\n" + f"nc: {nc}\nnames:\n")
        f.writelines(f"  {k}: c{k}\n" for k in range(nc))
    print(f"tiny_set: {n} images ({n_val} val), {nc} classes, {sz} px, in {out}")


if __name__ == "__main__":
    main()
