#!/bin/bash
# Reference solution: a find | sort | sha256sum pipeline, run on data/.
set -eu
export PATH=/usr/bin:/bin
cd "${HARNESS_WORKSPACE:-$PWD}"
cat > manifest.sh <<'SH'
#!/bin/bash
# Print "<sha256>  <relative path>" for every regular file under $1, in byte order.
set -eu
dir=${1:?usage: bash manifest.sh DIR}
cd -- "$dir"
find . -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 -r sha256sum --
SH
chmod +x manifest.sh
bash manifest.sh data > MANIFEST.sha256
echo success > status.txt
