#!/usr/bin/env bash
# The .orig folder the fidelity scripts read (original_train.py, original_step.py, side_by_side.sh, common.sh's
# coco_shim), from snapshots brought by the search tool's `fetch` (nothing of them is committed; .orig is ignored):
#   benchmarks/fidelity/prepare_orig.sh LIBREYOLO_MIRROR [COMMIT] [COCOAPI_MIRROR]
#     LIBREYOLO_MIRROR: the git directory of github:LibreYOLO/libreyolo (e.g. /work/.mirror/LibreYOLO+libreyolo/repo)
#     COMMIT: the original's commit (default c41461e, the fixtures' snapshot)
#     COCOAPI_MIRROR: the git directory of github:cocodataset/cocoapi (its PythonAPI coco.py and cocoeval.py)
# Makes .orig/libreyolo = the original's *package* folder (libreyolo/ of the snapshot, not its repository root),
# .orig/COMMIT, and .orig/cocoapi/{coco.py,cocoeval.py,COMMIT}. Carry .orig to the CUDA machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
mirror=${1:?usage: prepare_orig.sh LIBREYOLO_MIRROR [COMMIT] [COCOAPI_MIRROR]}
commit=${2:-c41461e}
coco=${3:-}
rm -rf .orig/libreyolo && mkdir -p .orig
git -C "$mirror" archive "$commit" libreyolo | tar -x -C .orig
git -C "$mirror" rev-parse "$commit^{commit}" > .orig/COMMIT
[ -f .orig/libreyolo/__init__.py ] || { echo "prepare_orig: $commit has no libreyolo/__init__.py" >&2; exit 1; }
if [ -n "$coco" ]; then
  mkdir -p .orig/cocoapi
  for f in coco.py cocoeval.py; do git -C "$coco" show "HEAD:PythonAPI/pycocotools/$f" > ".orig/cocoapi/$f"; done
  git -C "$coco" rev-parse HEAD > .orig/cocoapi/COMMIT
fi
grep -qx "/.orig/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo "/.orig/" >> .git/info/exclude; }
echo "prepare_orig: .orig/libreyolo at $(cat .orig/COMMIT)$( [ -n "$coco" ] && echo ", cocoapi at $(cat .orig/cocoapi/COMMIT)")"
