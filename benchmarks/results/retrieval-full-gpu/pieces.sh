# Here, from the checkout root: cut a GGUF file into the folders .rf1, .rf2, ... that the carrying calls take
# (`stash.sh .rfN` for all but the last, whose run script sources assemble.sh), each small enough that the
# working tree plus the folder stays under a call's 64 MiB:
#   bash benchmarks/results/retrieval-full-gpu/pieces.sh FILE.gguf NAME TASKS_DIR
# TASKS_DIR holds scifact.json and nfcorpus.json (`retrieval_full.py export`); .rf1 also gets them gzipped and the
# transformers and gguf wheels. Add /.rf*/ to .git/info/exclude first. Prints the folders and what each call carries.
set -e
file=$1 name=$2 tasks=$3
limit=65900000  # bytes a call carried at most here without being refused (64 MiB is 67,108,864)
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
untracked=$(git ls-files -o --exclude-standard -z | xargs -0 -r du -cb | tail -1 | cut -f1)
tree=$(( tracked + ${untracked:-0} ))
rm -rf .rf[0-9]*
mkdir -p .rf1
gzip -9 -c "$tasks/scifact.json" > .rf1/scifact.json.gz
gzip -9 -c "$tasks/nfcorpus.json" > .rf1/nfcorpus.json.gz
cp .whl/transformers-5.24.0-py3-none-any.whl .rf1/
python3 -m pip download -q --no-deps --only-binary=:all: gguf==0.19.0 -d .rf1
size=$(stat -c %s "$file") offset=0 i=1
while [ "$offset" -lt "$size" ]; do
  mkdir -p ".rf$i"
  room=$(( limit - tree - $(du -sb ".rf$i" | cut -f1) - 100000 ))
  piece=".rf$i/$name.gguf.$(printf %02d $(( i - 1 )))"
  tail -c +$(( offset + 1 )) "$file" | head -c "$room" > "$piece"
  offset=$(( offset + $(stat -c %s "$piece") ))
  echo ".rf$i: $(( tree + $(du -sb ".rf$i" | cut -f1) )) bytes with the tree"
  i=$(( i + 1 ))
done
for j in $(seq 1 $(( i - 1 ))); do cat ".rf$j/$name".gguf.*; done | sha256sum
