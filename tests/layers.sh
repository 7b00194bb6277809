#!/bin/sh
# layers.sh SRCDIR - the library's folders depend one way (issue #19):
#
#   api/ -> engine/ -> lm/ -> jit/, cache/, generic/ -> runtime/
#
# (generic/: the tier-0 kernels compiled with the library, engine/ runs them)
#
# and outside the library: tools/ (command line) -> train/ (the offline
# pipeline) -> the library's internal headers.
#
# Every #include of a library file names a folder below its own (or its own
# folder); jit/, cache/ and generic/ do not include each other; nothing in the library
# includes train/, tools/, samples/ or bench/, and train/ is not compiled
# into libtlm. The public header tlm.h is the vocabulary of every layer and
# may be included anywhere, but no function it declares is called from
# below api/: nothing in libtlm calls its own public API.
# Exit 0 when the tree keeps these rules, 1 with one line per violation.
set -u
src=${1:-$(dirname "$0")/..}
cd "$src" || exit 2

rank() {
  case $1 in
  runtime) echo 0 ;;
  jit | cache | generic) echo 1 ;;
  lm) echo 2 ;;
  engine) echo 3 ;;
  api) echo 4 ;;
  *) echo 99 ;;
  esac
}

bad=0
fail() {
  echo "layers: $*"
  bad=1
}

for dir in runtime jit cache generic lm engine api; do
  r=$(rank "$dir")
  for f in "$dir"/*.c "$dir"/*.h; do
    [ -e "$f" ] || continue
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
      sed 's/^\([0-9]*\):.*"\([^"]*\)".*/\1 \2/' |
      while read -r line inc; do
        case $inc in
        ../*/*) to=${inc#../}; to=${to%%/*} ;;
        */*) to=${inc%%/*} ;;
        tlm.h) continue ;;
        *)
          if [ -e "$dir/$inc" ]; then continue; fi
          echo "layers: $f:$line: \"$inc\" is not in $dir/"
          continue
          ;;
        esac
        [ "$to" = "$dir" ] && continue
        tr=$(rank "$to")
        if [ "$tr" -ge "$r" ]; then
          echo "layers: $f:$line: $dir/ includes $inc ($to/ is not below $dir/)"
        fi
      done
  done
done >/tmp/tlm_layers.$$ 2>&1
if [ -s /tmp/tlm_layers.$$ ]; then
  cat /tmp/tlm_layers.$$
  bad=1
fi
rm -f /tmp/tlm_layers.$$

# train/ and tools/ stay out of the library's sources
if sed -n '/^set(TLM_SOURCES/,/)/p' CMakeLists.txt | grep -q -E '(train|tools|samples|bench)/'; then
  fail "CMakeLists.txt: TLM_SOURCES lists a file of train/, tools/, samples/ or bench/"
fi

# functions of the public API, called below api/
api_fns=$(grep -o '^[a-z][a-z_ ]*[ *]tlm_[a-z0-9_]*(' api/tlm.h | sed 's/.*[ *]\(tlm_[a-z0-9_]*\)(/\1/' | sort -u)
[ -n "$api_fns" ] || fail "no function declarations found in api/tlm.h"
pattern=$(echo "$api_fns" | paste -sd'|' -)
for dir in runtime jit cache generic lm engine; do
  for f in "$dir"/*.c "$dir"/*.h; do
    [ -e "$f" ] || continue
    # drop comment lines (" * ...", "/* ...", "// ...") before looking for calls
    hits=$(grep -n -E "(^|[^a-z0-9_])($pattern)[[:space:]]*\(" "$f" |
      grep -v -E '^[0-9]+:[[:space:]]*(\*|/\*|//)')
    if [ -n "$hits" ]; then
      echo "$hits" | while IFS= read -r h; do
        echo "layers: $f:${h%%:*}: calls the public API from $dir/"
      done
      bad=1
    fi
  done
done

# train/ (the offline pipeline) sits above the library and below the
# command-line front end: it includes nothing of tools/, samples/ or bench/,
# and parses no command line (tools/ does, into train/'s options)
for f in train/*.c train/*.h; do
  [ -e "$f" ] || continue
  if grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(\.\./)?(tools|samples|bench)/' "$f"; then
    fail "$f includes a file of tools/, samples/ or bench/"
  fi
  if grep -q -E '\bargv\b' "$f"; then
    fail "$f parses a command line (argv): that belongs to tools/"
  fi
done

[ $bad -eq 0 ] && echo "layers: every include and call goes down the stack"
exit $bad
