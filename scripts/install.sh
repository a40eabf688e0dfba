#!/usr/bin/env bash
# Installs clipflow as a Linux tool: scripts/install.sh PREFIX PRODUCTS
#   PREFIX/bin/clipflow                                   the binary from PRODUCTS (a build folder
#                                                         holding clipflow and generate-manual)
#   PREFIX/share/man/man1/clipflow*.1                     a man page per command (man clipflow.merge),
#                                                         made by swift-argument-parser's generate-manual
#   PREFIX/share/bash-completion/completions/clipflow     completions, from clipflow itself
#   PREFIX/share/zsh/site-functions/_clipflow
#   PREFIX/share/fish/vendor_completions.d/clipflow.fish
# `make install PREFIX=...` builds the release products, then runs this. Existing files of an
# earlier install are replaced; nothing else under PREFIX is touched.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/install.sh PREFIX PRODUCTS" >&2; exit 64; }
prefix=$1 products=$2
for p in clipflow generate-manual; do
  [ -x "$products/$p" ] || { echo "error: $products/$p is missing; build it first (make install does)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/man"
"$products/generate-manual" "$products/clipflow" --multi-page --date "$(date -u +%Y-%m-%d)" --output-directory "$work/man" >/dev/null
ls "$work/man"/*.1 >/dev/null 2>&1 || { echo "error: generate-manual made no man pages" >&2; exit 1; }
for shell in bash zsh fish; do "$products/clipflow" --generate-completion-script "$shell" >"$work/completion.$shell"; done

install -D -m 0755 "$products/clipflow" "$prefix/bin/clipflow"
install -d -m 0755 "$prefix/share/man/man1"
install -m 0644 "$work/man"/*.1 "$prefix/share/man/man1/"
install -D -m 0644 "$work/completion.bash" "$prefix/share/bash-completion/completions/clipflow"
install -D -m 0644 "$work/completion.zsh" "$prefix/share/zsh/site-functions/_clipflow"
install -D -m 0644 "$work/completion.fish" "$prefix/share/fish/vendor_completions.d/clipflow.fish"
echo "installed clipflow into $prefix: bin/clipflow, $(ls "$work/man" | wc -l) man pages (man clipflow, man clipflow.merge, ...), bash/zsh/fish completions"
