"""Box IoU in numpy for pycocotools' COCOeval, where pycocotools (its compiled _mask) is not installed.

The CUDA machine has no pycocotools and reaches no package index. benchmarks/fidelity/common.sh
`coco_shim` assembles a `pycocotools` package from the public cocoapi's pure-Python coco.py and
cocoeval.py (a fetched snapshot, carried) and this module in place of its C extension, so that the
original's own validator (COCOeval, iouType "bbox") runs unchanged. Only what bbox evaluation calls is
here: `iou(dt, gt, iscrowd)`, the arithmetic of cocoapi's common/maskApi.c bbIou. Masks are refused.
"""
import numpy as np


def _boxes(a):
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != 4:
        raise TypeError("this pycocotools shim evaluates boxes only: expected an (N, 4) list of [x, y, w, h], "
                        f"got shape {a.shape}")
    return a


def iou(dt, gt, iscrowd):
    """IoU of every detection box with every ground-truth box, shape (len(dt), len(gt)); [] when either is
    empty (as the extension returns). A crowd ground truth divides by the detection's area alone."""
    if len(dt) == 0 or len(gt) == 0:
        return []
    d, g = _boxes(dt), _boxes(gt)
    crowd = np.asarray(iscrowd, dtype=bool).reshape(1, -1) if iscrowd is not None else np.zeros((1, len(g)), bool)
    w = np.minimum(d[:, None, 0] + d[:, None, 2], g[None, :, 0] + g[None, :, 2]) - np.maximum(d[:, None, 0], g[None, :, 0])
    h = np.minimum(d[:, None, 1] + d[:, None, 3], g[None, :, 1] + g[None, :, 3]) - np.maximum(d[:, None, 1], g[None, :, 1])
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    da = (d[:, 2] * d[:, 3])[:, None]
    ga = (g[:, 2] * g[:, 3])[None, :]
    union = np.where(crowd, da, da + ga - inter)
    return np.where(inter > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _refuse(*_a, **_k):
    raise NotImplementedError("this pycocotools shim evaluates boxes only (no RLE masks)")


encode = decode = area = toBbox = merge = frPyObjects = _refuse
