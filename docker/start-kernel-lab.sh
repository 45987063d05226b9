#!/usr/bin/env bash
# Entry point of the Kernel Lab image: put the learner's working copy of the course in the home
# directory (a mounted volume), then run the command (JupyterLab, or the hub's jupyterhub-singleuser).
#
# Nothing a learner wrote is overwritten:
# - course/ is copied file by file without overwriting (cp --no-clobber); then the course generator
#   brings notebooks the learner never edited up to date with this image's solutions and keeps the
#   edited ones (python -m kernel_lab.exercises: the same rule as in a clone of the repository);
# - solutions/ and images/ are reference material: refreshed from the image at every start, and
#   read-only, so there is nothing of the learner's in them to lose.
set -euo pipefail
src="${KERNEL_LAB_IMAGE_COPY:-/opt/kernel-lab}"  # the read-only course in the image
dst="${KERNEL_LAB_HOME:-$HOME/kernel-lab}"
mkdir -p "$dst/course"
for ref in solutions images; do
  if [ -d "$dst/$ref" ]; then chmod -R u+w "$dst/$ref"; rm -rf "$dst/$ref"; fi
  cp -r "$src/$ref" "$dst/$ref"
  chmod -R a-w "$dst/$ref"
done
cp -r --no-clobber "$src/course/." "$dst/course/"
chmod -R u+w "$dst/course"
python -m kernel_lab.exercises --root "$dst" > /dev/null || echo "start-kernel-lab: course/ kept as it is" >&2
exec "$@"
