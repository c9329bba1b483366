#!/usr/bin/env bash
# End-to-end: `cmake --install` into a staging prefix, then
# examples/ci-consumer (a separate CMake project) finds it with
# find_package(gemtrain), builds its Check test and passes it; a plain C file
# builds with `pkg-config --cflags --libs gemtrain` (the shared library, whose
# soname carries the headers' version) and with `pkg-config --static` (the
# static one, with every private dependency), and both train; the shared
# library exports the API's functions and nothing else; the installed command
# finds its configs. Usage: e2e_install.sh <gemtrain binary> <source dir>
set -euo pipefail
bin="$1"; src="$2"
build=$(dirname "$bin")
work=$(mktemp -d /tmp/gt_e2e_install.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmake --install "$build" --prefix "$work/stage" > "$work/install.log" || { cat "$work/install.log"; fail "install"; }
for f in include/gemtrain/gemtrain.h share/gemtrain/configs/base.json bin/gemtrain; do
  [ -e "$work/stage/$f" ] || fail "missing $f"
done
# only the public API is installed: gemtrain.h and the headers it includes
got=$(cd "$work/stage/include/gemtrain" && ls | tr '\n' ' ')
[ "$got" = "common.h gemtrain.h metrics.h " ] || fail "installed headers: '$got', expected only the public API"
# the configuration struct is private (keys are read and set by name), so a
# new key never changes the ABI: no installed header names it or its fields
if grep -rnE 'gt_config\b|base_emb_dim|GT_STR_PATH' "$work/stage/include"; then
  fail "the installed headers expose gt_config"
fi
cat > "$work/peek.c" <<'C'
#include <gemtrain/gemtrain.h>
int main(void) { gt_config c; return (int)sizeof c; }
C
cat > "$work/keys.c" <<'C'
#include <gemtrain/gemtrain.h>
int main(void) { char v[64]; gt_ctx *c = gt_ctx_new(); int r = gt_ctx_get(c, "learning_rate", v, sizeof v); gt_ctx_free(c); return r; }
C
cc -c -o "$work/keys.o" -I"$work/stage/include" "$work/keys.c" || fail "the installed headers do not compile"
if cc -c -o "$work/peek.o" -I"$work/stage/include" "$work/peek.c" 2> "$work/peek.log"; then
  fail "a program using only the installed headers sees gt_config"
fi
grep -q "gt_config" "$work/peek.log" || { cat "$work/peek.log"; fail "peek.c failed for another reason than gt_config"; }
# and the shared library exports that API only: the functions gt_ctx_*,
# gt_version and gt_rc_str. Any other defined dynamic symbol (data, weak,
# another function, a versioned name) is a leak, whatever its type.
so=$(find "$work/stage" -name libgemtrain.so | head -1)
[ -n "$so" ] || fail "no libgemtrain.so installed"
command -v nm > /dev/null || fail "nm is needed to check the exported symbols"
nm -D --defined-only "$so" > "$work/exports.txt" || fail "nm -D $so"
extra=$(awk '!(NF == 3 && $2 == "T" && ($3 ~ /^gt_ctx_[a-z_0-9]+$/ || $3 == "gt_version" || $3 == "gt_rc_str"))' \
  "$work/exports.txt")
[ -z "$extra" ] || fail "libgemtrain.so exports more than the public API: $(echo $extra | head -c 300)"
for f in gt_ctx_train gt_ctx_set gt_ctx_get gt_rc_str gt_version; do
  grep -q " T $f\$" "$work/exports.txt" || fail "libgemtrain.so does not export $f"
done
# the soname follows the headers' version: the minor one too while the major is 0
hdr="$work/stage/include/gemtrain/common.h"
major=$(sed -n 's/^#define GT_VERSION_MAJOR \([0-9]*\)$/\1/p' "$hdr")
minor=$(sed -n 's/^#define GT_VERSION_MINOR \([0-9]*\)$/\1/p' "$hdr")
patch=$(sed -n 's/^#define GT_VERSION_PATCH \([0-9]*\)$/\1/p' "$hdr")
[ -n "$major" ] && [ -n "$minor" ] && [ -n "$patch" ] || fail "no GT_VERSION_MAJOR/MINOR/PATCH in $hdr"
if [ "$major" = 0 ]; then want_soname="libgemtrain.so.0.$minor"; else want_soname="libgemtrain.so.$major"; fi
if command -v readelf > /dev/null; then
  soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
  [ "$soname" = "$want_soname" ] || fail "libgemtrain.so's soname is '$soname'; expected '$want_soname' (version $major.$minor.$patch)"
fi
ls "$work"/stage/lib*/libgemtrain.so* "$work"/stage/lib*/libgemtrain.a > /dev/null 2>&1 || \
  ls "$work"/stage/lib/*/libgemtrain.so > /dev/null || fail "no libraries installed"

cmake -S "$src/examples/ci-consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/stage" > "$work/c.log" 2>&1 \
  || { cat "$work/c.log"; fail "consumer configure"; }
cmake --build "$work/consumer" > "$work/b.log" 2>&1 || { cat "$work/b.log"; fail "consumer build"; }
# the installed library must find the installed configs, not the source tree's
ctest --test-dir "$work/consumer" --output-on-failure > "$work/t.log" 2>&1 || { cat "$work/t.log"; fail "consumer test"; }

pc=$(dirname "$(find "$work/stage" -name gemtrain.pc | head -1)")
cat > "$work/hello.c" <<'C'
#include <gemtrain/gemtrain.h>
#include <stdio.h>
int main(void) {
  gt_ctx *c = gt_ctx_new();
  const char *ov[] = {"dataset_type=synthetic"};
  int64_t dim = 0;
  if (gt_ctx_configure(c, "gemma3-tiny", 1, ov) || gt_ctx_set_int(c, "base_emb_dim", 48) ||
      gt_ctx_get_int(c, "base_emb_dim", &dim) || gt_ctx_init(c)) {
    printf("%s\n", gt_ctx_error(c));
    return 1;
  }
  double l; gt_rc rc = gt_ctx_train(c, 1, &l);
  printf("params %lld loss %.3f dim %lld %s\n", (long long)gt_ctx_num_params(c), l, (long long)dim, gt_rc_str(rc));
  printf("library %s headers %d.%d.%d\n", gt_version(), GT_VERSION_MAJOR, GT_VERSION_MINOR, GT_VERSION_PATCH);
  gt_ctx_free(c);
  return rc;
}
C
libdir=$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir gemtrain)
# shellcheck disable=SC2046
cc -o "$work/hello" "$work/hello.c" $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs gemtrain) \
  -Wl,-rpath,"$libdir" || fail "pkg-config build"
"$work/hello" > "$work/hello.out" || { cat "$work/hello.out"; fail "pkg-config program failed"; }
grep -q '^params [0-9]* loss [0-9.]* dim 48 ok$' "$work/hello.out" || fail "pkg-config program did not train"
grep -qx "library $major.$minor.$patch headers $major.$minor.$patch" "$work/hello.out" || \
  { cat "$work/hello.out"; fail "gt_version() is not the installed headers' GT_VERSION_*"; }
# the static library: -lgemtrain resolved in a directory holding only
# libgemtrain.a, and everything else it needs from `pkg-config --static`
# (Libs.private, Requires.private). A program linked statically has no
# library file to find its configs beside: GEMTRAIN_CONFIG_DIR names them
# (docs/library.md).
mkdir -p "$work/static-only"
ln -s "$libdir/libgemtrain.a" "$work/static-only/libgemtrain.a"
# shellcheck disable=SC2046
cc -o "$work/hello_static" "$work/hello.c" -L"$work/static-only" \
  $(PKG_CONFIG_PATH="$pc" pkg-config --static --cflags --libs gemtrain) > "$work/static.log" 2>&1 || \
  { cat "$work/static.log"; fail "pkg-config --static build"; }
if command -v readelf > /dev/null && readelf -d "$work/hello_static" | grep -q 'libgemtrain\.so'; then
  fail "the pkg-config --static program links libgemtrain.so, not libgemtrain.a"
fi
GEMTRAIN_CONFIG_DIR="$work/stage/share/gemtrain/configs" "$work/hello_static" > "$work/hello_static.out" || \
  { cat "$work/hello_static.out"; fail "pkg-config --static program failed"; }
grep -q '^params [0-9]* loss [0-9.]* dim 48 ok$' "$work/hello_static.out" || \
  { cat "$work/hello_static.out"; fail "pkg-config --static program did not train"; }
# the installed command finds the installed configs
GEMTRAIN_CONFIG_DIR= "$work/stage/bin/gemtrain" train model_name=gemma3-4b dump_config=true > "$work/dump.json"
grep -q '"base_emb_dim":[[:space:]]*2560' "$work/dump.json" || fail "installed gemtrain lacks its configs"
echo "e2e_install: 1 passed, 0 failed"
